// gpt: train small GPTs and measure how attention variants extrapolate.
#include <cstdio>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "core/check.h"
#include "dist/communicator.h"

int main(int argc, char** argv) {
  spdlog::set_pattern("[%H:%M:%S] %^%l%$ %v");
  CLI::App app{"gpt: a GPT training framework for studying attention past the training length"};
  app.require_subcommand(1);
  gpt::cli::add_train(app);
  gpt::cli::add_eval(app);
  gpt::cli::add_sample(app);
  gpt::cli::add_data(app);
  gpt::cli::add_info(app);
  gpt::cli::add_convert(app);
  gpt::cli::add_bench(app);
  gpt::cli::add_sweep(app);
  gpt::cli::add_probe(app);
  // A bare `gpt` prints what it can do, as most command-line tools do.
  if (argc <= 1) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  // MPI lives from here to the return (mpirun -np N gpt train ...).
  std::unique_ptr<gpt::dist::Session> mpi;
  try {
    mpi = std::make_unique<gpt::dist::Session>();
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and succeed; every other command-line error
    // goes through the project's one format and exit status.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    return gpt::dist::report_fatal_error(
        (std::string(e.what()) + " (see gpt " + (argc > 1 ? std::string(argv[1]) + " " : "") + "--help)").c_str());
  } catch (const std::bad_alloc&) {
    return gpt::dist::report_fatal_error(
        "out of memory: an allocation failed (the model, batch or evaluation is larger than this machine's memory; "
        "gpt bench --only memory shows what each phase needs)");
  } catch (const gpt::Error& e) {
    return gpt::dist::report_fatal_error(e.what());  // with ranks: ends them all
  } catch (const std::exception& e) {
    return gpt::dist::report_fatal_error(e.what());
  }
  return gpt::cli::exit_status;
}
