// The force probe (src/probe/force_probe.h, docs/orbits.md "The force
// probe"): which tokens carry a planet's label (checked through the tokens
// themselves: the decoded planet and star positions lie r apart), how labels
// are chosen, and `gpt probe force` end to end on a tiny pretrained model:
// its outputs, the fit of the true forces (Newton's law exactly), and a run
// continued from its checkpoint matching the uninterrupted one bit for bit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "data/orbits.h"
#include "probe/force_probe.h"
#include "train/checkpoint.h"
#include "train/model_io.h"
#include "util/run_binary.h"

namespace gpt {
namespace {

namespace fs = std::filesystem;

fs::path two_body_data(const std::string& tag, int train, int val, int rows) {
  const fs::path dir = fs::temp_directory_path() / ("gpt_probe_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  orbits::DataOptions d;
  d.out_dir = dir.string();
  d.train_sequences = train;
  d.val_sequences = val;
  d.seed = 3;
  d.orbit.rows = rows;
  d.orbit.max_planets = 1;
  orbits::write_orbit_data(d);
  return dir;
}

TEST(ForceProbe, PointsAreEachPlanetsSecondTokenWithinTheWindow) {
  const int rows = 30, per_seq = 1 + 2 * (rows - 1), window = 41;
  const fs::path dir = two_body_data("points", 4, 1, rows);
  const std::vector<ProbePoint> pts = probe_points((dir / "orbits_train_000001.rows").string(), window);
  // Two bodies: planet, star, planet, ... at listed positions k = 0, 1, 2, ...;
  // a planet's y token 2 + 2k < 41 for k = 0, 2, ..., 18.
  ASSERT_EQ(pts.size(), 4u * 10);
  const TokenStream tokens((dir / "orbits_train_000001.bin").string(), 7002);
  orbits::Options o;
  std::vector<int32_t> seq(per_seq);
  for (const ProbePoint& p : pts) {
    ASSERT_LT(p.token, window);
    tokens.read(static_cast<uint64_t>(p.sequence) * per_seq, per_seq, seq.data());
    // The planet's x and y are the tokens before and at p.token; the star's
    // follow. Decoded, they lie r apart within a bin's diagonal.
    const double px = orbits::bin_centre(seq[p.token - 1], o), py = orbits::bin_centre(seq[p.token], o);
    const double sx = orbits::bin_centre(seq[p.token + 1], o), sy = orbits::bin_centre(seq[p.token + 2], o);
    const double bin = 2 * o.range / o.bins;
    EXPECT_NEAR(std::hypot(px - sx, py - sy), p.r, 2 * bin) << "sequence " << p.sequence << " token " << p.token;
    // Newton's force on the planet.
    EXPECT_NEAR(p.force, orbits::kG * p.m1 * p.m2 / (p.r * p.r), 1e-9 * p.force);
  }
  // The first sequences only.
  EXPECT_EQ(probe_points((dir / "orbits_train_000001.rows").string(), window, 2).size(), 2u * 10);
  fs::remove_all(dir);
}

TEST(ForceProbe, LabelsAreEveryPointOfTheFirstSequencesThenAFewPerSequence) {
  const fs::path dir = two_body_data("labels", 5, 1, 40);
  const std::vector<ProbePoint> pts = probe_points((dir / "orbits_train_000001.rows").string(), 79);
  const std::vector<char> a = choose_labels(pts, 2, 2, 3, 7), b = choose_labels(pts, 2, 2, 3, 7);
  EXPECT_EQ(a, b) << "seeded";
  int per[5] = {0, 0, 0, 0, 0}, total[5] = {0, 0, 0, 0, 0};
  for (size_t i = 0; i < pts.size(); ++i) per[pts[i].sequence] += a[i], ++total[pts[i].sequence];
  EXPECT_EQ(per[0], total[0]);
  EXPECT_EQ(per[1], total[1]);
  EXPECT_EQ(per[2], 3);
  EXPECT_EQ(per[3], 3);
  EXPECT_EQ(per[4], 0);
  int differ = 0;
  for (uint64_t seed = 8; seed < 12; ++seed) differ += choose_labels(pts, 2, 2, 3, seed) != a;
  EXPECT_GT(differ, 0) << "the seed chooses the sparse points";
  fs::remove_all(dir);
}

std::vector<float> checkpoint_params(const fs::path& run) {
  const Checkpoint c = load_checkpoint(resolve_checkpoint(run.string()));
  std::vector<float> all;
  for (const CheckpointTensor& t : c.tensors) all.insert(all.end(), t.data.begin(), t.data.end());
  return all;
}

TEST(ForceProbe, FineTunesPredictsFitsAndContinuesBitForBit) {
  const fs::path dir = two_body_data("cli", 24, 6, 40);
  const fs::path work = dir / "runs";
  const nlohmann::json cfg = {
      {"model", {{"n_layer", 1}, {"n_head", 2}, {"n_embd", 16}, {"vocab_size", 7002}, {"context", 24}}},
      {"data",
       {{"train", (dir / "orbits_train_*.bin").string()},
        {"val", (dir / "orbits_val_*.bin").string()},
        {"tokenizer", "none"}}},
      {"train", {{"batch_size", 4}, {"steps", 4}, {"warmup_steps", 1}, {"threads", 1}, {"log_every", 2}}},
      {"eval", {{"multiples", {1, 2}}, {"tokens", 384}}},
      {"run", {{"dir", (work / "pre").string()}}}};
  std::ofstream((dir / "pre.json").string()) << cfg.dump(2);
  const test::Result pre = test::run("train " + (dir / "pre.json").string());
  ASSERT_EQ(pre.status, 0) << pre.output;

  const std::string common = " --data " + dir.string() +
                             " --batch 4 --labelled-sequences 8 --sparse-sequences 4 --sparse-points 2"
                             " --eval-sequences 5 --threads 1 --log-every 1 --seed 5";
  const fs::path full = work / "probe", part = work / "probe_part";
  const test::Result a =
      test::run("probe force --from " + (work / "pre").string() + " --out " + full.string() + " --steps 6" + common);
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_NE(a.output.find("Newton"), std::string::npos) << a.output;

  const nlohmann::json r = nlohmann::json::parse(std::ifstream(full / "results.json"));
  // 5 validation sequences, a planet every 4 tokens: y tokens 2, 6, ..., 22 < 24.
  EXPECT_EQ(r.at("points"), 5 * 6);
  const nlohmann::json& truth = r.at("truth");
  EXPECT_NEAR(truth.at("a").at("value").get<double>(), 1.0, 1e-6);
  EXPECT_NEAR(truth.at("b").at("value").get<double>(), 1.0, 1e-6);
  EXPECT_NEAR(truth.at("c").at("value").get<double>(), -2.0, 1e-6);
  EXPECT_NEAR(truth.at("lnC").at("value").get<double>(), std::log(orbits::kG), 1e-6);
  for (const char* who : {"model", "oracle"}) {
    const nlohmann::json& f = r.at(who);
    ASSERT_TRUE(f.contains("a")) << who << ": " << f.dump();
    EXPECT_EQ(f.at("n"), 30) << who;
    EXPECT_TRUE(std::isfinite(f.at("c").at("value").get<double>())) << who;
    EXPECT_LE(f.at("c").at("lo95").get<double>(), f.at("c").at("hi95").get<double>()) << who;
  }
  std::ifstream csv(full / "predictions.csv");
  std::string line;
  int lines = 0;
  while (std::getline(csv, line)) ++lines;
  EXPECT_EQ(lines, 1 + 30);
  std::ifstream log(full / "metrics.jsonl");
  int logged = 0;
  while (std::getline(log, line)) ++logged;
  EXPECT_EQ(logged, 6);
  // The model now has the head: its config says so, and its checkpoint
  // holds param/regw.
  const nlohmann::json rc = nlohmann::json::parse(std::ifstream(full / "config.json"));
  EXPECT_EQ(rc.at("model").at("regression_outputs"), 1);
  EXPECT_TRUE(load_checkpoint(resolve_checkpoint(full.string())).has("param/regw"));

  // 3 steps, then 3 more from its checkpoint: the 6-step run's parameters.
  const test::Result b =
      test::run("probe force --from " + (work / "pre").string() + " --out " + part.string() + " --steps 3" + common);
  ASSERT_EQ(b.status, 0) << b.output;
  const test::Result c = test::run("probe force --from " + part.string() + " --out " + part.string() + " --steps 6" + common);
  ASSERT_EQ(c.status, 0) << c.output;
  EXPECT_NE(c.output.find("continuing"), std::string::npos) << c.output;
  EXPECT_EQ(checkpoint_params(part), checkpoint_params(full));

  // Bad input is named.
  const test::Result bad = test::run("probe force --from " + (work / "pre").string() + " --out " +
                                     (work / "bad").string() + " --data " + dir.string() +
                                     " --labelled-sequences 100 --threads 1");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("--labelled-sequences + --sparse-sequences"), std::string::npos) << bad.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpt
