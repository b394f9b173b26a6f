#include <filesystem>

#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "core/check.h"
#include "train/model_io.h"
#include "train/schedule.h"
#include "train/trainer.h"

namespace gpt::cli {

int exit_status = 0;

namespace {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string resume;
};

Config resolve_config(const TrainArgs& a, std::string* ckpt_path) {
  if (a.resume.empty()) {
    GPT_CHECK(!a.config.empty(), "train: give a CONFIG file (or --resume RUN_DIR to continue a run)");
    return load_config(a.config, a.overrides);
  }
  *ckpt_path = resolve_checkpoint(a.resume);
  const CheckpointReader ckpt(*ckpt_path);  // the header only is kept: the tensors are read by the trainer
  const Config stored = checkpoint_config(ckpt.meta(), *ckpt_path);
  nlohmann::json j = ckpt.meta()["config"];
  Config cfg;
  if (a.config.empty()) {
    for (const auto& o : a.overrides) apply_override(j, o);
    cfg = config_from_json(j);
  } else {
    cfg = load_config(a.config, a.overrides);
  }
  // The sections that define the function the weights compute: a resumed
  // run must continue the same model (training-free evaluation with another
  // variant is `gpt eval --attention/--context`; a new run from these weights
  // is train.init_from).
  const nlohmann::json now = config_to_json(cfg), then = config_to_json(stored);
  for (const char* section : {"model", "attention", "context"}) {
    if (now[section] == then[section]) continue;
    std::string changed;
    for (const auto& [key, value] : now[section].items())
      if (!then[section].contains(key) || then[section][key] != value)
        changed += (changed.empty() ? "" : ", ") + std::string(section) + "." + key + " = " + value.dump() +
                   " (trained: " + (then[section].contains(key) ? then[section][key].dump() : "absent") + ")";
    fail("train --resume: the ", section, " section of ", a.config.empty() ? "the overrides" : a.config,
         " differs from the one ", *ckpt_path, " was trained with: ", changed,
         "; a run can only be resumed with the same model. To evaluate it with another variant use gpt eval "
         "--attention/--context; to train a new one from these weights, train.init_from");
  }
  // A branch (another train.steps, as a shorter budget of gpt sweep's
  // "budget_reuse") repeats the run it leaves only if the learning rates of
  // the steps already taken agree (train.lr_schedule = wsd before its decay).
  const int taken = checkpoint_progress(ckpt.meta(), *ckpt_path).step;
  for (int t = 0; t < taken; ++t)
    if (learning_rate(cfg.train, t) != learning_rate(stored.train, t)) {
      spdlog::warn(
          "train --resume: the learning rate of step {} is {:.6g} under this config and was {:.6g} when {} "
          "was trained: the continued run is not the one this config trains from scratch",
          t + 1, learning_rate(cfg.train, t), learning_rate(stored.train, t), *ckpt_path);
      break;
    }
  if (std::filesystem::is_directory(a.resume)) cfg.run.dir = a.resume;
  return cfg;
}

}  // namespace

void add_train(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "Train a model from a JSON config; evaluate it at 1x-16x the context");
  cmd->add_option("config", args->config, "JSON config file (optional with --resume: the run's own config)");
  cmd->add_option("--set", args->overrides,
                  "Override a config key, e.g. --set train.steps=500 --set model.position=rope (repeatable)")
      ->type_name("KEY=VALUE");
  cmd->add_option("--resume", args->resume,
                  "Continue the run in RUN_DIR from its latest checkpoint, bit-identically to an uninterrupted run")
      ->type_name("RUN_DIR");
  cmd->callback([args] {
    std::string ckpt;
    const Config cfg = resolve_config(*args, &ckpt);
    exit_status = run_training(cfg, ckpt);
  });
}

}  // namespace gpt::cli
