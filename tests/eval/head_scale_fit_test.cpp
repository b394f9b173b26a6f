// HeadScale (Wang et al. 2024, arXiv 2404.12224; context.head_scale, gpt eval
// --calibrate head_scale): a checkpoint trained without it gains τ_h = 1 and
// runs unchanged; the fit moves τ by the gradient of the loss at the target
// length, lowers that loss and keeps the floor; the CLI refuses what does not
// belong together.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "config/attention.h"
#include "core/check.h"
#include "data/shard.h"
#include "eval/head_scale_fit.h"
#include "model/gpt.h"
#include "train/model_io.h"
#include "util/run_binary.h"

namespace gpt {
namespace {

namespace fs = std::filesystem;

TEST(HeadScaleFit, LearningRateWarmsUpOverATenthThenFallsToATenth) {
  const int n = 200;  // warm-up: 20 steps
  EXPECT_DOUBLE_EQ(head_scale_lr(0.05, 0, n), 0.05 / 20);
  EXPECT_DOUBLE_EQ(head_scale_lr(0.05, 19, n), 0.05);
  EXPECT_DOUBLE_EQ(head_scale_lr(0.05, 20, n), 0.05);  // the cosine's start
  for (int s = 21; s < n; ++s) EXPECT_LT(head_scale_lr(0.05, s, n), head_scale_lr(0.05, s - 1, n)) << s;
  EXPECT_GT(head_scale_lr(0.05, n - 1, n), 0.005);
  EXPECT_NEAR(head_scale_lr(0.05, n, n), 0.005, 1e-15);  // where the cosine would end: a tenth
  EXPECT_DOUBLE_EQ(head_scale_lr(0.1, 0, 3), 0.1);       // fewer than ten steps: one warm-up step
}

// A small NoPE model and a stream where the next token depends on one a few
// places back, so that how sharply each head attends matters.
struct Fixture {
  fs::path dir = fs::temp_directory_path() / ("gpt_head_scale_" + std::to_string(::getpid()));
  std::string shard;
  Fixture() {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::vector<uint32_t> tokens(6000);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = i < 3 ? 1 : static_cast<uint32_t>((tokens[i - 3] * 5 + (i * 7919) % 3) % 29);
    shard = (dir / "t_val_000000.bin").string();
    write_shard(shard, tokens, 2);
  }
  ~Fixture() { fs::remove_all(dir); }
};

TEST(HeadScaleFit, FitMovesTauByTheGradientAndLowersTheLoss) {
  Fixture f;
  ModelConfig m;
  m.n_layer = 2, m.n_head = 2, m.n_embd = 16, m.vocab_size = 32, m.context = 16, m.position = "none";
  m.init_std = 0.3;
  ContextConfig cc;
  cc.head_scale = 1;
  AttentionConfig ac;
  ac.preset = "softmax";
  const AttentionSpec spec = resolve_attention(ac, m, cc);
  auto model = make_model(m, spec, "cpu", "fp32", "fp32");
  model->init(3);
  const TokenStream calib(f.shard, m.vocab_size);
  HeadScaleFitOptions o;
  o.multiple = 4;
  o.steps = 30;
  o.lr = 0.1;
  o.batch = 2;
  o.floor = 0;  // free to move either way
  o.tokens = 2048;
  int calls = 0;
  const HeadScaleFit fit = fit_head_scales(*model, calib, m.context, 256, o, [&](int, double, double) { ++calls; });
  EXPECT_EQ(calls, 30);
  ASSERT_EQ(fit.trace.size(), 30u);
  ASSERT_EQ(fit.fitted.size(), 4u);
  for (double t : fit.initial) EXPECT_EQ(t, 1.0);  // the parameter table's start: the model as it was
  double moved = 0;
  for (double t : fit.fitted) moved = std::max(moved, std::abs(t - 1.0));
  EXPECT_GT(moved, 0.05);
  EXPECT_LT(fit.fitted_loss, fit.initial_loss);
  std::printf("[head_scale] loss at 4x %.5f -> %.5f, largest |tau - 1| %.3f\n", fit.initial_loss, fit.fitted_loss,
              moved);
  // The model keeps the fitted values.
  const ParamSpec& t = model->layout().find("attnscale");
  std::vector<float> now(t.numel());
  model->backend().download(now.data(), model->params() + t.offset, now.size());
  for (size_t i = 0; i < now.size(); ++i) EXPECT_EQ(now[i], static_cast<float>(fit.fitted[i]));
  // The floor holds after every step; init sets the start.
  model->init(3);
  o.floor = 1.2;
  o.init = 1.5;
  o.steps = 5;
  const HeadScaleFit floored = fit_head_scales(*model, calib, m.context, 256, o);
  for (double x : floored.initial) EXPECT_EQ(x, 1.5);
  for (double x : floored.fitted) EXPECT_GE(x, 1.2);
  // A start below the floor is refused rather than silently raised.
  o.init = 1.1;
  try {
    fit_head_scales(*model, calib, m.context, 256, o);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lies below --head-scale-floor"), std::string::npos) << e.what();
  }
  o.init = 1.5;
  // A model without HeadScale is refused, naming the way to get it.
  auto plain = make_model(m, resolve_attention(ac, m), "cpu", "fp32", "fp32");
  try {
    fit_head_scales(*plain, calib, m.context, 256, o);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--context headscale"), std::string::npos) << e.what();
  }
}

// ssmax's s_h and HeadScale's τ_h share the tensor attnscale and its shape
// but not its meaning: train.init_from copies neither into the other.
TEST(HeadScaleFit, InitFromDoesNotTakeSsmaxScalesForTemperatures) {
  const fs::path dir = fs::temp_directory_path() / ("gpt_head_scale_init_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Config c;
  c.model.n_layer = 1, c.model.n_head = 2, c.model.n_embd = 16, c.model.vocab_size = 32, c.model.context = 16;
  c.model.position = "none";
  c.attention.preset = "ssmax";
  auto ssmax = make_model(c.model, resolve_attention(c), "cpu", "fp32", "fp32");
  ssmax->init(1);
  save_run_checkpoint(dir.string(), 1, make_checkpoint(*ssmax, nullptr, c, TrainProgress{}));
  Config h = c;
  h.attention.preset = "softmax";
  h.context.head_scale = 1;
  auto model = make_model(h.model, resolve_attention(h), "cpu", "fp32", "fp32");
  model->init(2);
  const InitFromSummary sum = init_from_checkpoint(*model, dir.string());
  EXPECT_EQ(sum.kept, (std::vector<std::string>{"attnscale"}));
  const ParamSpec& t = model->layout().find("attnscale");
  std::vector<float> tau(t.numel());
  model->backend().download(tau.data(), model->params() + t.offset, tau.size());
  for (float x : tau) EXPECT_EQ(x, 1.0f);
  fs::remove_all(dir);
}

TEST(HeadScaleFit, CliAddsTauToACheckpointAndFitsItOnHeldOutTokens) {
  Fixture f;
  const fs::path& dir = f.dir;
  fs::copy_file(f.shard, dir / "t_train_000001.bin");
  const std::string cfg = (dir / "cfg.json").string();
  std::ofstream(cfg) << R"({"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "context": 16, "position": "none",
                        "vocab_size": 32}, "data": {"train": ")"
                     << (dir / "t_train_*.bin").string() << R"(", "val": ")" << (dir / "t_val_*.bin").string()
                     << R"("}, "train": {"batch_size": 2, "steps": 5, "warmup_steps": 1},
                        "eval": {"multiples": [1, 2], "tokens": 512}, "run": {"dir": ")"
                     << (dir / "run").string() << "\"}}";
  ASSERT_EQ(test::run("train " + cfg).status, 0);
  const std::string run = (dir / "run").string();
  // τ = 1: the same losses as the checkpoint without it.
  const std::string plain = (dir / "plain.json").string(), with = (dir / "with.json").string();
  ASSERT_EQ(test::run("eval " + run + " --out " + plain).status, 0);
  const test::Result r1 = test::run("eval " + run + " --context headscale --out " + with);
  ASSERT_EQ(r1.status, 0) << r1.output;
  EXPECT_NE(r1.output.find("attnscale"), std::string::npos) << r1.output;  // the log says it was added
  const auto jp = nlohmann::json::parse(std::ifstream(plain)), jw = nlohmann::json::parse(std::ifstream(with));
  ASSERT_EQ(jp["multiples"].size(), 2u);
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(jp["multiples"][k]["loss"], jw["multiples"][k]["loss"]) << k;
  EXPECT_EQ(jw["context"]["head_scale"], true);
  // The fit.
  const std::string out = (dir / "fit.json").string();
  const test::Result r2 = test::run("eval " + run +
                                    " --context headscale --calibrate head_scale --calibrate-on 2 "
                                    "--calibrate-steps 12 --calibrate-lr 0.1 --tokens 256 --out " +
                                    out);
  ASSERT_EQ(r2.status, 0) << r2.output;
  EXPECT_NE(r2.output.find("tau per layer and head"), std::string::npos) << r2.output;
  const auto j = nlohmann::json::parse(std::ifstream(out));
  const auto& c = j["calibration"];
  EXPECT_EQ(c["knob"], "head_scale");
  EXPECT_EQ(c["multiple"], 2);
  EXPECT_EQ(c["trace"].size(), 12u);
  ASSERT_EQ(c["fitted"].size(), 1u);  // one layer
  ASSERT_EQ(c["fitted"][0].size(), 2u);  // two heads
  for (const auto& t : c["fitted"][0]) EXPECT_GE(t.get<double>(), 1.0);  // the authors' floor
  EXPECT_EQ(c["calibration_tokens"][1], c["evaluation_tokens"][0]);
  EXPECT_EQ(j["uncalibrated"].size(), 2u);
  // What does not belong together is refused with the way out.
  const test::Result no_ctx = test::run("eval " + run + " --calibrate head_scale");
  EXPECT_EQ(no_ctx.status, 1);
  EXPECT_NE(no_ctx.output.find("needs --context headscale"), std::string::npos) << no_ctx.output;
  const test::Result stray = test::run("eval " + run + " --head-scale-floor 2");
  EXPECT_EQ(stray.status, 1);
  EXPECT_NE(stray.output.find("belong to --calibrate head_scale"), std::string::npos) << stray.output;
  const test::Result other_task = test::run("eval " + run + " --task passkey --calibrate-steps 5");
  EXPECT_EQ(other_task.status, 1);
  EXPECT_NE(other_task.output.find("belong to --calibrate head_scale"), std::string::npos) << other_task.output;
  // --context-set keeps the run's context section and adds τ = 1.
  const std::string kept = (dir / "kept.json").string();
  ASSERT_EQ(test::run("eval " + run + " --context-set head_scale=1 --out " + kept).status, 0);
  const auto jk = nlohmann::json::parse(std::ifstream(kept));
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(jp["multiples"][k]["loss"], jk["multiples"][k]["loss"]) << k;
  const test::Result ssmax = test::run("eval " + run + " --attention ssmax --context headscale");
  EXPECT_EQ(ssmax.status, 1);
  EXPECT_NE(ssmax.output.find("context.head_scale"), std::string::npos) << ssmax.output;
}

}  // namespace
}  // namespace gpt
