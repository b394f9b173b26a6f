// Calibration at evaluation (gpt eval --calibrate): the golden-section search
// finds a known minimum, the knobs set what they name and refuse specs that
// lack them, and the CLI fits on tokens the evaluation never scores.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "config/attention.h"
#include "core/check.h"
#include "data/shard.h"
#include "eval/calibrate.h"
#include "util/run_binary.h"

namespace gpt {
namespace {

namespace fs = std::filesystem;

TEST(Calibrate, GoldenSectionFindsTheMinimumOnALogScale) {
  // (ln x − ln 1.7)² + 3: minimum at x = 1.7 inside [0.25, 4].
  std::vector<std::pair<double, double>> probes;
  int calls = 0;
  const double x = golden_section_log(
      [&](double v) {
        ++calls;
        return std::pow(std::log(v) - std::log(1.7), 2) + 3;
      },
      0.25, 4.0, 20, probes);
  EXPECT_NEAR(x, 1.7, 1.7 * 1e-3);
  EXPECT_EQ(calls, 22);  // two interior points, then one per step
  EXPECT_EQ(probes.size(), 22u);
  // A minimum at the edge is approached from inside.
  probes.clear();
  const double edge = golden_section_log([](double v) { return v; }, 1.0, 128.0, 20, probes);
  EXPECT_LT(edge, 1.01);
  EXPECT_THROW(golden_section_log([](double v) { return v; }, 2.0, 1.0, 3, probes), Error);
}

TEST(Calibrate, KnobsSetTheirKeyAndNeedTheirMethod) {
  AttentionSpec s;
  s.trained_context = 64;
  s.rope.trained_context = 64;
  EXPECT_EQ(with_knob(s, "temperature", 1.3).logit_scale, 1.3);
  EXPECT_DOUBLE_EQ(for_length(with_knob(s, "temperature", 1.3), 64).logit_factor, 1.3);
  EXPECT_EQ(knob_value(s, "temperature", 1024), 1.0);
  EXPECT_THROW(check_calibration_knob(s, "yarn_attn_factor"), Error);
  EXPECT_THROW(check_calibration_knob(s, "ntk_factor"), Error);
  EXPECT_THROW(check_calibration_knob(s, "bogus"), Error);
  s.rope.scaling = RopeScaling::Yarn;
  EXPECT_NO_THROW(check_calibration_knob(s, "yarn_attn_factor"));
  EXPECT_DOUBLE_EQ(knob_value(s, "yarn_attn_factor", 1024), 0.1 * std::log(16.0) + 1);  // its default at 16x
  EXPECT_DOUBLE_EQ(for_length(with_knob(s, "yarn_attn_factor", 1.5), 64).logit_factor, 2.25);
  s.rope.scaling = RopeScaling::Ntk;
  EXPECT_EQ(knob_value(s, "ntk_factor", 1024), 16.0);
  EXPECT_EQ(with_knob(s, "ntk_factor", 5).rope.factor, 5.0);
  // swan_base: the a of SWAN-GPT's log_a(m + a), default N.
  EXPECT_THROW(check_calibration_knob(s, "swan_base"), Error);
  s.temperature = Temperature::Swan;
  EXPECT_NO_THROW(check_calibration_knob(s, "swan_base"));
  EXPECT_EQ(knob_value(s, "swan_base", 1024), 64.0);
  EXPECT_EQ(with_knob(s, "swan_base", 300).temp_base, 300.0);
  EXPECT_NEAR(attn::row_temperature(with_knob(s, "swan_base", 300), 601), std::log(900.0) / std::log(300.0), 1e-15);
}

TEST(Calibrate, SliceOfATokenStreamReadsItsRange) {
  const fs::path dir = fs::temp_directory_path() / ("gpt_calibrate_slice_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<uint32_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i % 257);
  write_shard((dir / "v_000000.bin").string(), tokens, 2);
  const TokenStream all((dir / "v_*.bin").string(), 257);
  const TokenStream tail = all.slice(300, 1000);
  EXPECT_EQ(tail.size(), 700u);
  int32_t got[3];
  tail.read(0, 3, got);
  EXPECT_EQ(got[0], 300 % 257);
  EXPECT_EQ(got[2], 302 % 257);
  EXPECT_THROW(tail.read(698, 3, got), Error);
  EXPECT_THROW(all.slice(10, 1001), Error);
  fs::remove_all(dir);
}

// Through the binary: a tiny model calibrated at 2x, the fit recorded with its
// probes and disjoint token ranges, the uncalibrated losses on the same split.
TEST(Calibrate, CliFitsOnHeldOutTokensAndRecordsTheFit) {
  const fs::path dir = fs::temp_directory_path() / ("gpt_calibrate_cli_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "data");
  std::vector<uint32_t> tokens(8000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((i * 7919 + i / 13) % 257);
  write_shard((dir / "data" / "t_train_000001.bin").string(), tokens, 2);
  write_shard((dir / "data" / "t_val_000000.bin").string(), tokens, 2);
  const std::string cfg = (dir / "cfg.json").string();
  std::ofstream(cfg) << R"({"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "context": 16}, "data": {"train": ")"
                     << (dir / "data" / "t_train_*.bin").string() << R"(", "val": ")"
                     << (dir / "data" / "t_val_*.bin").string()
                     << R"("}, "train": {"batch_size": 2, "steps": 5, "warmup_steps": 1},
                        "eval": {"multiples": [1, 2], "tokens": 512}, "run": {"dir": ")"
                     << (dir / "run").string() << "\"}}";
  ASSERT_EQ(test::run("train " + cfg).status, 0);
  const std::string out = (dir / "cal.json").string();
  const test::Result r = test::run("eval " + (dir / "run").string() +
                                   " --calibrate temperature --calibrate-on 2 "
                                   "--tokens 256 --out " +
                                   out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("uncalibrated, on the evaluation split"), std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(std::ifstream(out));
  const auto& c = j["calibration"];
  EXPECT_EQ(c["knob"], "temperature");
  EXPECT_EQ(c["multiple"], 2);
  EXPECT_EQ(c["probes"].size(), 17u);                                // the default, two interior points, 14 steps
  EXPECT_EQ(c["calibration_tokens"][1], c["evaluation_tokens"][0]);  // adjacent, disjoint
  EXPECT_EQ(c["calibration_tokens"][1], 2000);                       // 0.25 of 8000
  EXPECT_LE(c["fitted_loss"].get<double>(), c["default_loss"].get<double>());
  EXPECT_EQ(j["context"]["logit_scale"], c["fitted"]);
  EXPECT_EQ(j["uncalibrated"].size(), 2u);
  const test::Result bad = test::run("eval " + (dir / "run").string() + " --calibrate ntk_factor");
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_NE(bad.output.find("needs --context ntk"), std::string::npos) << bad.output;
  const test::Result big = test::run("eval " + (dir / "run").string() +
                                     " --calibrate temperature "
                                     "--calibrate-fraction 0.001");
  EXPECT_EQ(big.status, 1) << big.output;
  EXPECT_NE(big.output.find("cannot hold one sequence"), std::string::npos) << big.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpt
