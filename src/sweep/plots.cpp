// The gnuplot script of a sweep's summary (plots.gp beside the data files
// summary.cpp writes): validation loss against the context multiple, the
// attention diagnostics, the loss by position, the synthetic tasks' lines
// and the retrieval grids as heat maps.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <sstream>

#include "sweep/summary.h"

namespace gpt {

std::string gnuplot_script(const PlotInputs& p) {
  const std::vector<int>& multiples = p.multiples;
  const int trained_context = p.trained_context, mmax = multiples.back();
  const std::vector<std::string>& plotted = p.plotted;
  const std::vector<bool>& plotted_eval = p.plotted_eval;
  const std::vector<std::string>& profiled = p.profiled;
  const std::vector<std::string>& line_tasks = p.line_tasks;
  const auto& task_lines = p.task_lines;
  const std::vector<std::string>& passkey_runs = p.passkey_runs;
  const std::vector<std::string>& task_grids = p.task_grids;
  const auto& task_rows = p.task_rows;
  // gnuplot script; the PNGs are drawn when gnuplot is installed.
  // The x axis of the plots against the multiple (log 2, a tic per multiple).
  std::ostringstream multiple_axis;
  multiple_axis << "set logscale x 2\nset xrange [" << multiples.front() * 0.85 << ":" << multiples.back() * 1.15
                << "]\nset xtics (";
  for (size_t i = 0; i < multiples.size(); ++i)
    multiple_axis << (i ? ", " : "") << "'" << multiples[i] << "x' " << multiples[i];
  multiple_axis << ")\n";
  std::ostringstream gp;
  gp << "# Written by gpt sweep; run from this folder: gnuplot plots.gp\n"
     << "set terminal pngcairo size 1100,700 font ',11' noenhanced\nset grid\nset key outside right\n"
     << multiple_axis.str() << "set xlabel 'evaluation context / training context (T = " << trained_context << ")'\n"
     << "set output 'loss_vs_context.png'\nset ylabel 'validation loss (nats/token)'\n"
     << "set title 'Validation loss past the training context (band: 95% interval of the mean over seeds, or over "
        "the validation windows for one seed; dashed: evaluated with another attention, no retraining)'\n";
  // Distinct colours for up to 12 variants; evaluations of a trained
  // checkpoint are dashed.
  static const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                                   "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#aec7e8"};
  auto colour = [&](size_t i) { return std::string("lc rgb '") + kColours[i % 12] + "'"; };
  auto style = [&](size_t i) { return colour(i) + (plotted_eval[i] ? " dt 2" : " dt 1"); };
  gp << "set logscale y\nset ytics (1.5, 1.75, 2, 2.5, 3, 4, 5, 6, 8, 10)\n";
  for (size_t i = 0; i < plotted.size(); ++i)
    gp << "  " << (i ? "" : "plot ") << "'loss.dat' index " << i
       << " using 1:5:6 with filledcurves fs transparent solid 0.15 " << colour(i) << " notitle, 'loss.dat' index " << i
       << " using 1:2 with linespoints lw 2 " << style(i) << " title '" << plotted[i] << "'"
       << (i + 1 < plotted.size() ? ", \\\n" : "\nunset logscale y\nset ytics auto\n");
  gp << "set output 'diagnostics.png'\nset multiplot layout 1,2 title 'Attention diagnostics (mean over layers, "
        "heads and rows)'\nset key off\nset ylabel 'sink share (weight on the first key)'\nset title ''\nplot \\\n";
  for (size_t i = 0; i < plotted.size(); ++i)
    gp << "  'diagnostics.dat' index " << i << " using 1:2 with linespoints lw 2 " << style(i) << " title '"
       << plotted[i] << "'" << (i + 1 < plotted.size() ? ", \\\n" : "\n");
  gp << "set key outside right\nset ylabel 'entropy of the weights (nats)'\nplot \\\n";
  for (size_t i = 0; i < plotted.size(); ++i)
    gp << "  'diagnostics.dat' index " << i << " using 1:3 with linespoints lw 2 " << style(i) << " title '"
       << plotted[i] << "'" << (i + 1 < plotted.size() ? ", \\\n" : "\n");
  gp << "unset multiplot\n";
  // LongPPL (Fang et al. 2025): the loss over the key tokens against the
  // multiple (solid, band ± one sd over seeds), beside the plain loss of the
  // same variant (dashed).
  if (!p.longppl_runs.empty()) {
    gp << "set output 'longppl_vs_context.png'\nset key outside right\nset ylabel 'loss (nats/token)'\n"
       << "set title 'LongPPL: loss over the key tokens (solid, band: ± one sd over seeds) and over all tokens "
          "(dashed)'\nplot \\\n";
    for (size_t i = 0; i < p.longppl_runs.size(); ++i)
      gp << "  'longppl.dat' index " << i << " using 1:($2-$3):($2+$3) with filledcurves fs transparent solid 0.12 "
         << colour(i) << " notitle, 'longppl.dat' index " << i << " using 1:2 with linespoints lw 2 " << colour(i)
         << " title '" << p.longppl_runs[i] << " (key tokens)', 'longppl.dat' index " << i
         << " using 1:4 with linespoints lw 1 " << colour(i) << " dt 2 notitle"
         << (i + 1 < p.longppl_runs.size() ? ", \\\n" : "\n");
  }
  if (!profiled.empty()) {
    gp << "set output 'profile.png'\nunset logscale x\nset autoscale x\nset xtics auto\nset key outside right\n"
       << "set xlabel 'position in the " << mmax * trained_context << "-token window'\n"
       << "set ylabel 'mean loss in the bucket (nats/token)'\nset title 'Loss by position at " << mmax
       << "x the training context (band: 95% interval as in the loss plot; dashed: T)'\nset arrow 1 from "
       << trained_context << ", graph 0 to " << trained_context << ", graph 1 nohead dt 2\nplot \\\n";
    for (size_t i = 0; i < profiled.size(); ++i)
      gp << "  'profile.dat' index " << i << " using 1:3:4 with filledcurves fs transparent solid 0.15 " << colour(i)
         << " notitle, 'profile.dat' index " << i << " using 1:2 with linespoints lw 2 " << colour(i) << " title '"
         << profiled[i] << "'" << (i + 1 < profiled.size() ? ", \\\n" : "\n");
    gp << "unset arrow 1\n";
  }
  // The budget axis: per run the loss at the largest multiple (solid, band ±
  // one sd over seeds) and at 1x (dashed) against the tokens trained.
  if (!p.budget_runs.empty()) {
    gp << "set output 'loss_vs_budget.png'\nset logscale x 2\nset autoscale x\nset xtics auto\nset key outside right\n"
       << "set xlabel 'tokens trained'\nset ylabel 'validation loss (nats/token)'\nset title 'Loss against the "
          "training budget (solid: "
       << mmax << "x the training context, band: ± one sd over seeds; dashed: 1x)'\nplot \\\n";
    for (size_t i = 0; i < p.budget_runs.size(); ++i)
      gp << "  'budget.dat' index " << i << " using 1:($3-$4):($3+$4) with filledcurves fs transparent solid 0.12 "
         << colour(i) << " notitle, 'budget.dat' index " << i << " using 1:3 with linespoints lw 2 " << colour(i)
         << " title '" << p.budget_runs[i] << "', 'budget.dat' index " << i << " using 1:2 with linespoints lw 1 "
         << colour(i) << " dt 2 notitle" << (i + 1 < p.budget_runs.size() ? ", \\\n" : "\n");
    gp << "unset logscale x\n";
  }
  // Synthetic tasks: a panel per task, a line per variant (band: the seeds'
  // range); colours cycle, dashed after the first 12.
  if (!line_tasks.empty()) {
    const size_t cols = std::min<size_t>(line_tasks.size(), 2), nrows = (line_tasks.size() + cols - 1) / cols;
    gp << "set terminal pngcairo size " << 820 * cols << "," << 460 * nrows + 60
       << " font ',10' noenhanced\nset output 'tasks_lines.png'\n"
       << multiple_axis.str() << "set yrange [-0.02:1.02]\nset xlabel 'context multiple'\nset ylabel 'exact match'\n"
       << "set key outside right font ',8'\nset multiplot layout " << nrows << "," << cols
       << " title 'Synthetic tasks: exact match past the training context (band: range over seeds)'\n";
    // A run's key without its task's name in front (copy_softmax: softmax).
    auto key_of = [](const std::string& run, const std::string& task) {
      return run.size() > task.size() + 1 && run.compare(0, task.size() + 1, task + "_") == 0
                 ? run.substr(task.size() + 1)
                 : run;
    };
    for (const auto& t : line_tasks) {
      const auto& runs = task_lines.at(t);
      gp << "set title '" << t << "'\nplot \\\n";
      for (size_t i = 0; i < runs.size(); ++i) {
        const std::string c = colour(i) + (i >= 12 ? " dt 2" : " dt 1");
        gp << "  'task_lines_" << t << ".dat' index " << i
           << " using 1:3:4 with filledcurves fs transparent solid 0.12 " << colour(i) << " notitle, 'task_lines_" << t
           << ".dat' index " << i << " using 1:2 with linespoints lw 2 " << c << " pt " << (i % 13 + 1) << " title '"
           << key_of(runs[i]["run"].get<std::string>(), t) << "'" << (i + 1 < runs.size() ? ", \\\n" : "\n");
      }
    }
    gp << "unset multiplot\nset autoscale y\nunset logscale x\n";
  }
  // One heat map panel per run of a retrieval grid (PREFIX_RUN.dat): exact
  // match by depth and context; a grid of one row (no depth) as a line. At
  // most 5 panels a row.
  auto grid_plots = [&](const std::string& png, const std::string& title, const std::string& ylabel,
                        const std::string& prefix, const std::vector<std::string>& runs,
                        const std::function<std::string(const std::string&)>& panel,
                        const std::function<size_t(const std::string&)>& rows) {
    if (runs.empty()) return;
    const size_t cols = std::min<size_t>(runs.size(), 5), nrows = (runs.size() + cols - 1) / cols;
    gp << "set terminal pngcairo size " << std::max<size_t>(1100, 300 * cols) << ","
       << std::max<size_t>(700, 320 * nrows) << " font ',10' noenhanced\nset output '" << png
       << "'\nunset logscale x\nset autoscale x\nset multiplot layout " << nrows << "," << cols << " title '" << title
       << "'\nset cbrange [0:1]\n"
       << "set palette defined (0 '#b2182b', 0.5 '#f7f7f7', 1 '#2166ac')\nset xlabel 'context'\n"
       << "set ylabel '" << ylabel << "'\nunset key\nset xtics (";
    for (size_t i = 0; i < multiples.size(); ++i) gp << (i ? ", " : "") << "'" << multiples[i] << "x' " << i;
    gp << ")\n";
    for (const auto& r : runs) {
      gp << "set title '" << panel(r) << "'\n";
      if (rows(r) > 1)
        gp << "plot '" << prefix << r
           << ".dat' using 1:2:3 with image, '' using 1:2:(sprintf('%.2f', $3)) with labels\n";
      else
        gp << "set yrange [0:1]\nplot '" << prefix << r << ".dat' using 1:3 with linespoints\nset autoscale y\n";
    }
    gp << "unset multiplot\n";
  };
  // (The passkey panels stay heat maps whatever their number of depths, as before.)
  grid_plots(
      "passkey.png", "Passkey retrieval: exact match by depth and context", "depth of the key", "passkey_",
      passkey_runs, [](const std::string& r) { return r; }, [](const std::string&) { return SIZE_MAX; });
  // Tasks with depths as heat maps (those with one cell are lines of tasks_lines.png).
  std::vector<std::string> depth_grids;
  for (const auto& r : task_grids)
    if (task_rows.at(r) > 1) depth_grids.push_back(r);
  grid_plots(
      "tasks.png", "Synthetic tasks: exact match by depth and context", "depth of the needle", "task_", depth_grids,
      [&](const std::string& r) { return r + " (" + p.run_task.at(r) + ")"; },
      [&](const std::string& r) { return task_rows.at(r); });
  return gp.str();
}

}  // namespace gpt
