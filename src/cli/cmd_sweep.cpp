// `gpt sweep SWEEP.json`: the reproduction sweep (src/sweep/sweep.h).
#include <filesystem>
#include <iostream>

#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/validators.h"
#include "core/check.h"
#include "sweep/sweep.h"

namespace gpt::cli {
namespace {

struct SweepArgs {
  std::string file;
  bool dry_run = false;
  bool summary_only = false;
  int jobs = 1;
};

void run(const SweepArgs& a) {
  const SweepPlan plan = load_sweep(a.file);
  if (!a.summary_only) {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    GPT_CHECK(!ec, "sweep: cannot find the gpt binary's own path (/proc/self/exe): ", ec.message());
    const int rc = run_sweep(plan, self.string(), a.dry_run, a.jobs);
    if (a.dry_run) return;
    if (rc == 130) {
      exit_status = 130;
      return;
    }
    if (rc != 0) exit_status = rc;
  }
  std::cout << summarize_sweep(plan);
  spdlog::info("sweep summary: {}/summary/results.md", plan.dir);
}

}  // namespace

void add_sweep(CLI::App& app) {
  auto args = std::make_shared<SweepArgs>();
  CLI::App* cmd = app.add_subcommand(
      "sweep",
      "Train and evaluate every variant of a sweep file, skipping finished jobs, then summarise (table, plots)");
  cmd->add_option("sweep", args->file, "Sweep file (JSON; format in src/sweep/sweep.h, example configs/sweep/)")
      ->required()
      ->check(existing_file());
  cmd->add_flag("--dry-run", args->dry_run, "Print the jobs (and which are done) without running them");
  cmd->add_option("--jobs", args->jobs,
                  "Jobs run at once (default 1; e.g. 2 single-threaded jobs on 2 cores, with train.threads = 1)")
      ->check(positive());
  cmd->add_flag("--summary-only", args->summary_only, "Only summarise the results found so far");
  cmd->callback([args] { run(*args); });
}

}  // namespace gpt::cli
