// Where and how a loaded model runs: the options gpt eval and gpt sample share.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

namespace gpt::cli {

struct RunOptions {
  std::string device = "cpu";
  std::string precision;  // empty: the run's run.precision on cuda, fp32 on cpu
  std::string storage;    // empty: the run's run.storage
  int hf_context = 0;     // a Hugging Face model's 1x length; 0: its config.json's
};

inline void add_run_options(CLI::App* cmd, RunOptions& o) {
  cmd->add_option("--device", o.device, "Compute backend: cpu or cuda (default cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--precision", o.precision,
                  "GEMMs on cuda: fp32, tf32 or bf16 (bf16 operands, float32 accumulation; bf16 also runs the "
                  "attention forward on tensor cores); "
                  "default: the run's run.precision with --device cuda, fp32 on cpu (cpu takes fp32 only)")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
  cmd->add_option("--storage", o.storage,
                  "fp32 or bf16: how activations and the working parameters are stored (the weights are loaded "
                  "as float32 and rounded for bf16); default: the run's run.storage")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--hf-context", o.hf_context,
                  "Hugging Face model directories: the 1x length (model.context) instead of config.json's "
                  "max_position_embeddings (not with a rope_scaling, whose rules read the model's own length)")
      ->check(CLI::PositiveNumber);
}

}  // namespace gpt::cli
