// gpt sweep: the sweep file's checks, and a tiny end-to-end sweep through the
// binary (train, training-free eval, passkey, summary; a re-run skips all).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "data/shard.h"
#include "sweep/sweep.h"
#include "util/run_binary.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

class Sweep : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gpt_sweep_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "data");
    std::vector<uint32_t> tokens(8000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>('a' + (i * 7919) % 26);
    write_shard((dir_ / "data" / "t_train_000001.bin").string(), tokens, 2);
    write_shard((dir_ / "data" / "t_val_000000.bin").string(), tokens, 2);
    std::ofstream(dir_ / "base.json") << R"({"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "context": 40},
        "data": {"train": ")" << (dir_ / "data" / "t_train_*.bin").string()
                                      << R"(", "val": ")" << (dir_ / "data" / "t_val_*.bin").string()
                                      << R"(", "passkey_fraction": 0.2},
        "train": {"batch_size": 2, "steps": 3, "warmup_steps": 1, "threads": 1},
        "eval": {"multiples": [1, 2], "tokens": 160, "span": 80}})";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string sweep_file(const std::string& body) {
    const std::string path = (dir_ / ("sweep" + std::to_string(n_++) + ".json")).string();
    std::ofstream(path) << "{\"dir\": \"" << (dir_ / "out").string() << "\", \"base\": \""
                        << (dir_ / "base.json").string() << "\", " << body << "}";
    return path;
  }
  void expect_load_error(const std::string& body, const std::string& needle) {
    try {
      load_sweep(sweep_file(body));
      ADD_FAILURE() << "no error for " << body;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }

  fs::path dir_;
  int n_ = 0;
};

TEST_F(Sweep, FileErrorsNameTheProblem) {
  expect_load_error(R"("runs": [{"name": "a"}], "colour": 1)", "unknown key \"colour\"");
  expect_load_error(R"("runs": [{"name": "a", "sed": [1]}])", "unknown key \"runs[].sed\"");
  expect_load_error(R"("runs": [{"name": "a"}, {"name": "a"}])", "two runs or evals are named \"a\"");
  expect_load_error(R"("runs": [{"name": "a b"}])", "only letters, digits");
  expect_load_error(R"("runs": [{"name": "a"}], "evals": [{"name": "e", "run": "zz", "attention": "logn"}])",
                    "names run \"zz\"");
  expect_load_error(R"("runs": [{"name": "a"}], "evals": [{"name": "e", "run": "a"}])", "changes nothing");
  expect_load_error(R"("runs": [{"name": "a", "set": ["attention.preset=nope"]}])", "run \"a\"");
  expect_load_error(R"("runs": [])", "\"runs\" must be a non-empty array");
  expect_load_error(R"("runs": [{"name": "a"}], "passkey": {"depths": [2]})", "depths must lie in [0, 1]");
  expect_load_error(R"("runs": [{"name": "a"}], "plot": {"profile": ["b"]})", "plot.profile names \"b\"");
  expect_load_error(R"("runs": [{"name": "a"}], "evals": [{"name": "e", "run": "a", "context": "pi,yarn"}])",
                    "\"pi\" and \"yarn\" are both a RoPE frequency rule");
  expect_load_error(R"("runs": [{"name": "a"}], "evals": [{"name": "e", "run": "a", "context": "256"}])",
                    "not a length");
  expect_load_error(
      R"("runs": [{"name": "a"}], "evals": [{"name": "e", "run": "a", "context": "yarn", "kl_against": "/no/run"}])",
      "\"kl_against\" is \"base\"");
  expect_load_error(R"("runs": [{"name": "a"}], "evals": [{"name": "e", "run": "a", "kl_against": "base"}])",
                    "compares the model with itself");
  expect_load_error(R"("runs": [{"name": "a", "task": "sorting"}])", "\"sorting\" is not a synthetic task");
  expect_load_error(R"("runs": [{"name": "a", "task": "copy"}], "task": {"samples": 0})", "samples >= 1");
}

TEST_F(Sweep, SyntheticTaskRunsAreEvaluatedAndGridded) {
  // Passkey (depths) and copy (one cell) data from the binary; two runs train on them.
  for (const std::string t : {"passkey", "copy"}) {
    const auto g = test::run("data synthetic " + t + " " + (dir_ / t).string() +
                             " --context 40 --train-examples 50 --val-examples 10 --max-length 8" +
                             (t == "copy" ? "" : " --noise 8"));
    if (t == "passkey") {
      // --max-length is copy's: refused by name, then generated without it.
      ASSERT_EQ(g.status, 1) << g.output;
      ASSERT_EQ(test::run("data synthetic passkey " + (dir_ / t).string() +
                          " --context 40 --train-examples 50 --val-examples 10 --noise 8")
                    .status,
                0);
    } else {
      ASSERT_EQ(g.status, 0) << g.output;
    }
  }
  auto data_set = [&](const std::string& t) {
    return "[\"data.train=" + (dir_ / t / (t + "_train_*.bin")).string() +
           "\", \"data.val=" + (dir_ / t / (t + "_val_*.bin")).string() + "\", \"data.passkey_fraction=0\"]";
  };
  const std::string file = sweep_file(R"("runs": [{"name": "pk", "task": "passkey", "seeds": [1, 2], "set": )" +
                                      data_set("passkey") + R"(}, {"name": "cp", "task": "copy", "set": )" +
                                      data_set("copy") + R"(}], "task": {"depths": [0, 1], "samples": 3})");
  const auto r = test::run("sweep " + file);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "out" / "pk" / "seed2" / "eval" / "task_passkey.json"));
  EXPECT_TRUE(fs::exists(dir_ / "out" / "cp" / "seed1" / "eval" / "task_copy.json"));
  const fs::path sum = dir_ / "out" / "summary";
  const auto j = nlohmann::json::parse(std::ifstream(sum / "summary.json"));
  ASSERT_EQ(j["tasks"].size(), 2u);
  EXPECT_EQ(j["tasks"][0]["task"], "passkey");
  EXPECT_EQ(j["tasks"][0]["seeds"], 2);
  EXPECT_EQ(j["tasks"][0]["grid"].size(), 4u);  // 2 multiples x 2 depths
  EXPECT_EQ(j["tasks"][1]["grid"].size(), 2u);  // copy: one cell per multiple
  const std::string text = [&] {
    std::ifstream md(sum / "results.md");
    return std::string((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  }();
  for (const std::string s : {"Task `passkey`", "`pk`: exact match (2 seed(s) × 3 examples per cell)", "| all |",
                              "| mean, seed sd |", "answer tokens right"})
    EXPECT_NE(text.find(s), std::string::npos) << s << " missing in\n" << text;
  EXPECT_TRUE(fs::exists(sum / "task_pk.dat"));
  // Per task, the line of each run against the multiple: mean over seeds of
  // the cell mean, its sd and range; as a table and task_lines_TASK.dat.
  ASSERT_EQ(j["tasks"][0]["line"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& e = j["tasks"][0]["line"][i];
    std::vector<double> per_seed;
    for (const std::string s : {"seed1", "seed2"}) {
      const auto g = nlohmann::json::parse(std::ifstream(dir_ / "out" / "pk" / s / "eval" / "task_passkey.json"));
      const auto& cells = g["multiples"][i]["cells"];
      per_seed.push_back(0.5 * (cells[0]["exact"].get<double>() + cells[1]["exact"].get<double>()));
    }
    EXPECT_NEAR(e["exact"].get<double>(), 0.5 * (per_seed[0] + per_seed[1]), 1e-12);
    EXPECT_NEAR(e["sd"].get<double>(), std::abs(per_seed[0] - per_seed[1]) / std::sqrt(2.0), 1e-12);
    EXPECT_EQ(e["min"].get<double>(), std::min(per_seed[0], per_seed[1]));
    EXPECT_EQ(e["max"].get<double>(), std::max(per_seed[0], per_seed[1]));
  }
  EXPECT_TRUE(j["tasks"][1]["line"][0]["sd"].is_null());  // one seed: no sd
  EXPECT_NE(text.find("## Task `copy`: exact match against the context multiple"), std::string::npos) << text;
  EXPECT_NE(text.find("| cp | 1 |"), std::string::npos) << text;
  EXPECT_TRUE(fs::exists(sum / "task_lines_passkey.dat"));
  EXPECT_TRUE(fs::exists(sum / "task_lines_copy.dat"));
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    EXPECT_TRUE(fs::exists(sum / "tasks.png")) << r.output;
    EXPECT_TRUE(fs::exists(sum / "tasks_lines.png")) << r.output;
  }
}

// "budget_reuse": "wsd": the shorter budget (5 steps, decay from step 4)
// resumes from the 10-step trunk's checkpoint at step 4 (its decay starts at
// 8) and ends where a 5-step wsd run trained from scratch ends, bit for bit;
// two jobs at once, so the branch has to wait for its trunk.
TEST_F(Sweep, BudgetReuseBranchesOffTheLargestBudget) {
  expect_load_error(R"("runs": [{"name": "a"}], "budget_reuse": "wsd")", "\"budget_reuse\" needs \"budgets\"");
  expect_load_error(R"("runs": [{"name": "a"}], "budgets": [5, 10], "budget_reuse": "cosine")",
                    "\"budget_reuse\" \"cosine\" is not valid; allowed: none, wsd");
  const std::string file =
      sweep_file(R"("runs": [{"name": "a"}], "seeds": [1, 2], "budgets": [5, 10], "budget_reuse": "wsd")");
  const SweepPlan plan = load_sweep(file);
  EXPECT_EQ(plan.run("a_5steps").branch_of, "a_10steps");
  EXPECT_EQ(plan.run("a_5steps").branch_step, 4);
  EXPECT_TRUE(plan.run("a_10steps").branch_of.empty());
  const auto& trunk_set = plan.run("a_10steps").set;
  EXPECT_NE(std::find(trunk_set.begin(), trunk_set.end(), "train.checkpoint_steps=[4]"), trunk_set.end());
  EXPECT_NE(std::find(trunk_set.begin(), trunk_set.end(), "train.lr_schedule=wsd"), trunk_set.end());
  const auto r = test::run("sweep " + file + " --jobs 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--resume " + (dir_ / "out" / "a_10steps" / "seed2").string() + "/checkpoints/"),
            std::string::npos)
      << r.output;
  const auto fresh = test::run(
      "train " + (dir_ / "base.json").string() +
      " --set train.steps=5 --set train.lr_schedule=wsd --set train.seed=2 --set run.dir=" + (dir_ / "fresh").string());
  ASSERT_EQ(fresh.status, 0) << fresh.output;
  const auto branch = nlohmann::json::parse(std::ifstream(dir_ / "out" / "a_5steps" / "seed2" / "extrapolation.json"));
  const auto own = nlohmann::json::parse(std::ifstream(dir_ / "fresh" / "extrapolation.json"));
  ASSERT_EQ(branch["multiples"].size(), own["multiples"].size());
  for (size_t m = 0; m < own["multiples"].size(); ++m)
    EXPECT_EQ(branch["multiples"][m]["loss"], own["multiples"][m]["loss"]) << "multiple " << m;
  const std::string md = summarize_sweep(plan);
  EXPECT_NE(md.find("resumes from the checkpoint of the same seed's largest budget"), std::string::npos);
}

TEST_F(Sweep, TrainsEvaluatesSummarisesAndSkipsFinishedJobs) {
  const std::string file = sweep_file(R"(
      "runs": [{"name": "softmax", "set": ["attention.preset=softmax"], "seeds": [1, 2], "passkey": true},
               {"name": "lssa", "set": ["attention.preset=lssa"]}],
      "evals": [{"name": "softmax+logn", "run": "softmax", "attention": "logn"},
                {"name": "softmax+yarn", "run": "softmax", "context": "yarn", "context_set": ["factor=2"],
                 "kl_against": "base", "longppl": "base"}],
      "passkey": {"depths": [0, 1], "samples": 2})");
  const auto first = test::run("sweep " + file);
  ASSERT_EQ(first.status, 0) << first.output;
  for (const std::string run : {"softmax/seed1", "softmax/seed2", "lssa/seed1"})
    EXPECT_TRUE(fs::exists(dir_ / "out" / run / "extrapolation.json")) << run;
  EXPECT_TRUE(fs::exists(dir_ / "out" / "softmax" / "seed2" / "eval" / "softmax+logn.json"));
  EXPECT_TRUE(fs::exists(dir_ / "out" / "softmax" / "seed1" / "eval" / "passkey.json"));
  // 3 trainings + 4 evals + 2 passkey evaluations; a second run does none.
  const auto again = test::run("sweep " + file);
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_NE(again.output.find("9 jobs, 9 already done, 0 failed"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("train softmax seed 1: /"), std::string::npos) << again.output;

  const fs::path sum = dir_ / "out" / "summary";
  std::ifstream in(sum / "summary.json");
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["variants"].size(), 4u);
  EXPECT_EQ(j["variants"][0]["name"], "softmax");
  EXPECT_EQ(j["variants"][0]["seeds"], 2);
  EXPECT_EQ(j["variants"][2]["name"], "softmax+logn");
  EXPECT_EQ(j["variants"][3]["name"], "softmax+yarn");
  const auto yarn =
      nlohmann::json::parse(std::ifstream(dir_ / "out" / "softmax" / "seed1" / "eval" / "softmax+yarn.json"));
  EXPECT_EQ(yarn["context"]["rope_scaling"], "yarn");
  EXPECT_EQ(yarn["context"]["factor"], 2.0);
  EXPECT_TRUE(j["variants"][0]["multiples"][1]["loss_mean"].is_number());
  EXPECT_EQ(j["passkey"][0]["grid"].size(), 4u);  // 2 multiples x 2 depths
  EXPECT_TRUE(j["passkey"][0].contains("effective_multiple"));
  // The measures: KL at 1x (a fixed YaRN factor of 2 changes the model at 1x)
  // and LongPPL's key loss, from the eval's own results.
  ASSERT_EQ(j["measures"].size(), 1u);
  EXPECT_EQ(j["measures"][0]["name"], "softmax+yarn");
  EXPECT_GT(j["measures"][0]["kl_at_1x_mean"].get<double>(), 0.0);
  EXPECT_EQ(j["measures"][0]["kl_at_1x_mean"].get<double>(),
            (yarn["kl_at_1x"]["kl"].get<double>() +
             nlohmann::json::parse(
                 std::ifstream(dir_ / "out" / "softmax" / "seed2" / "eval" / "softmax+yarn.json"))["kl_at_1x"]["kl"]
                 .get<double>()) /
                2);
  EXPECT_EQ(j["measures"][0]["longppl"].size(), j["multiples"].size());
  std::ifstream md(sum / "results.md");
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  for (const std::string s : {"`softmax`", "`lssa`", "`softmax+logn`", "Passkey retrieval, `softmax`", "± ",
                              "## Measures beside the loss", "effective length (every multiple"})
    EXPECT_NE(text.find(s), std::string::npos) << s << " missing in\n" << text;
  for (const std::string f : {"loss.dat", "diagnostics.dat", "profile.dat", "passkey_softmax.dat", "plots.gp"})
    EXPECT_TRUE(fs::exists(sum / f)) << f;
  // LongPPL's plot: a block per variant with a key loss somewhere; this
  // tiny model's long context lowers no token's loss enough (every key loss
  // null), so there is nothing to draw (tests/sweep/plots: the drawn case).
  bool any_key = false;
  for (const auto& row : j["measures"][0]["longppl"]) any_key |= !row["key_loss_mean"].is_null();
  {
    std::ifstream gp(sum / "plots.gp");
    const std::string script((std::istreambuf_iterator<char>(gp)), std::istreambuf_iterator<char>());
    EXPECT_EQ(script.find("longppl_vs_context.png") != std::string::npos, any_key);
    std::ifstream dat(sum / "longppl.dat");
    std::string header;
    EXPECT_EQ(static_cast<bool>(std::getline(dat, header)), any_key) << header;
  }
  // With gnuplot installed (scripts/setup.sh installs it) the script must draw.
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    for (const std::string f : {"loss_vs_context.png", "diagnostics.png", "profile.png", "passkey.png"}) {
      EXPECT_TRUE(fs::exists(sum / f)) << f << " not drawn:\n" << first.output;
    }
  }
  // A failed job is reported, and the rest still runs: the summary marks it.
  fs::remove(dir_ / "out" / "lssa" / "seed1" / "extrapolation.json");
  fs::remove_all(dir_ / "out" / "lssa" / "seed1" / "checkpoints");
  fs::remove(dir_ / "data" / "t_train_000001.bin");
  const auto broken = test::run("sweep " + file);
  EXPECT_EQ(broken.status, 1) << broken.output;
  EXPECT_NE(broken.output.find("train lssa seed 1 failed"), std::string::npos) << broken.output;
  EXPECT_NE(broken.output.find("| `lssa` | trained | 0 (1 missing) |"), std::string::npos) << broken.output;
}

}  // namespace
}  // namespace gpt
