// The per-preset configs in configs/attention/: each extends
// configs/quickstart.json and differs from it, resolved, only in its
// attention block (and its run directory), names its preset, and trains for
// a few steps with finite, decreasing loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/attention.h"
#include "config/config.h"
#include "data/orbits.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "sweep/sweep.h"
#include "train/trainer.h"
#include "util/metrics_log.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

const fs::path kConfigs = fs::path(GPT_SOURCE_DIR) / "configs";

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in, nullptr, true, true);
}

// The resolved config of a file (every key, defaults filled in) without
// the keys a variant may change.
nlohmann::json resolved_without(const fs::path& path, const std::vector<std::pair<std::string, std::string>>& keys) {
  nlohmann::json j = config_to_json(load_config(path.string()));
  for (const auto& [section, key] : keys) {
    if (key.empty())
      j.erase(section);
    else
      j[section].erase(key);
  }
  return j;
}

class PresetConfig : public ::testing::TestWithParam<std::string> {};

TEST_P(PresetConfig, DiffersFromQuickstartOnlyInAttention) {
  const fs::path path = kConfigs / "attention" / (GetParam() + ".json");
  ASSERT_TRUE(fs::exists(path)) << path;
  EXPECT_EQ(read_json(path)["extends"], "../quickstart.json") << "a variant is written as its difference";
  const Config c = load_config(path.string());
  EXPECT_EQ(c.attention.preset, GetParam());
  EXPECT_EQ(c.run.dir, "runs/" + GetParam());
  const std::vector<std::pair<std::string, std::string>> varies = {{"attention", ""}, {"run", "dir"}};
  EXPECT_EQ(resolved_without(path, varies), resolved_without(kConfigs / "quickstart.json", varies));
}

// A few steps from a config itself (model, optimizer, attention), on
// synthetic shards with a small batch so the test stays fast; returns the
// resolved config.
Config train_a_few_steps(const fs::path& config, const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("gpt_preset_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // A learnable stream: a repeating pseudo-random sentence of byte tokens.
  std::vector<uint32_t> tokens(40000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(((i % 97) * 7919) % 250);
  write_shard((dir / "p_train_000001.bin").string(), tokens, 2);
  write_shard((dir / "p_val_000000.bin").string(), tokens, 2);
  const Config cfg =
      load_config(config.string(),
                  {"data.train=" + (dir / "p_train_*.bin").string(), "data.val=" + (dir / "p_val_*.bin").string(),
                   "run.dir=" + (dir / "run").string(), "train.steps=12", "train.batch_size=4", "train.warmup_steps=3",
                   "train.log_every=1", "eval.multiples=[1,2]", "eval.tokens=512", "eval.span=256"});
  EXPECT_EQ(run_training(cfg, ""), 0) << config;
  std::map<int, double> losses = test::train_losses(dir / "run");
  EXPECT_EQ(losses.size(), 12u) << config;
  for (const auto& [step, l] : losses) EXPECT_TRUE(std::isfinite(l)) << "step " << step;
  const double first = (losses[1] + losses[2]) / 2, last = (losses[11] + losses[12]) / 2;
  std::printf("[preset] %-12s loss %.4f -> %.4f\n", tag.c_str(), first, last);
  EXPECT_LT(last, first - 0.1) << tag;
  fs::remove_all(dir);
  return cfg;
}

TEST_P(PresetConfig, TrainsWithFiniteDecreasingLoss) {
  const Config cfg = train_a_few_steps(kConfigs / "attention" / (GetParam() + ".json"), GetParam());
  EXPECT_EQ(cfg.attention.preset, GetParam());
}

std::vector<std::string> preset_names() {
  std::vector<std::string> v;
  for (const auto& p : kAttentionPresets) v.push_back(p.name);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Presets, PresetConfig, ::testing::ValuesIn(preset_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// configs/contenders/: the contenders' variants that are not presets (the
// learned position biases, with no other position encoding), and
// stick-breaking without position encoding, as its paper runs it. Each
// extends configs/quickstart.json and differs from it, resolved, only in its
// attention block, model.position and its run directory
// (runs/contenders/NAME), or in its model.layer_plan (the per-layer plans
// swan and irope), and trains for a few steps.
class ContenderConfig : public ::testing::TestWithParam<std::string> {};

TEST_P(ContenderConfig, DiffersFromQuickstartOnlyInAttentionAndPositionAndTrains) {
  const fs::path path = kConfigs / "contenders" / (GetParam() + ".json");
  EXPECT_EQ(read_json(path)["extends"], "../quickstart.json") << "a variant is written as its difference";
  EXPECT_EQ(load_config(path.string()).run.dir, "runs/contenders/" + GetParam());
  const std::vector<std::pair<std::string, std::string>> varies = {
      {"attention", ""}, {"run", "dir"}, {"model", "position"}, {"model", "layer_plan"}};
  EXPECT_EQ(resolved_without(path, varies), resolved_without(kConfigs / "quickstart.json", varies));
  const Config cfg = train_a_few_steps(path, GetParam());
  if (GetParam() == "swan" || GetParam() == "irope")
    EXPECT_EQ(cfg.model.layer_plan, GetParam()) << "the file is named after its layer plan";
  else if (GetParam() == "output_gate")
    EXPECT_EQ(cfg.attention.output_gate, "sigmoid");
  else if (GetParam() == "differential")
    EXPECT_EQ(cfg.attention.differential, "on");
  else if (GetParam() == "stick_breaking")  // the paper's setting: no position encoding
    EXPECT_EQ(cfg.attention.preset, "stick_breaking");
  else
    EXPECT_EQ(cfg.attention.position_bias, GetParam()) << "the file is named after its position bias";
}

std::vector<std::string> contender_names() {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(kConfigs / "contenders")) v.push_back(e.path().stem().string());
  std::sort(v.begin(), v.end());
  return v;
}

INSTANTIATE_TEST_SUITE_P(Contenders, ContenderConfig, ::testing::ValuesIn(contender_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// configs/blocks/: the quickstart with another block (docs/blocks.md). Each
// extends configs/quickstart.json, differs from it, resolved, only in the
// block's keys of the model section and its run directory
// (runs/blocks/NAME), and trains for a few steps.
TEST(BlockConfigs, DifferOnlyInTheBlockAndTrain) {
  const std::vector<std::pair<std::string, std::string>> varies = {
      {"run", "dir"},    {"model", "norm"}, {"model", "norm_eps"}, {"model", "mlp"},       {"model", "mlp_hidden"},
      {"model", "bias"}, {"model", "head"}, {"model", "residual"}, {"model", "n_kv_head"}, {"model", "qk_norm"}};
  int n = 0;
  for (const auto& e : fs::directory_iterator(kConfigs / "blocks")) {
    const fs::path& path = e.path();
    const std::string name = path.stem().string();
    EXPECT_EQ(read_json(path)["extends"], "../quickstart.json") << name;
    EXPECT_EQ(load_config(path.string()).run.dir, "runs/blocks/" + name);
    EXPECT_EQ(resolved_without(path, varies), resolved_without(kConfigs / "quickstart.json", varies)) << name;
    EXPECT_NE(config_to_json(load_config(path.string()))["model"],
              config_to_json(load_config((kConfigs / "quickstart.json").string()))["model"])
        << name << " changes the block";
    train_a_few_steps(path, "block_" + name);
    ++n;
  }
  EXPECT_GE(n, 2);
}

// The synthetic-task configs (configs/synthetic/): valid, their run
// directory named after the file, and a vocabulary that holds the task's
// ids: exactly the task's own (scripts/prepare_synthetic.sh writes the tasks
// with their default options) or, mixed into byte text (data.mix_task), at
// least the 257 text ids plus the task's.
TEST(SyntheticConfigs, ValidWithTheVocabularyOfTheirTask) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(kConfigs / "synthetic")) {
    const fs::path f = e.path();
    const Config c = load_config(f.string());
    EXPECT_EQ(c.run.dir, "runs/synthetic/" + f.stem().string()) << f;
    if (c.data.mix_task != "none") {
      EXPECT_GE(c.model.vocab_size, make_mixed_task(c.data.mix_task, c.data.mix_options, 257)->vocab_size()) << f;
      EXPECT_EQ(c.data.tokenizer, "byte") << f;
    } else {
      EXPECT_EQ(c.data.train, "data/synthetic/" + f.stem().string() + "/" + f.stem().string() + "_train_*.bin") << f;
      EXPECT_EQ(c.model.vocab_size, make_synthetic_task(f.stem().string(), nlohmann::json::object())->vocab_size())
          << f;
    }
    ++n;
  }
  EXPECT_GE(n, 7);
}

// The orbital-data configs (configs/orbits/, docs/orbits.md): valid, reading
// data/orbits*/ with the vocabulary gpt data orbits writes at its defaults.
TEST(OrbitConfigs, ValidWithTheOrbitVocabulary) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(kConfigs / "orbits")) {
    const Config c = load_config(e.path().string());
    EXPECT_EQ(c.model.vocab_size, orbits::vocab_size(orbits::Options{})) << e.path();
    EXPECT_TRUE(c.data.train.starts_with("data/orbits") && c.data.train.ends_with("/orbits_train_*.bin")) << e.path();
    EXPECT_EQ(c.data.tokenizer, "none") << e.path();
    ++n;
  }
  EXPECT_GE(n, 1);
}

// The GPU-scale configs (configs/gpt2_fineweb/): valid, GPT-2 small at
// T = 1024, and identical but for the attention block and run directory.
TEST(Gpt2FinewebConfigs, ValidAndDifferOnlyInAttention) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(kConfigs / "gpt2_fineweb")) files.push_back(e.path());
  ASSERT_GE(files.size(), 5u);
  nlohmann::json first;
  for (const auto& f : files) {
    const Config c = load_config(f.string());
    EXPECT_EQ(c.model.n_layer, 12) << f;
    EXPECT_EQ(c.model.n_embd, 768) << f;
    EXPECT_EQ(c.model.context, 1024) << f;
    EXPECT_EQ(c.model.position, "rope") << f;
    EXPECT_EQ(c.run.device, "cuda") << f;
    EXPECT_EQ(c.run.dir, "runs/gpt2_fineweb/" + f.stem().string()) << f;
    const nlohmann::json j = resolved_without(f, {{"attention", ""}, {"run", "dir"}});
    if (first.is_null()) first = j;
    EXPECT_EQ(j, first) << f;
  }
}

}  // namespace
}  // namespace gpt

namespace gpt {
namespace {

// Every committed sweep (configs/sweep/) loads: its base config with every
// run's overrides (load_sweep's checks), from the repository root as
// scripts/reproduce.sh runs them; the contenders' sweep names each new variant.
TEST(SweepConfigs, EveryCommittedSweepLoads) {
  const fs::path saved = fs::current_path();
  fs::current_path(GPT_SOURCE_DIR);
  int n = 0;
  for (const auto& e : fs::directory_iterator(kConfigs / "sweep")) {
    if (e.path().filename() == "base.json") continue;
    EXPECT_NO_THROW(load_sweep(e.path().string())) << e.path();
    ++n;
  }
  const SweepPlan c = load_sweep((kConfigs / "sweep" / "contenders.json").string());
  for (const char* name : {"softmax1", "sink", "softpick", "kerple_log", "kerple_power", "forget", "output_gate"})
    EXPECT_NO_THROW(c.run(name)) << name;
  fs::current_path(saved);
  EXPECT_GE(n, 5);
}

}  // namespace
}  // namespace gpt
