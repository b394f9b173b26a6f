// The training loop: data, model, AdamW, schedule, logging, evaluation,
// checkpoints, SIGINT handling and resume.
#pragma once
#include <string>

#include "config/config.h"

namespace gpt {

// Exit status of a training run that stopped on SIGINT after saving.
constexpr int kExitInterrupted = 130;

// Trains as the config says. resume_checkpoint: a checkpoint file to continue
// from (empty: fresh run). Returns 0 when training completed, kExitInterrupted
// after an interrupt (a checkpoint has been saved). Throws gpt::Error on bad
// input or a non-finite loss (after saving the last good state).
int run_training(const Config& cfg, const std::string& resume_checkpoint);

}  // namespace gpt
