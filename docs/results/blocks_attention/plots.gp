# Written by gpt sweep; run from this folder: gnuplot plots.gp
set terminal pngcairo size 1100,700 font ',11' noenhanced
set grid
set key outside right
set logscale x 2
set xrange [0.85:18.4]
set xtics ('1x' 1, '2x' 2, '4x' 4, '8x' 8, '16x' 16)
set xlabel 'evaluation context / training context (T = 128)'
set output 'loss_vs_context.png'
set ylabel 'validation loss (nats/token)'
set title 'Validation loss past the training context (band: 95% interval of the mean over seeds, or over the validation windows for one seed; dashed: evaluated with another attention, no retraining)'
set logscale y
set ytics (1.5, 1.75, 2, 2.5, 3, 4, 5, 6, 8, 10)
  plot 'loss.dat' index 0 using 1:5:6 with filledcurves fs transparent solid 0.15 lc rgb '#1f77b4' notitle, 'loss.dat' index 0 using 1:2 with linespoints lw 2 lc rgb '#1f77b4' dt 1 title 'llama', \
  'loss.dat' index 1 using 1:5:6 with filledcurves fs transparent solid 0.15 lc rgb '#d62728' notitle, 'loss.dat' index 1 using 1:2 with linespoints lw 2 lc rgb '#d62728' dt 1 title 'llama+qk_norm', \
  'loss.dat' index 2 using 1:5:6 with filledcurves fs transparent solid 0.15 lc rgb '#2ca02c' notitle, 'loss.dat' index 2 using 1:2 with linespoints lw 2 lc rgb '#2ca02c' dt 1 title 'llama+lssar_p15', \
  'loss.dat' index 3 using 1:5:6 with filledcurves fs transparent solid 0.15 lc rgb '#ff7f0e' notitle, 'loss.dat' index 3 using 1:2 with linespoints lw 2 lc rgb '#ff7f0e' dt 1 title 'llama+cosine', \
  'loss.dat' index 4 using 1:5:6 with filledcurves fs transparent solid 0.15 lc rgb '#9467bd' notitle, 'loss.dat' index 4 using 1:2 with linespoints lw 2 lc rgb '#9467bd' dt 1 title 'llama+ssmax', \
  'loss.dat' index 5 using 1:5:6 with filledcurves fs transparent solid 0.15 lc rgb '#8c564b' notitle, 'loss.dat' index 5 using 1:2 with linespoints lw 2 lc rgb '#8c564b' dt 1 title 'llama+kerple_log', \
  'loss.dat' index 6 using 1:5:6 with filledcurves fs transparent solid 0.15 lc rgb '#e377c2' notitle, 'loss.dat' index 6 using 1:2 with linespoints lw 2 lc rgb '#e377c2' dt 1 title 'llama+stick_breaking', \
  'loss.dat' index 7 using 1:5:6 with filledcurves fs transparent solid 0.15 lc rgb '#7f7f7f' notitle, 'loss.dat' index 7 using 1:2 with linespoints lw 2 lc rgb '#7f7f7f' dt 1 title 'gpt2+ssmax', \
  'loss.dat' index 8 using 1:5:6 with filledcurves fs transparent solid 0.15 lc rgb '#bcbd22' notitle, 'loss.dat' index 8 using 1:2 with linespoints lw 2 lc rgb '#bcbd22' dt 2 title 'llama+logn'
unset logscale y
set ytics auto
set output 'diagnostics.png'
set multiplot layout 1,2 title 'Attention diagnostics (mean over layers, heads and rows)'
set key off
set ylabel 'sink share (weight on the first key)'
set title ''
plot \
  'diagnostics.dat' index 0 using 1:2 with linespoints lw 2 lc rgb '#1f77b4' dt 1 title 'llama', \
  'diagnostics.dat' index 1 using 1:2 with linespoints lw 2 lc rgb '#d62728' dt 1 title 'llama+qk_norm', \
  'diagnostics.dat' index 2 using 1:2 with linespoints lw 2 lc rgb '#2ca02c' dt 1 title 'llama+lssar_p15', \
  'diagnostics.dat' index 3 using 1:2 with linespoints lw 2 lc rgb '#ff7f0e' dt 1 title 'llama+cosine', \
  'diagnostics.dat' index 4 using 1:2 with linespoints lw 2 lc rgb '#9467bd' dt 1 title 'llama+ssmax', \
  'diagnostics.dat' index 5 using 1:2 with linespoints lw 2 lc rgb '#8c564b' dt 1 title 'llama+kerple_log', \
  'diagnostics.dat' index 6 using 1:2 with linespoints lw 2 lc rgb '#e377c2' dt 1 title 'llama+stick_breaking', \
  'diagnostics.dat' index 7 using 1:2 with linespoints lw 2 lc rgb '#7f7f7f' dt 1 title 'gpt2+ssmax', \
  'diagnostics.dat' index 8 using 1:2 with linespoints lw 2 lc rgb '#bcbd22' dt 2 title 'llama+logn'
set key outside right
set ylabel 'entropy of the weights (nats)'
plot \
  'diagnostics.dat' index 0 using 1:3 with linespoints lw 2 lc rgb '#1f77b4' dt 1 title 'llama', \
  'diagnostics.dat' index 1 using 1:3 with linespoints lw 2 lc rgb '#d62728' dt 1 title 'llama+qk_norm', \
  'diagnostics.dat' index 2 using 1:3 with linespoints lw 2 lc rgb '#2ca02c' dt 1 title 'llama+lssar_p15', \
  'diagnostics.dat' index 3 using 1:3 with linespoints lw 2 lc rgb '#ff7f0e' dt 1 title 'llama+cosine', \
  'diagnostics.dat' index 4 using 1:3 with linespoints lw 2 lc rgb '#9467bd' dt 1 title 'llama+ssmax', \
  'diagnostics.dat' index 5 using 1:3 with linespoints lw 2 lc rgb '#8c564b' dt 1 title 'llama+kerple_log', \
  'diagnostics.dat' index 6 using 1:3 with linespoints lw 2 lc rgb '#e377c2' dt 1 title 'llama+stick_breaking', \
  'diagnostics.dat' index 7 using 1:3 with linespoints lw 2 lc rgb '#7f7f7f' dt 1 title 'gpt2+ssmax', \
  'diagnostics.dat' index 8 using 1:3 with linespoints lw 2 lc rgb '#bcbd22' dt 2 title 'llama+logn'
unset multiplot
set output 'profile.png'
unset logscale x
set autoscale x
set xtics auto
set key outside right
set xlabel 'position in the 2048-token window'
set ylabel 'mean loss in the bucket (nats/token)'
set title 'Loss by position at 16x the training context (band: 95% interval as in the loss plot; dashed: T)'
set arrow 1 from 128, graph 0 to 128, graph 1 nohead dt 2
plot \
  'profile.dat' index 0 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#1f77b4' notitle, 'profile.dat' index 0 using 1:2 with linespoints lw 2 lc rgb '#1f77b4' title 'llama', \
  'profile.dat' index 1 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#d62728' notitle, 'profile.dat' index 1 using 1:2 with linespoints lw 2 lc rgb '#d62728' title 'llama+qk_norm', \
  'profile.dat' index 2 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#2ca02c' notitle, 'profile.dat' index 2 using 1:2 with linespoints lw 2 lc rgb '#2ca02c' title 'llama+lssar_p15', \
  'profile.dat' index 3 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#ff7f0e' notitle, 'profile.dat' index 3 using 1:2 with linespoints lw 2 lc rgb '#ff7f0e' title 'llama+cosine', \
  'profile.dat' index 4 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#9467bd' notitle, 'profile.dat' index 4 using 1:2 with linespoints lw 2 lc rgb '#9467bd' title 'llama+ssmax', \
  'profile.dat' index 5 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#8c564b' notitle, 'profile.dat' index 5 using 1:2 with linespoints lw 2 lc rgb '#8c564b' title 'llama+kerple_log', \
  'profile.dat' index 6 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#e377c2' notitle, 'profile.dat' index 6 using 1:2 with linespoints lw 2 lc rgb '#e377c2' title 'llama+stick_breaking', \
  'profile.dat' index 7 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#7f7f7f' notitle, 'profile.dat' index 7 using 1:2 with linespoints lw 2 lc rgb '#7f7f7f' title 'llama+logn'
unset arrow 1
