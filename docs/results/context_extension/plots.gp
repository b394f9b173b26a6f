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
set title 'Validation loss past the training context (band: min-max over seeds; dashed: evaluated with another attention, no retraining)'
set logscale y
set ytics (1.5, 1.75, 2, 2.5, 3, 4, 5, 6, 8, 10)
  plot 'loss.dat' index 0 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#1f77b4' notitle, 'loss.dat' index 0 using 1:2 with linespoints lw 2 lc rgb '#1f77b4' dt 1 title 'softmax', \
  'loss.dat' index 1 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#d62728' notitle, 'loss.dat' index 1 using 1:2 with linespoints lw 2 lc rgb '#d62728' dt 1 title 'alibi', \
  'loss.dat' index 2 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#2ca02c' notitle, 'loss.dat' index 2 using 1:2 with linespoints lw 2 lc rgb '#2ca02c' dt 1 title 'nope', \
  'loss.dat' index 3 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#ff7f0e' notitle, 'loss.dat' index 3 using 1:2 with linespoints lw 2 lc rgb '#ff7f0e' dt 1 title 'lssar_p15', \
  'loss.dat' index 4 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#9467bd' notitle, 'loss.dat' index 4 using 1:2 with linespoints lw 2 lc rgb '#9467bd' dt 1 title 'cosine', \
  'loss.dat' index 5 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#8c564b' notitle, 'loss.dat' index 5 using 1:2 with linespoints lw 2 lc rgb '#8c564b' dt 2 title 'softmax+pi', \
  'loss.dat' index 6 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#e377c2' notitle, 'loss.dat' index 6 using 1:2 with linespoints lw 2 lc rgb '#e377c2' dt 2 title 'softmax+ntk', \
  'loss.dat' index 7 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#7f7f7f' notitle, 'loss.dat' index 7 using 1:2 with linespoints lw 2 lc rgb '#7f7f7f' dt 2 title 'softmax+dynamic_ntk', \
  'loss.dat' index 8 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#bcbd22' notitle, 'loss.dat' index 8 using 1:2 with linespoints lw 2 lc rgb '#bcbd22' dt 2 title 'softmax+yarn', \
  'loss.dat' index 9 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#17becf' notitle, 'loss.dat' index 9 using 1:2 with linespoints lw 2 lc rgb '#17becf' dt 2 title 'softmax+yarn_freq', \
  'loss.dat' index 10 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#000000' notitle, 'loss.dat' index 10 using 1:2 with linespoints lw 2 lc rgb '#000000' dt 2 title 'softmax+yarn_temp', \
  'loss.dat' index 11 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#aec7e8' notitle, 'loss.dat' index 11 using 1:2 with linespoints lw 2 lc rgb '#aec7e8' dt 2 title 'softmax+llama3', \
  'loss.dat' index 12 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#1f77b4' notitle, 'loss.dat' index 12 using 1:2 with linespoints lw 2 lc rgb '#1f77b4' dt 2 title 'softmax+window', \
  'loss.dat' index 13 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#d62728' notitle, 'loss.dat' index 13 using 1:2 with linespoints lw 2 lc rgb '#d62728' dt 2 title 'softmax+sinks', \
  'loss.dat' index 14 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#2ca02c' notitle, 'loss.dat' index 14 using 1:2 with linespoints lw 2 lc rgb '#2ca02c' dt 2 title 'softmax+llama4_temp', \
  'loss.dat' index 15 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#ff7f0e' notitle, 'loss.dat' index 15 using 1:2 with linespoints lw 2 lc rgb '#ff7f0e' dt 2 title 'softmax+yarn+window', \
  'loss.dat' index 16 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#9467bd' notitle, 'loss.dat' index 16 using 1:2 with linespoints lw 2 lc rgb '#9467bd' dt 2 title 'softmax+rerope', \
  'loss.dat' index 17 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#8c564b' notitle, 'loss.dat' index 17 using 1:2 with linespoints lw 2 lc rgb '#8c564b' dt 2 title 'softmax+rerope+logn', \
  'loss.dat' index 18 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#e377c2' notitle, 'loss.dat' index 18 using 1:2 with linespoints lw 2 lc rgb '#e377c2' dt 2 title 'softmax+rerope+yarn', \
  'loss.dat' index 19 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#7f7f7f' notitle, 'loss.dat' index 19 using 1:2 with linespoints lw 2 lc rgb '#7f7f7f' dt 2 title 'softmax+self_extend', \
  'loss.dat' index 20 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#bcbd22' notitle, 'loss.dat' index 20 using 1:2 with linespoints lw 2 lc rgb '#bcbd22' dt 2 title 'softmax+lambda', \
  'loss.dat' index 21 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#17becf' notitle, 'loss.dat' index 21 using 1:2 with linespoints lw 2 lc rgb '#17becf' dt 2 title 'softmax+streaming_llm', \
  'loss.dat' index 22 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#000000' notitle, 'loss.dat' index 22 using 1:2 with linespoints lw 2 lc rgb '#000000' dt 2 title 'softmax+logn', \
  'loss.dat' index 23 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#aec7e8' notitle, 'loss.dat' index 23 using 1:2 with linespoints lw 2 lc rgb '#aec7e8' dt 2 title 'softmax+infoscale', \
  'loss.dat' index 24 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#1f77b4' notitle, 'loss.dat' index 24 using 1:2 with linespoints lw 2 lc rgb '#1f77b4' dt 2 title 'lssar_p15+yarn', \
  'loss.dat' index 25 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#d62728' notitle, 'loss.dat' index 25 using 1:2 with linespoints lw 2 lc rgb '#d62728' dt 2 title 'lssar_p15+window', \
  'loss.dat' index 26 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#2ca02c' notitle, 'loss.dat' index 26 using 1:2 with linespoints lw 2 lc rgb '#2ca02c' dt 2 title 'cosine+yarn', \
  'loss.dat' index 27 using 1:3:4 with filledcurves fs transparent solid 0.15 lc rgb '#ff7f0e' notitle, 'loss.dat' index 27 using 1:2 with linespoints lw 2 lc rgb '#ff7f0e' dt 2 title 'cosine+window'
unset logscale y
set ytics auto
set output 'diagnostics.png'
set multiplot layout 1,2 title 'Attention diagnostics (mean over layers, heads and rows)'
set key off
set ylabel 'sink share (weight on the first key)'
set title ''
plot \
  'diagnostics.dat' index 0 using 1:2 with linespoints lw 2 lc rgb '#1f77b4' dt 1 title 'softmax', \
  'diagnostics.dat' index 1 using 1:2 with linespoints lw 2 lc rgb '#d62728' dt 1 title 'alibi', \
  'diagnostics.dat' index 2 using 1:2 with linespoints lw 2 lc rgb '#2ca02c' dt 1 title 'nope', \
  'diagnostics.dat' index 3 using 1:2 with linespoints lw 2 lc rgb '#ff7f0e' dt 1 title 'lssar_p15', \
  'diagnostics.dat' index 4 using 1:2 with linespoints lw 2 lc rgb '#9467bd' dt 1 title 'cosine', \
  'diagnostics.dat' index 5 using 1:2 with linespoints lw 2 lc rgb '#8c564b' dt 2 title 'softmax+pi', \
  'diagnostics.dat' index 6 using 1:2 with linespoints lw 2 lc rgb '#e377c2' dt 2 title 'softmax+ntk', \
  'diagnostics.dat' index 7 using 1:2 with linespoints lw 2 lc rgb '#7f7f7f' dt 2 title 'softmax+dynamic_ntk', \
  'diagnostics.dat' index 8 using 1:2 with linespoints lw 2 lc rgb '#bcbd22' dt 2 title 'softmax+yarn', \
  'diagnostics.dat' index 9 using 1:2 with linespoints lw 2 lc rgb '#17becf' dt 2 title 'softmax+yarn_freq', \
  'diagnostics.dat' index 10 using 1:2 with linespoints lw 2 lc rgb '#000000' dt 2 title 'softmax+yarn_temp', \
  'diagnostics.dat' index 11 using 1:2 with linespoints lw 2 lc rgb '#aec7e8' dt 2 title 'softmax+llama3', \
  'diagnostics.dat' index 12 using 1:2 with linespoints lw 2 lc rgb '#1f77b4' dt 2 title 'softmax+window', \
  'diagnostics.dat' index 13 using 1:2 with linespoints lw 2 lc rgb '#d62728' dt 2 title 'softmax+sinks', \
  'diagnostics.dat' index 14 using 1:2 with linespoints lw 2 lc rgb '#2ca02c' dt 2 title 'softmax+llama4_temp', \
  'diagnostics.dat' index 15 using 1:2 with linespoints lw 2 lc rgb '#ff7f0e' dt 2 title 'softmax+yarn+window', \
  'diagnostics.dat' index 16 using 1:2 with linespoints lw 2 lc rgb '#9467bd' dt 2 title 'softmax+rerope', \
  'diagnostics.dat' index 17 using 1:2 with linespoints lw 2 lc rgb '#8c564b' dt 2 title 'softmax+rerope+logn', \
  'diagnostics.dat' index 18 using 1:2 with linespoints lw 2 lc rgb '#e377c2' dt 2 title 'softmax+rerope+yarn', \
  'diagnostics.dat' index 19 using 1:2 with linespoints lw 2 lc rgb '#7f7f7f' dt 2 title 'softmax+self_extend', \
  'diagnostics.dat' index 20 using 1:2 with linespoints lw 2 lc rgb '#bcbd22' dt 2 title 'softmax+lambda', \
  'diagnostics.dat' index 21 using 1:2 with linespoints lw 2 lc rgb '#17becf' dt 2 title 'softmax+streaming_llm', \
  'diagnostics.dat' index 22 using 1:2 with linespoints lw 2 lc rgb '#000000' dt 2 title 'softmax+logn', \
  'diagnostics.dat' index 23 using 1:2 with linespoints lw 2 lc rgb '#aec7e8' dt 2 title 'softmax+infoscale', \
  'diagnostics.dat' index 24 using 1:2 with linespoints lw 2 lc rgb '#1f77b4' dt 2 title 'lssar_p15+yarn', \
  'diagnostics.dat' index 25 using 1:2 with linespoints lw 2 lc rgb '#d62728' dt 2 title 'lssar_p15+window', \
  'diagnostics.dat' index 26 using 1:2 with linespoints lw 2 lc rgb '#2ca02c' dt 2 title 'cosine+yarn', \
  'diagnostics.dat' index 27 using 1:2 with linespoints lw 2 lc rgb '#ff7f0e' dt 2 title 'cosine+window'
set key outside right
set ylabel 'entropy of the weights (nats)'
plot \
  'diagnostics.dat' index 0 using 1:3 with linespoints lw 2 lc rgb '#1f77b4' dt 1 title 'softmax', \
  'diagnostics.dat' index 1 using 1:3 with linespoints lw 2 lc rgb '#d62728' dt 1 title 'alibi', \
  'diagnostics.dat' index 2 using 1:3 with linespoints lw 2 lc rgb '#2ca02c' dt 1 title 'nope', \
  'diagnostics.dat' index 3 using 1:3 with linespoints lw 2 lc rgb '#ff7f0e' dt 1 title 'lssar_p15', \
  'diagnostics.dat' index 4 using 1:3 with linespoints lw 2 lc rgb '#9467bd' dt 1 title 'cosine', \
  'diagnostics.dat' index 5 using 1:3 with linespoints lw 2 lc rgb '#8c564b' dt 2 title 'softmax+pi', \
  'diagnostics.dat' index 6 using 1:3 with linespoints lw 2 lc rgb '#e377c2' dt 2 title 'softmax+ntk', \
  'diagnostics.dat' index 7 using 1:3 with linespoints lw 2 lc rgb '#7f7f7f' dt 2 title 'softmax+dynamic_ntk', \
  'diagnostics.dat' index 8 using 1:3 with linespoints lw 2 lc rgb '#bcbd22' dt 2 title 'softmax+yarn', \
  'diagnostics.dat' index 9 using 1:3 with linespoints lw 2 lc rgb '#17becf' dt 2 title 'softmax+yarn_freq', \
  'diagnostics.dat' index 10 using 1:3 with linespoints lw 2 lc rgb '#000000' dt 2 title 'softmax+yarn_temp', \
  'diagnostics.dat' index 11 using 1:3 with linespoints lw 2 lc rgb '#aec7e8' dt 2 title 'softmax+llama3', \
  'diagnostics.dat' index 12 using 1:3 with linespoints lw 2 lc rgb '#1f77b4' dt 2 title 'softmax+window', \
  'diagnostics.dat' index 13 using 1:3 with linespoints lw 2 lc rgb '#d62728' dt 2 title 'softmax+sinks', \
  'diagnostics.dat' index 14 using 1:3 with linespoints lw 2 lc rgb '#2ca02c' dt 2 title 'softmax+llama4_temp', \
  'diagnostics.dat' index 15 using 1:3 with linespoints lw 2 lc rgb '#ff7f0e' dt 2 title 'softmax+yarn+window', \
  'diagnostics.dat' index 16 using 1:3 with linespoints lw 2 lc rgb '#9467bd' dt 2 title 'softmax+rerope', \
  'diagnostics.dat' index 17 using 1:3 with linespoints lw 2 lc rgb '#8c564b' dt 2 title 'softmax+rerope+logn', \
  'diagnostics.dat' index 18 using 1:3 with linespoints lw 2 lc rgb '#e377c2' dt 2 title 'softmax+rerope+yarn', \
  'diagnostics.dat' index 19 using 1:3 with linespoints lw 2 lc rgb '#7f7f7f' dt 2 title 'softmax+self_extend', \
  'diagnostics.dat' index 20 using 1:3 with linespoints lw 2 lc rgb '#bcbd22' dt 2 title 'softmax+lambda', \
  'diagnostics.dat' index 21 using 1:3 with linespoints lw 2 lc rgb '#17becf' dt 2 title 'softmax+streaming_llm', \
  'diagnostics.dat' index 22 using 1:3 with linespoints lw 2 lc rgb '#000000' dt 2 title 'softmax+logn', \
  'diagnostics.dat' index 23 using 1:3 with linespoints lw 2 lc rgb '#aec7e8' dt 2 title 'softmax+infoscale', \
  'diagnostics.dat' index 24 using 1:3 with linespoints lw 2 lc rgb '#1f77b4' dt 2 title 'lssar_p15+yarn', \
  'diagnostics.dat' index 25 using 1:3 with linespoints lw 2 lc rgb '#d62728' dt 2 title 'lssar_p15+window', \
  'diagnostics.dat' index 26 using 1:3 with linespoints lw 2 lc rgb '#2ca02c' dt 2 title 'cosine+yarn', \
  'diagnostics.dat' index 27 using 1:3 with linespoints lw 2 lc rgb '#ff7f0e' dt 2 title 'cosine+window'
unset multiplot
set output 'profile.png'
unset logscale x
set autoscale x
set xtics auto
set key outside right
set xlabel 'position in the 2048-token window'
set ylabel 'mean loss in the bucket (nats/token)'
set title 'Loss by position at 16x the training context (dashed: T)'
set arrow 1 from 128, graph 0 to 128, graph 1 nohead dt 2
plot \
  'profile.dat' index 0 using 1:2 with linespoints lw 2 title 'softmax', \
  'profile.dat' index 1 using 1:2 with linespoints lw 2 title 'alibi', \
  'profile.dat' index 2 using 1:2 with linespoints lw 2 title 'nope', \
  'profile.dat' index 3 using 1:2 with linespoints lw 2 title 'softmax+ntk', \
  'profile.dat' index 4 using 1:2 with linespoints lw 2 title 'softmax+yarn', \
  'profile.dat' index 5 using 1:2 with linespoints lw 2 title 'softmax+window', \
  'profile.dat' index 6 using 1:2 with linespoints lw 2 title 'softmax+sinks'
unset arrow 1
