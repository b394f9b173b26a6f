// Subcommands of the `gpt` binary. Each registers itself on the app; its
// callback throws gpt::Error on bad input and sets the process exit status.
#pragma once
#include <CLI/CLI.hpp>

namespace gpt::cli {

extern int exit_status;

void add_train(CLI::App& app);
void add_eval(CLI::App& app);
void add_sample(CLI::App& app);
void add_data(CLI::App& app);
void add_info(CLI::App& app);
void add_convert(CLI::App& app);
void add_bench(CLI::App& app);
void add_sweep(CLI::App& app);
void add_probe(CLI::App& app);

}  // namespace gpt::cli
