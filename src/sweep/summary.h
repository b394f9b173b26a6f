// Internal to src/sweep: what the summary (summary.cpp) hands the plot script
// (plots.cpp).
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpt {

// The data files of a sweep's summary folder, block by block, and what each
// block is.
struct PlotInputs {
  std::vector<int> multiples;           // the evaluated context multiples
  int trained_context = 0;              // T
  std::vector<std::string> plotted;     // loss.dat and diagnostics.dat: a block per variant with results
  std::vector<bool> plotted_eval;       // of those, the evaluations without retraining (drawn dashed)
  std::vector<std::string> profiled;    // profile.dat: a block per profiled variant
  std::vector<std::string> line_tasks;  // tasks with line panels, in order
  std::map<std::string, std::vector<nlohmann::json>> task_lines;  // task -> its runs' summary entries
  std::vector<std::string> passkey_runs;                          // passkey_RUN.dat grids
  std::vector<std::string> task_grids;                            // task_RUN.dat grids
  std::map<std::string, size_t> task_rows;                        // cells (depths) of each task grid
  std::map<std::string, std::string> run_task;                    // run -> its synthetic task
  std::vector<std::string> budget_runs;  // budget.dat: a block per run of the budget axis (tokens, losses)
  // longppl.dat: a block per variant with LongPPL's key loss (multiple, key
  // loss mean, its sd over seeds, the plain loss mean).
  std::vector<std::string> longppl_runs;
};

namespace sweep_detail {
// x with prec decimals, "–" when it is not finite (the tables and the
// sweep's command lines).
std::string fmt(double x, int prec = 4);
}  // namespace sweep_detail

// plots.gp: the loss and diagnostics against the multiple, LongPPL's key
// loss against the multiple, the loss by position, the loss against the
// training budget, the synthetic tasks' lines and the retrieval heat maps.
std::string gnuplot_script(const PlotInputs& p);

}  // namespace gpt
