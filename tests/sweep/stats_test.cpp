// The sweep's statistics against references written here: published
// Student-t quantiles, the t CDF against a numerical integration of the t
// density (Simpson, double precision), a paired example worked by hand, and
// the summary's "not distinguishable" marking on constructed seed results.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "sweep/stats.h"
#include "sweep/sweep.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

// P(T <= t) by Simpson's rule over the density from 0 to |t| (symmetric).
double ref_t_cdf(double t, double df) {
  const double c = std::exp(std::lgamma((df + 1) / 2) - std::lgamma(df / 2)) / std::sqrt(df * M_PI);
  auto f = [&](double x) { return c * std::pow(1 + x * x / df, -(df + 1) / 2); };
  const int n = 200000;  // even
  const double a = 0, b = std::fabs(t), h = (b - a) / n;
  double s = f(a) + f(b);
  for (int i = 1; i < n; ++i) s += (i % 2 ? 4 : 2) * f(a + i * h);
  const double half = s * h / 3;
  return t >= 0 ? 0.5 + half : 0.5 - half;
}

TEST(Stats, TQuantilesMatchPublishedTables) {
  // Two-sided 95% (q = 0.975) and one-sided 95% (q = 0.95) critical values.
  const std::pair<double, double> q975[] = {{1, 12.7062}, {2, 4.3027},  {3, 3.1824},  {4, 2.7764},
                                            {9, 2.2622},  {30, 2.0423}, {120, 1.9799}};
  for (auto [df, v] : q975) EXPECT_NEAR(stats::t_quantile(0.975, df), v, 1e-4) << "df " << df;
  EXPECT_NEAR(stats::t_quantile(0.95, 5), 2.0150, 1e-4);
  EXPECT_NEAR(stats::t_quantile(0.025, 4), -2.7764, 1e-4);
  EXPECT_NEAR(stats::t_quantile(0.5, 7), 0.0, 1e-12);
}

TEST(Stats, TCdfMatchesIntegratedDensity) {
  for (double df : {1.0, 2.0, 3.0, 7.0, 29.0})
    for (double t : {-6.0, -2.5, -0.3, 0.0, 0.7, 1.96, 4.0, 12.0})
      EXPECT_NEAR(stats::t_cdf(t, df), ref_t_cdf(t, df), 1e-9) << "df " << df << " t " << t;
}

TEST(Stats, MeanIntervalAndPairedTestWorkedByHand) {
  const std::vector<double> a = {2.10, 2.05, 2.12}, b = {2.00, 1.98, 2.07};
  // d = 0.10, 0.07, 0.05: mean 0.073333..., sample sd from the definition.
  double mean = 0;
  for (size_t i = 0; i < a.size(); ++i) mean += (a[i] - b[i]) / 3;
  double ss = 0;
  for (size_t i = 0; i < a.size(); ++i) ss += (a[i] - b[i] - mean) * (a[i] - b[i] - mean);
  const double sd = std::sqrt(ss / 2), se = sd / std::sqrt(3.0), t = mean / se;
  const stats::PairedTest p = stats::paired_t(a, b);
  EXPECT_EQ(p.n, 3);
  EXPECT_NEAR(p.mean, mean, 1e-15);
  EXPECT_NEAR(p.sd, sd, 1e-15);
  EXPECT_NEAR(p.t, t, 1e-12);
  EXPECT_NEAR(p.p, 2 * (1 - ref_t_cdf(std::fabs(t), 2)), 1e-9);
  EXPECT_NEAR(p.lo, mean - 4.302653 * se, 1e-6);
  EXPECT_NEAR(p.hi, mean + 4.302653 * se, 1e-6);
  EXPECT_TRUE(p.distinguishable());  // t = 5.2 with 2 df: the interval is above 0
  // A difference inside the noise.
  const stats::PairedTest q = stats::paired_t({2.0, 2.1, 1.9}, {2.05, 2.0, 1.96});
  EXPECT_LT(q.lo, 0);
  EXPECT_GT(q.hi, 0);
  EXPECT_FALSE(q.distinguishable());
  // One pair: no test.
  const stats::PairedTest one = stats::paired_t({2.0}, {1.0});
  EXPECT_EQ(one.n, 1);
  EXPECT_TRUE(std::isnan(one.p));
  EXPECT_FALSE(one.distinguishable());
  // The mean interval of one sample is its own paired test against zeros.
  const stats::MeanInterval m = stats::mean_interval({1.0, 2.0, 4.0});
  EXPECT_NEAR(m.mean, 7.0 / 3, 1e-15);
  EXPECT_NEAR(m.hi - m.mean, 4.302653 * m.sd / std::sqrt(3.0), 1e-6);
  EXPECT_TRUE(std::isnan(stats::mean_interval({1.0}).lo));
}

// Constructed results of a 3-seed sweep: `close` differs from softmax by
// noise (marked not distinguishable), `worse` by a steady +0.1 (p small).
// The paired bootstrap against the procedure written out here with the same
// generator: R resamples of n indices rng() % n, percentile interval, p from
// the shares on either side of 0.
TEST(Stats, PairedBootstrapMatchesTheProcedureWithAFixedSeed) {
  const std::vector<double> a = {2.10, 2.31, 1.95, 2.40, 2.02, 2.25, 2.18, 1.99};
  const std::vector<double> b = {2.05, 2.20, 1.97, 2.31, 1.96, 2.21, 2.10, 2.00};
  stats::BootstrapOptions opt;
  opt.resamples = 2000;
  opt.seed = 7;
  const stats::PairedTest t = stats::paired_bootstrap(a, b, 0.95, opt);
  std::mt19937_64 rng(7);
  std::vector<double> means;
  int le = 0, ge = 0;
  for (int r = 0; r < 2000; ++r) {
    double s = 0;
    for (int i = 0; i < 8; ++i) {
      const size_t k = rng() % 8;
      s += a[k] - b[k];
    }
    means.push_back(s / 8);
    le += means.back() <= 0, ge += means.back() >= 0;
  }
  std::sort(means.begin(), means.end());
  EXPECT_EQ(t.n, 8);
  EXPECT_NEAR(t.mean, 0.05, 1e-12);  // (0.05 + 0.11 - 0.02 + 0.09 + 0.06 + 0.04 + 0.08 - 0.01) / 8
  EXPECT_EQ(t.lo, means[50]);        // floor(0.025 * 2000) = 50
  EXPECT_EQ(t.hi, means[1949]);
  EXPECT_DOUBLE_EQ(t.p, std::max(2.0 * std::min(le, ge) / 2000, 1.0 / 2000));
  EXPECT_TRUE(t.distinguishable()) << t.lo << " " << t.hi;  // 6 of 8 windows favour b
  // Differences symmetric around 0: inside the noise.
  const stats::PairedTest z = stats::paired_bootstrap({1, 2, 3, 4}, {2, 1, 4, 3});
  EXPECT_FALSE(z.distinguishable());
  EXPECT_LE(z.lo, 0);
  EXPECT_GE(z.hi, 0);
  EXPECT_TRUE(std::isnan(stats::paired_bootstrap({1}, {2}).p));
}

TEST(Stats, SweepSummaryMarksDifferencesInsideTheSeedNoise) {
  const fs::path dir = fs::temp_directory_path() / ("gpt_stats_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "base.json") << R"({"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "context": 8}})";
  std::ofstream(dir / "sweep.json") << R"({"dir": ")" << (dir / "out").string() << R"(", "base": ")"
                                    << (dir / "base.json").string() << R"(", "seeds": [1, 2, 3], "runs": [
      {"name": "softmax"}, {"name": "close"}, {"name": "worse"}]})";
  const SweepPlan plan = load_sweep((dir / "sweep.json").string());
  EXPECT_EQ(plan.baseline, "softmax");
  const std::map<std::string, std::vector<double>> loss = {
      {"softmax", {2.00, 2.10, 1.90}}, {"close", {2.05, 2.00, 1.96}}, {"worse", {2.10, 2.20, 2.00}}};
  for (const auto& [name, xs] : loss)
    for (int s = 1; s <= 3; ++s) {
      const fs::path run = fs::path(plan.run_dir(name, s));
      fs::create_directories(run);
      nlohmann::json row = {{"multiple", 1},
                            {"loss", xs[s - 1]},
                            {"loss_past_train", nullptr},
                            {"attention_diagnostics", {{{"sink", 0.1}, {"entropy", 1.0}}}},
                            {"profile", {{{"start", 0}, {"end", 8}, {"loss", xs[s - 1]}}}}};
      std::ofstream(run / "extrapolation.json") << nlohmann::json{{"trained_context", 8}, {"multiples", {row}}};
    }
  const std::string md = summarize_sweep(plan);
  EXPECT_NE(md.find("Paired difference against `softmax`"), std::string::npos) << md;
  const size_t close = md.find("| `close` | 3 |", md.find("Paired difference"));
  const size_t worse = md.find("| `worse` | 3 |", md.find("Paired difference"));
  ASSERT_NE(close, std::string::npos) << md;
  ASSERT_NE(worse, std::string::npos) << md;
  const std::string close_row = md.substr(close, md.find('\n', close) - close);
  const std::string worse_row = md.substr(worse, md.find('\n', worse) - worse);
  EXPECT_NE(close_row.find("not distinguishable"), std::string::npos) << close_row;
  EXPECT_EQ(worse_row.find("not distinguishable"), std::string::npos) << worse_row;
  EXPECT_NE(worse_row.find("+0.1000"), std::string::npos) << worse_row;
  // The JSON carries the same test.
  std::ifstream in(dir / "out" / "summary" / "summary.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  for (const auto& v : j["variants"])
    if (v["name"] == "worse") {
      EXPECT_EQ(v["paired"]["baseline"], "softmax");
      EXPECT_TRUE(v["paired"]["multiples"][0]["distinguishable"].get<bool>());
      EXPECT_NEAR(v["paired"]["multiples"][0]["diff_mean"].get<double>(), 0.1, 1e-12);
    }
  fs::remove_all(dir);
}

// The budget axis: each run expands into one variant per budget (train.steps
// set), evals and plot names with it, the baseline at the largest budget;
// the summary's budget table holds each run's loss at 1×, at the largest
// multiple and their gap per budget, from results written here by hand.
TEST(Stats, SweepBudgetAxisExpandsAndTabulates) {
  const fs::path dir = fs::temp_directory_path() / ("gpt_stats_budget_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "base.json") << R"({"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "context": 8},
      "train": {"batch_size": 4, "warmup_steps": 5}})";
  std::ofstream(dir / "sweep.json") << R"({"dir": ")" << (dir / "out").string() << R"(", "base": ")"
                                    << (dir / "base.json").string() << R"(", "seeds": [1, 2], "budgets": [10, 40],
      "runs": [{"name": "softmax"}, {"name": "lssar", "set": ["attention.preset=lssar"]}],
      "evals": [{"name": "softmax+logn", "run": "softmax", "attention": "logn"}],
      "plot": {"profile": ["softmax"]}})";
  const SweepPlan plan = load_sweep((dir / "sweep.json").string());
  std::vector<std::string> names;
  for (const auto& r : plan.runs) names.push_back(r.name);
  EXPECT_EQ(names, (std::vector<std::string>{"softmax_10steps", "softmax_40steps", "lssar_10steps", "lssar_40steps"}));
  EXPECT_EQ(plan.run("lssar_40steps").set.back(), "train.steps=40");
  EXPECT_EQ(plan.run("lssar_40steps").family, "lssar");
  ASSERT_EQ(plan.evals.size(), 2u);
  EXPECT_EQ(plan.evals[1].name, "softmax+logn_40steps");
  EXPECT_EQ(plan.evals[1].run, "softmax_40steps");
  EXPECT_EQ(plan.profile_variants, (std::vector<std::string>{"softmax_10steps", "softmax_40steps"}));
  EXPECT_EQ(plan.baseline, "softmax_40steps");
  // loss at 1x and 2x per run, budget and seed
  auto loss = [](const std::string& run, int steps, int seed, int m) {
    return (run == "softmax" ? 2.0 : 2.2) - 0.01 * steps / 10 + 0.001 * seed + (m == 2 ? 0.05 * steps / 10 : 0);
  };
  for (const char* run : {"softmax", "lssar"})
    for (int steps : {10, 40})
      for (int seed : {1, 2}) {
        const fs::path rd = fs::path(plan.run_dir(std::string(run) + "_" + std::to_string(steps) + "steps", seed));
        fs::create_directories(rd);
        nlohmann::json rows = nlohmann::json::array();
        for (int m : {1, 2})
          rows.push_back({{"multiple", m},
                          {"loss", loss(run, steps, seed, m)},
                          {"loss_past_train", nullptr},
                          {"attention_diagnostics", {{{"sink", 0.1}, {"entropy", 1.0}}}},
                          {"profile", {{{"start", 0}, {"end", 8}, {"loss", 1.0}}}}});
        std::ofstream(rd / "extrapolation.json") << nlohmann::json{{"trained_context", 8}, {"multiples", rows}};
      }
  const std::string md = summarize_sweep(plan);
  const size_t at = md.find("## Loss against the training budget");
  ASSERT_NE(at, std::string::npos) << md;
  // lssar's gap (2x − 1x) is 0.05 at 10 steps and 0.2 at 40; tokens per step 4·1·8.
  const size_t gap = md.find("| `lssar` | 32 | 2× − 1× |", at);
  ASSERT_NE(gap, std::string::npos) << md.substr(at);
  const std::string row = md.substr(gap, md.find('\n', gap) - gap);
  EXPECT_NE(row.find("0.0500"), std::string::npos) << row;
  EXPECT_NE(row.find("0.2000"), std::string::npos) << row;
  std::ifstream in(dir / "out" / "summary" / "summary.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["budgets"]["steps"], (std::vector<int>{10, 40}));
  // Effective length on the loss: 2x keeps >= 85% of the 1x likelihood
  // exp(−loss) when 2x's loss is within ln(1/0.85) = 0.1625 nats of 1x's:
  // the gap is 0.05 at 10 steps (2x), 0.2 at 40 (1x).
  for (const auto& v : j["variants"]) {
    if (v["name"] == "softmax_10steps") {
      EXPECT_EQ(v["effective_multiple_loss"], 2);
    }
    if (v["name"] == "softmax_40steps") {
      EXPECT_EQ(v["effective_multiple_loss"], 1);
    }
  }
  const size_t s10 = md.find("| `softmax_10steps` |");
  ASSERT_NE(s10, std::string::npos) << md;
  const std::string row10 = md.substr(s10, md.find('\n', s10) - s10);
  const std::string tail = " 0.0500 | 2× |";
  EXPECT_EQ(row10.substr(row10.size() - tail.size()), tail) << row10;
  // The budget plot's data: per run "tokens, 1x, 2x, sd at 2x" (softmax at 10 steps: 320 tokens).
  std::ifstream bd(dir / "out" / "summary" / "budget.dat");
  std::string line;
  std::getline(bd, line);
  EXPECT_EQ(line, "# softmax");
  double tokens = 0, lo = 0, hi = 0, sd = 0;
  bd >> tokens >> lo >> hi >> sd;
  EXPECT_EQ(tokens, 320);
  EXPECT_NEAR(lo, 2.0 - 0.01 + 0.0015, 1e-9);
  EXPECT_NEAR(hi, 2.0 - 0.01 + 0.0015 + 0.05, 1e-9);
  std::ifstream gp(dir / "out" / "summary" / "plots.gp");
  const std::string script((std::istreambuf_iterator<char>(gp)), std::istreambuf_iterator<char>());
  EXPECT_NE(script.find("set output 'loss_vs_budget.png'"), std::string::npos);
  EXPECT_NEAR(j["budgets"]["runs"][0]["loss_1x"][1].get<double>(), 2.0 - 0.04 + 0.0015, 1e-12);
  // A run with no results yet (listed first here) has no block in
  // budget.dat, so the plot's first block and title are softmax's.
  std::ofstream(dir / "gap.json") << R"({"dir": ")" << (dir / "out").string() << R"(", "base": ")"
                                  << (dir / "base.json").string() << R"(", "seeds": [1, 2], "budgets": [10, 40],
      "runs": [{"name": "cosine", "set": ["attention.preset=cosine"]}, {"name": "softmax"}]})";
  summarize_sweep(load_sweep((dir / "gap.json").string()));
  std::ifstream bd2(dir / "out" / "summary" / "budget.dat");
  std::getline(bd2, line);
  EXPECT_EQ(line, "# softmax");
  std::ifstream gp2(dir / "out" / "summary" / "plots.gp");
  const std::string script2((std::istreambuf_iterator<char>(gp2)), std::istreambuf_iterator<char>());
  EXPECT_NE(script2.find("index 0 using 1:3 with linespoints lw 2 lc rgb '#1f77b4' title 'softmax'"), std::string::npos)
      << script2;
  EXPECT_EQ(script2.find("title 'cosine'"), std::string::npos) << script2;
  // runs[].budgets: a run at some budgets only; a budget the sweep lacks is refused.
  std::ofstream(dir / "some.json") << R"({"dir": ")" << (dir / "out3").string() << R"(", "base": ")"
                                   << (dir / "base.json").string() << R"(", "budgets": [10, 40],
      "runs": [{"name": "a"}, {"name": "b", "budgets": [40]}]})";
  std::vector<std::string> some;
  for (const auto& r : load_sweep((dir / "some.json").string()).runs) some.push_back(r.name);
  EXPECT_EQ(some, (std::vector<std::string>{"a_10steps", "a_40steps", "b_40steps"}));
  std::ofstream(dir / "other.json") << R"({"dir": ")" << (dir / "out4").string() << R"(", "base": ")"
                                    << (dir / "base.json").string() << R"(", "budgets": [10, 40],
      "runs": [{"name": "b", "budgets": [20]}]})";
  EXPECT_THROW(load_sweep((dir / "other.json").string()), Error);
  // A budget below the warmup is refused, naming the run and the budget.
  std::ofstream(dir / "bad.json") << R"({"dir": ")" << (dir / "out2").string() << R"(", "base": ")"
                                  << (dir / "base.json").string() << R"(", "budgets": [3], "runs": [{"name": "a"}]})";
  try {
    load_sweep((dir / "bad.json").string());
    ADD_FAILURE() << "a budget below train.warmup_steps must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at the budget of 3 steps"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// One seed: the paired bootstrap over the shared validation windows; and a
// sweep refuses to put results scored on different windows in one table.
TEST(Stats, SweepSummaryBootstrapsOneSeedAndRefusesDifferentSpans) {
  const fs::path dir = fs::temp_directory_path() / ("gpt_stats_test1_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "base.json") << R"({"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "context": 8}})";
  std::ofstream(dir / "sweep.json") << R"({"dir": ")" << (dir / "out").string() << R"(", "base": ")"
                                    << (dir / "base.json").string() << R"(", "seeds": [1], "runs": [
      {"name": "softmax"}, {"name": "same"}, {"name": "better"}]})";
  const SweepPlan plan = load_sweep((dir / "sweep.json").string());
  const nlohmann::json scored = {{"protocol", "chunks"},
                                 {"span", 16},
                                 {"windows", 4},
                                 {"validation_tokens", 1000},
                                 {"starts", {0, 250, 500, 750}}};
  const std::map<std::string, std::vector<double>> windows = {
      {"softmax", {2.0, 2.2, 1.8, 2.1}}, {"same", {2.1, 2.1, 1.9, 2.0}}, {"better", {1.8, 2.0, 1.6, 1.9}}};
  auto write = [&](const std::string& name, const nlohmann::json& sc) {
    const auto& w = windows.at(name);
    const fs::path run = fs::path(plan.run_dir(name, 1));
    fs::create_directories(run);
    const double mean = (w[0] + w[1] + w[2] + w[3]) / 4;
    double ss = 0;
    for (double x : w) ss += (x - mean) * (x - mean);
    nlohmann::json row = {{"multiple", 1},
                          {"loss", mean},
                          {"loss_se", std::sqrt(ss / 3) / 2},  // sample sd over the 4 windows / sqrt(4)
                          {"loss_past_train", nullptr},
                          {"window_losses", w},
                          {"attention_diagnostics", {{{"sink", 0.1}, {"entropy", 1.0}}}},
                          {"profile", {{{"start", 0}, {"end", 8}, {"loss", 2.0}, {"se", 0.05}}}}};
    std::ofstream(run / "extrapolation.json")
        << nlohmann::json{{"trained_context", 8}, {"scored", sc}, {"multiples", {row}}};
  };
  for (const auto& [name, w] : windows) write(name, scored);
  const std::string md = summarize_sweep(plan);
  const size_t same = md.find("| `same` | 1 |", md.find("Paired difference"));
  const size_t better = md.find("| `better` | 1 |", md.find("Paired difference"));
  ASSERT_NE(same, std::string::npos) << md;
  ASSERT_NE(better, std::string::npos) << md;
  const std::string same_row = md.substr(same, md.find('\n', same) - same);
  const std::string better_row = md.substr(better, md.find('\n', better) - better);
  EXPECT_NE(same_row.find("(bootstrap, 4 windows), not distinguishable"), std::string::npos) << same_row;
  EXPECT_NE(better_row.find("-0.2000"), std::string::npos) << better_row;  // every window 0.2 lower
  EXPECT_EQ(better_row.find("not distinguishable"), std::string::npos) << better_row;
  // The plots' bands with one seed: the interval over the 4 windows,
  // mean ± t(0.975, 3) · se, t(0.975, 3) = 3.182446 (published tables); the
  // profile's bucket likewise from its se.
  auto data_row = [&](const std::string& file, const std::string& variant) {
    std::ifstream in(dir / "out" / "summary" / file);
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("# " + variant + ":", 0) == 0 || line.rfind("# " + variant + " at ", 0) == 0) break;
    std::getline(in, line);
    std::istringstream fields(line);
    std::vector<double> xs;
    for (double x; fields >> x;) xs.push_back(x);
    return xs;
  };
  const double se = std::sqrt((0.025 * 0.025 + 0.175 * 0.175 + 0.225 * 0.225 + 0.075 * 0.075) / 3) / 2;
  const std::vector<double> band = data_row("loss.dat", "softmax");
  ASSERT_EQ(band.size(), 6u);
  EXPECT_NEAR(band[1], 2.025, 1e-12);
  EXPECT_NEAR(band[4], 2.025 - 3.182446 * se, 2e-5);
  EXPECT_NEAR(band[5], 2.025 + 3.182446 * se, 2e-5);
  const std::vector<double> bucket = data_row("profile.dat", "softmax");
  ASSERT_EQ(bucket.size(), 4u);
  EXPECT_NEAR(bucket[2], 2.0 - 3.182446 * 0.05, 2e-5);
  EXPECT_NEAR(bucket[3], 2.0 + 3.182446 * 0.05, 2e-5);
  // A result scored on other windows cannot join the table.
  nlohmann::json other = scored;
  other["starts"] = {0, 200, 400, 600};
  write("same", other);
  try {
    summarize_sweep(plan);
    FAIL() << "different windows accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("were not scored on the same tokens (\"starts\" differ"), std::string::npos)
        << e.what();
  }
  // The protocol alone may differ: the same tokens, other contexts.
  other = scored;
  other["protocol"] = "sliding";
  other["stride"] = 8;
  write("same", other);
  EXPECT_NO_THROW(summarize_sweep(plan));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpt
