// `gpt sweep SWEEP.json`: trains one model per variant (and seed) on the same
// data, shape and steps, runs the training-free evaluations and the passkey
// task on chosen runs, then writes one summary: a markdown table, data files
// and gnuplot plots. Every job is a `gpt` subprocess whose result file marks
// it done, so a re-run skips finished work and resumes an interrupted sweep.
//
// The sweep file (every key is checked; unknown keys are errors):
// {
//   "dir": "runs/sweep",                    // where runs and the summary go
//   "base": "configs/sweep/base.json",      // config every run starts from
//   "set": ["train.steps=600"],             // overrides for every run
//   "seeds": [1],                           // default seeds of a run
//   "runs": [{"name": "softmax", "set": ["attention.preset=softmax"],
//             "seeds": [1, 2, 3], "passkey": true, "task": "mqar"}, ...],
//   "evals": [{"name": "softmax+logn", "run": "softmax",
//              "attention": "logn", "set": ["scale=logn"]}, ...],
//   "passkey": {"depths": [0, 0.5, 1], "samples": 20},
//   "task": {"depths": [0, 0.5, 1], "samples": 50},  // runs with "task": "mqar" (a synthetic
//                                                     // task; the run trains on its data)
//   "plot": {"profile": ["softmax", "lssar_p15"]},  // variants of the per-position plot
//   "baseline": "softmax",                  // paired tests against it (default: the run
//                                           // named softmax, else the first run)
//   "budgets": [500, 2000, 8000],           // the training budget as an axis (train.steps)
//   "budget_reuse": "wsd"                   // none (default) | wsd: shorter budgets branch off
// }
//
// The budget axis: each run trains once per budget, with train.steps set to
// it, as the variant NAME_Ksteps; evals of a run, plot.profile and the
// baseline expand with it (the baseline at the largest budget). The summary
// adds a table of each run's loss against the budget (steps and tokens).
// runs[].budgets trains a run at some of the sweep's budgets only. Without
// reuse every budget has its own full learning-rate schedule from scratch.
// With "budget_reuse": "wsd" every budget trains with train.lr_schedule = wsd,
// whose rate before the decay does not depend on train.steps: a run's
// largest budget (its trunk) checkpoints where each shorter budget's decay
// starts, and the shorter budget resumes from that checkpoint with its own
// train.steps (bit-identical to training it from scratch under wsd), so only
// the decays are trained twice.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpt {

struct SweepRun {
  std::string name;
  std::vector<std::string> set;  // config overrides (section.key=value)
  std::vector<uint64_t> seeds;
  bool passkey = false;
  std::string task;    // a synthetic task (gpt eval --task) evaluated on every seed; empty: none
  std::string family;  // the budget axis: the run as the sweep file names it ("" without budgets)
  int budget = 0;      // and its train.steps (0: the config's)
  // "budget_reuse": the run (its largest budget) this one branches off, and
  // the step whose checkpoint it resumes from; "" / 0: trained from scratch.
  std::string branch_of;
  int branch_step = 0;
};

// A training-free evaluation of a trained run's checkpoints (every seed).
struct SweepEval {
  std::string name;
  std::string run;
  std::string attention;                 // gpt eval --attention (may be empty)
  std::vector<std::string> set;          // gpt eval --attention-set
  std::string context;                   // gpt eval --context METHOD[,METHOD] (may be empty)
  std::vector<std::string> context_set;  // gpt eval --context-set
  std::string protocol;                  // gpt eval --protocol (may be empty: the run's eval.protocol)
  int stride = 0;                        // gpt eval --stride (0: the run's)
  std::string kl_against;                // gpt eval --kl-against REF|base (may be empty)
  std::string longppl;                   // gpt eval --longppl-evaluator REF|base (may be empty)
};

struct SweepPlan {
  std::string file;  // the sweep file, for messages
  std::string dir = "runs/sweep";
  std::string base;
  std::vector<std::string> set;
  std::vector<uint64_t> seeds = {1};
  std::vector<SweepRun> runs;
  std::vector<SweepEval> evals;
  std::vector<double> passkey_depths = {0.0, 0.25, 0.5, 0.75, 1.0};
  int passkey_samples = 20;
  std::vector<double> task_depths = {0.0, 0.25, 0.5, 0.75, 1.0};  // runs with a "task" (haystack tasks)
  int task_samples = 50;
  std::vector<std::string> profile_variants;  // empty: every trained run
  std::string baseline;               // a run or eval: the summary tests every other variant against it, seed by seed
  std::vector<int> budgets;           // the budget axis (train.steps per run); empty: none
  std::string budget_reuse = "none";  // none | wsd

  const SweepRun& run(const std::string& name) const;
  std::string run_dir(const std::string& run, uint64_t seed) const;
};

// Parses and checks a sweep file (names unique and plain, evals name a run,
// the base config loads with every run's overrides). Throws gpt::Error
// naming the file and key.
SweepPlan load_sweep(const std::string& path);

// Runs every unfinished job with the gpt binary at `gpt_binary`, up to
// `parallel` at a time (all trainings first, then the evaluations); `dry_run`
// only prints the commands. Returns 0, 130 when a job was interrupted
// (the sweep stops once the running jobs have saved), or 1 when some job
// failed (the others still run).
int run_sweep(const SweepPlan& plan, const std::string& gpt_binary, bool dry_run, int parallel = 1);

// Reads every finished result and writes DIR/summary/{results.md,
// summary.json, *.dat, plots.gp}, then the PNGs when gnuplot is installed.
// Returns results.md's text. Missing results are listed, not invented.
std::string summarize_sweep(const SweepPlan& plan);

}  // namespace gpt
