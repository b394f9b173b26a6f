// The summary of a sweep (gpt sweep, sweep/sweep.h): from the finished
// results, the loss tables with their statistics over seeds, the paired tests
// against the baseline, the attention diagnostics, the retrieval grids of
// the passkey and the synthetic tasks, the data files the plots read, and
// the plot script (sweep/plots.cpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include <spdlog/spdlog.h>

#include "config/config.h"
#include "core/check.h"
#include "core/files.h"
#include "core/json.h"
#include "eval/task_eval.h"
#include "sweep/stats.h"
#include "sweep/summary.h"
#include "sweep/sweep.h"

namespace fs = std::filesystem;

namespace gpt {

std::string sweep_detail::fmt(double x, int prec) {
  if (!std::isfinite(x)) return "–";
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", prec, x);
  return b;
}

namespace {

using nlohmann::json;

// ---- reading results ----------------------------------------------------------

std::optional<json> read_json_if(const fs::path& p) {
  if (!fs::exists(p)) return std::nullopt;
  try {
    return read_json_file(p.string(), "sweep result", {.comments = false});
  } catch (const Error& e) {
    spdlog::warn("sweep: {} is not usable ({}); treated as missing", p.string(), e.what());
    return std::nullopt;
  }
}

struct Stat {
  double mean = NAN, sd = NAN, min = NAN, max = NAN;
  int n = 0;
};

Stat stat_of(const std::vector<double>& xs) {
  Stat s;
  std::vector<double> v;
  for (double x : xs)
    if (std::isfinite(x)) v.push_back(x);
  s.n = static_cast<int>(v.size());
  if (v.empty()) return s;
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / s.n;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  if (s.n > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(ss / (s.n - 1));
  }
  return s;
}

using sweep_detail::fmt;

std::string fmt_stat(const Stat& s) {
  if (s.n == 0) return "–";
  return s.n > 1 ? fmt(s.mean) + " ± " + fmt(s.sd, 3) : fmt(s.mean);
}

double num(const json& j) { return j.is_number() ? j.get<double>() : NAN; }

// One variant of the summary: a trained run or an evaluation of one.
struct Variant {
  std::string name, kind, run;
  std::vector<uint64_t> seeds;
  std::vector<json> results;           // per finished seed
  std::vector<uint64_t> missing;       // seeds without a result
  std::vector<uint64_t> result_seeds;  // the seed of each result
};

// "+0.0123" / "-0.0045": a signed difference.
std::string fmt_signed(double x, int prec = 4) {
  if (!std::isfinite(x)) return "–";
  return (x >= 0 ? "+" : "") + fmt(x, prec);
}

// A p-value with three decimals, "< 0.001" below that.
std::string fmt_p(double p) {
  if (!std::isfinite(p)) return "–";
  if (p < 0.001) return "< 0.001";
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", p);
  return b;
}

json number_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

// The largest |score| of a row over its layers (NaN for results written
// before the diagnostic existed).
double layer_max_score(const json& row) {
  const json& layers = row.at("attention_diagnostics");
  if (!layers.is_array() || layers.empty()) return NAN;
  double most = NAN;
  for (const auto& l : layers)
    if (l.contains("max_score"))
      most = std::isnan(most) ? num(l.at("max_score")) : std::max(most, num(l.at("max_score")));
  return most;
}

double layer_mean(const json& row, const char* key) {
  const json& layers = row.at("attention_diagnostics");
  if (!layers.is_array() || layers.empty()) return NAN;
  double s = 0;
  for (const auto& l : layers) s += num(l.at(key));
  return s / layers.size();
}

// Over seeds: the paired t-test. With one shared seed: the paired bootstrap
// over the validation windows both scored (the table check above makes them
// the same windows); `windows` is then their number, else 0.
struct Paired {
  stats::PairedTest t;
  size_t windows = 0;
  // The interval excludes 0 (the bootstrap's n counts seeds, so its test is on the interval alone).
  bool distinguishable() const { return windows ? std::isfinite(t.lo) && (t.lo > 0 || t.hi < 0) : t.distinguishable(); }
};

// One multiple of a run's line as a table cell: "mean" or "mean ± sd".
std::string line_cell(const json& e) {
  return fmt(num(e["exact"]), 2) + (e["sd"].is_null() ? std::string() : " ± " + fmt(num(e["sd"]), 2));
}

// The state the summary's sections share: the variants (trained runs and
// evaluations of them) with their results, the multiples, the baseline, and
// what the tables, the summary JSON and the plots are being written into.
class Summary {
 public:
  explicit Summary(const SweepPlan& plan);
  // The sections of results.md (and summary.json), in order.
  void loss_table();
  void interval_table();
  void paired_table();
  void diagnostics_table();
  void plot_data();
  void retrieval_grids();
  void task_line_tables();
  void measures_table();
  void budget_table();
  // Writes plots.gp, summary.json and results.md, draws the plots when
  // gnuplot is installed; returns results.md.
  std::string write();

 private:
  const json* row_of(const json& res, int m) const;
  Stat stat_at(const Variant& v, int m, const char* key) const;
  std::map<uint64_t, double> loss_by_seed(const Variant& v, int m) const;
  stats::MeanInterval interval_at(const Variant& v, int m) const;
  stats::MeanInterval window_interval(const json* row, const char* key, const char* se_key,
                                      const json* bucket = nullptr) const;
  std::vector<double> windows_of(const Variant& v, uint64_t seed, int m) const;
  Paired paired_at(const Variant& v, int m) const;
  json grid_summary(const SweepRun& r, const std::string& file, const std::string& prefix, const std::string& cells,
                    const std::string& what, const std::function<std::string(const json&, size_t)>& header);

  const SweepPlan& plan;
  std::vector<Variant> vars;
  std::vector<int> multiples;
  int trained_context = 0, mmax = 0;
  const Variant* base = nullptr;  // the baseline of the paired tests, if it has results
  fs::path out;                   // DIR/summary
  std::ostringstream md;          // results.md
  json summary;                   // summary.json
  PlotInputs plots;               // what plots.gp draws
};

Summary::Summary(const SweepPlan& plan_) : plan(plan_) {
  for (const auto& r : plan.runs) {
    Variant v{r.name, "trained", r.name, r.seeds, {}, {}, {}};
    for (uint64_t s : r.seeds) {
      auto j = read_json_if(fs::path(plan.run_dir(r.name, s)) / "extrapolation.json");
      if (j)
        v.results.push_back(*j), v.result_seeds.push_back(s);
      else
        v.missing.push_back(s);
    }
    vars.push_back(v);
  }
  for (const auto& e : plan.evals) {
    std::string how = e.attention.empty() ? "" : "--attention " + e.attention;
    for (const auto& s : e.set) how += (how.empty() ? "" : " ") + std::string("--attention-set ") + s;
    if (!e.context.empty()) how += (how.empty() ? "" : " ") + std::string("--context ") + e.context;
    for (const auto& s : e.context_set) how += (how.empty() ? "" : " ") + std::string("--context-set ") + s;
    if (!e.protocol.empty()) how += (how.empty() ? "" : " ") + std::string("--protocol ") + e.protocol;
    if (e.stride > 0) how += " --stride " + std::to_string(e.stride);
    if (!e.kl_against.empty()) how += (how.empty() ? "" : " ") + std::string("--kl-against ") + e.kl_against;
    if (!e.longppl.empty()) how += (how.empty() ? "" : " ") + std::string("--longppl-evaluator ") + e.longppl;
    Variant v{e.name, "eval of " + e.run + ": " + how, e.run, plan.run(e.run).seeds, {}, {}, {}};
    for (uint64_t s : v.seeds) {
      auto j = read_json_if(fs::path(plan.run_dir(e.run, s)) / "eval" / (e.name + ".json"));
      if (j)
        v.results.push_back(*j), v.result_seeds.push_back(s);
      else
        v.missing.push_back(s);
    }
    vars.push_back(v);
  }
  // The multiples: those of the first result found.
  for (const auto& v : vars)
    if (!v.results.empty()) {
      for (const auto& row : v.results[0].at("multiples")) multiples.push_back(row.at("multiple").get<int>());
      trained_context = v.results[0].at("trained_context").get<int>();
      break;
    }
  GPT_CHECK(!multiples.empty(), "sweep: no finished results under ", plan.dir, "; run the sweep first");
  // One table compares numbers only when every result scored the same tokens:
  // the same validation data, span and windows (the protocol may differ: it
  // changes the context each token sees, not which tokens are scored).
  {
    auto scored_tokens = [](const json& res) {
      json s = res.contains("scored") ? res.at("scored") : json(nullptr);
      if (s.is_object()) s.erase("protocol"), s.erase("stride");
      return s;
    };
    const json* first = nullptr;
    std::string first_name;
    for (const auto& v : vars)
      for (size_t i = 0; i < v.results.size(); ++i) {
        const std::string name = v.name + " seed " + std::to_string(v.result_seeds[i]);
        if (!first) {
          first = &v.results[i], first_name = name;
          continue;
        }
        const json a = scored_tokens(*first), b = scored_tokens(v.results[i]);
        if (a == b) continue;
        std::string what = "their scored windows";
        for (const char* k : {"validation_tokens", "span", "windows", "starts"})
          if (!a.is_object() || !b.is_object() || a.value(k, json()) != b.value(k, json())) {
            what = std::string("\"") + k + "\"";
            break;
          }
        fail("sweep: ", first_name, " and ", name, " were not scored on the same tokens (", what,
             " differ; results without a \"scored\" record predate it), so they cannot share a table. Re-evaluate "
             "with the same data, eval.span and eval.tokens (gpt eval RUN --span ... --tokens ...), or delete the "
             "stale result to have the sweep redo it");
      }
  }
  mmax = multiples.back();
  for (const auto& v : vars)
    if (v.name == plan.baseline) base = &v;
  out = fs::path(plan.dir) / "summary";
  fs::create_directories(out);
  plots.multiples = multiples;
  plots.trained_context = trained_context;
}

const json* Summary::row_of(const json& res, int m) const {
  for (const auto& row : res.at("multiples"))
    if (row.at("multiple").get<int>() == m) return &row;
  return nullptr;
}

Stat Summary::stat_at(const Variant& v, int m, const char* key) const {
  std::vector<double> xs;
  for (const auto& res : v.results)
    if (const json* row = row_of(res, m)) {
      const std::string k = key;
      if (k == "max_score") {
        if (const double x = layer_max_score(*row); !std::isnan(x)) xs.push_back(x);
      } else {
        xs.push_back(k == "sink" || k == "entropy" ? layer_mean(*row, key) : num(row->at(key)));
      }
    }
  return stat_of(xs);
}

// The loss of each finished seed at multiple m (NaN where that row is missing).
std::map<uint64_t, double> Summary::loss_by_seed(const Variant& v, int m) const {
  std::map<uint64_t, double> by;
  for (size_t i = 0; i < v.results.size(); ++i) {
    const json* row = row_of(v.results[i], m);
    by[v.result_seeds[i]] = row ? num(row->at("loss")) : NAN;
  }
  return by;
}

stats::MeanInterval Summary::interval_at(const Variant& v, int m) const {
  std::vector<double> xs;
  for (const auto& [seed, x] : loss_by_seed(v, m)) xs.push_back(x);
  return stats::mean_interval(xs);
}

// One seed: the 95% interval of a mean over the K validation windows of
// that result's row (its "windows": the layout's K), from the standard
// error the evaluation wrote (loss ± t(0.975, K - 1) · se). bucket: a
// profile entry of the row instead (its "loss" and "se"). NaN where the
// result has no standard error (one window, or written before it had one).
stats::MeanInterval Summary::window_interval(const json* row, const char* key, const char* se_key,
                                             const json* bucket) const {
  stats::MeanInterval ci;
  ci.lo = ci.hi = NAN;
  if (!row) return ci;
  const json& src = bucket ? *bucket : *row;
  const double x = num(src.value(bucket ? "loss" : key, json()));
  const double se = num(src.value(bucket ? "se" : se_key, json()));
  const size_t windows = row->contains("window_losses") ? row->at("window_losses").size() : 0;
  ci.n = static_cast<int>(windows);
  ci.mean = x;
  if (windows < 2 || !std::isfinite(se) || !std::isfinite(x)) return ci;
  const double t = stats::t_quantile(0.975, static_cast<double>(windows - 1));
  ci.lo = x - t * se;
  ci.hi = x + t * se;
  return ci;
}

// The per-window losses of variant v's seed at multiple m (empty if not recorded).
std::vector<double> Summary::windows_of(const Variant& v, uint64_t seed, int m) const {
  std::vector<double> w;
  for (size_t i = 0; i < v.results.size(); ++i)
    if (v.result_seeds[i] == seed)
      if (const json* row = row_of(v.results[i], m); row && row->contains("window_losses"))
        for (const auto& x : row->at("window_losses")) w.push_back(num(x));
  return w;
}

// variant − baseline over the seeds both finished, at multiple m.
Paired Summary::paired_at(const Variant& v, int m) const {
  const auto a = loss_by_seed(v, m), b = loss_by_seed(*base, m);
  std::vector<double> xa, xb;
  std::vector<uint64_t> shared;
  for (const auto& [seed, x] : a)
    if (b.count(seed)) xa.push_back(x), xb.push_back(b.at(seed)), shared.push_back(seed);
  Paired p{stats::paired_t(xa, xb), 0};
  if (shared.size() == 1) {
    const auto wa = windows_of(v, shared[0], m), wb = windows_of(*base, shared[0], m);
    if (wa.size() >= 2 && wa.size() == wb.size()) {
      p.t = stats::paired_bootstrap(wa, wb);
      p.t.n = 1;  // one seed; the bootstrap's units are the windows
      p.windows = wa.size();
    }
  }
  return p;
}

void Summary::loss_table() {
  md << "## Validation loss by context (mean ± sample sd over seeds; T = " << trained_context << ")\n\n"
     << "| variant | how | seeds |";
  for (int m : multiples) md << " " << m << "× |";
  md << " " << mmax << "× past T | " << mmax << "× − 1× | effective length |\n|---|---|---|";
  for (size_t i = 0; i < multiples.size() + 3; ++i) md << "---|";
  md << "\n";
  summary = {{"trained_context", trained_context}, {"multiples", multiples}, {"variants", json::array()}};
  for (const auto& v : vars) {
    md << "| `" << v.name << "` | " << v.kind << " | " << v.results.size();
    if (!v.missing.empty()) md << " (" << v.missing.size() << " missing)";
    md << " |";
    json jv = {{"name", v.name},
               {"kind", v.kind},
               {"seeds", v.results.size()},
               {"missing_seeds", v.missing},
               {"multiples", json::array()}};
    // The run's block (docs/blocks.md), as its results recorded it.
    if (!v.results.empty() && v.results.front().contains("block")) jv["block"] = v.results.front()["block"];
    if (!v.results.empty() && v.results.front().contains("optimizer")) jv["optimizer"] = v.results.front()["optimizer"];
    for (int m : multiples) {
      const Stat s = stat_at(v, m, "loss");
      md << " " << fmt_stat(s) << " |";
      const stats::MeanInterval ci = interval_at(v, m);
      jv["multiples"].push_back({{"multiple", m},
                                 {"loss_mean", s.n ? json(s.mean) : json(nullptr)},
                                 {"loss_sd", std::isfinite(s.sd) ? json(s.sd) : json(nullptr)},
                                 {"loss_ci95_lo", number_or_null(ci.lo)},
                                 {"loss_ci95_hi", number_or_null(ci.hi)},
                                 {"loss_min", s.n ? json(s.min) : json(nullptr)},
                                 {"loss_max", s.n ? json(s.max) : json(nullptr)},
                                 {"past_train_mean", json(stat_at(v, m, "loss_past_train").mean)},
                                 {"sink", json(stat_at(v, m, "sink").mean)},
                                 {"entropy", json(stat_at(v, m, "entropy").mean)},
                                 {"max_score", number_or_null(stat_at(v, m, "max_score").mean)}});
    }
    // RULER's effective length with exp(−loss) as the score (the per-byte
    // likelihood): every multiple up to it keeps >= 85% of the 1× value,
    // i.e. its mean loss stays within ln(1/0.85) = 0.163 nats of 1×.
    std::vector<double> likelihood;
    for (int m : multiples) likelihood.push_back(std::exp(-stat_at(v, m, "loss").mean));
    const int eff = v.results.empty() ? 0 : effective_multiple(multiples, likelihood);
    jv["effective_multiple_loss"] = effective_multiple_json(eff);
    md << " " << fmt_stat(stat_at(v, mmax, "loss_past_train")) << " | "
       << fmt(stat_at(v, mmax, "loss").mean - stat_at(v, multiples.front(), "loss").mean) << " | "
       << (eff > 0 ? std::to_string(eff) + "×" : std::string("–")) << " |\n";
    if (base && &v != base) {
      json paired = {{"baseline", base->name}, {"multiples", json::array()}};
      for (int m : multiples) {
        const Paired pr = paired_at(v, m);
        const stats::PairedTest& t = pr.t;
        paired["multiples"].push_back(
            {{"multiple", m},
             {"seeds", t.n},
             {"method", pr.windows ? "paired bootstrap over validation windows (one seed)" : "paired t over seeds"},
             {"windows", pr.windows},
             {"diff_mean", number_or_null(t.mean)},
             {"diff_ci95_lo", number_or_null(t.lo)},
             {"diff_ci95_hi", number_or_null(t.hi)},
             {"t", number_or_null(t.t)},
             {"p", number_or_null(t.p)},
             {"distinguishable", pr.distinguishable()}});
      }
      jv["paired"] = paired;
    }
    summary["variants"].push_back(jv);
  }
  md << "\nEffective length: the longest multiple up to which every multiple keeps >= "
     << static_cast<int>(kEffectiveKeep * 100)
     << "% of the 1× per-byte likelihood exp(−loss) (RULER's threshold on the loss: the mean loss within "
     << fmt(-std::log(kEffectiveKeep), 3) << " nats of 1×); the largest multiple evaluated when all do.\n";
  summary["baseline"] = plan.baseline;
}

void Summary::interval_table() {
  md << "\n## 95% confidence interval of the mean loss over seeds (Student t, n − 1 degrees of freedom)\n\n"
     << "| variant | seeds |";
  for (int m : multiples) md << " " << m << "× |";
  md << "\n|---|---|";
  for (size_t i = 0; i < multiples.size(); ++i) md << "---|";
  md << "\n";
  for (const auto& v : vars) {
    md << "| `" << v.name << "` | " << v.results.size() << " |";
    for (int m : multiples) {
      const stats::MeanInterval ci = interval_at(v, m);
      if (ci.n >= 2)
        md << " [" << fmt(ci.lo) << ", " << fmt(ci.hi) << "] |";
      else
        md << " – |";
    }
    md << "\n";
  }
  md << "\n(– : fewer than 2 seeds, no interval.)\n";
}

void Summary::paired_table() {
  if (base) {
    md << "\n## Paired difference against `" << base->name
       << "` (variant − baseline per shared seed: mean, 95% interval, paired t-test p)\n\n| variant | shared seeds |";
    for (int m : multiples) md << " " << m << "× |";
    md << "\n|---|---|";
    for (size_t i = 0; i < multiples.size(); ++i) md << "---|";
    md << "\n";
    for (const auto& v : vars) {
      if (&v == base) continue;
      md << "| `" << v.name << "` | " << paired_at(v, multiples.front()).t.n << " |";
      for (int m : multiples) {
        const Paired pr = paired_at(v, m);
        const stats::PairedTest& t = pr.t;
        if (pr.windows) {
          md << " " << fmt_signed(t.mean) << " [" << fmt_signed(t.lo) << ", " << fmt_signed(t.hi) << "], p "
             << fmt_p(t.p) << " (bootstrap, " << pr.windows << " windows)"
             << (pr.distinguishable() ? "" : ", not distinguishable") << " |";
          continue;
        }
        if (t.n < 2) {
          md << " " << (t.n == 1 ? fmt_signed(t.mean) + " (1 seed, no test)" : std::string("–")) << " |";
          continue;
        }
        md << " " << fmt_signed(t.mean) << " [" << fmt_signed(t.lo) << ", " << fmt_signed(t.hi) << "], p " << fmt_p(t.p)
           << (t.distinguishable() ? "" : ", not distinguishable") << " |";
      }
      md << "\n";
    }
    md << "\nA difference whose interval contains 0 is marked not distinguishable: it is inside the seed noise "
          "(with one shared seed, inside the window-to-window noise of the paired bootstrap, which says nothing "
          "about seeds). Negative is a lower loss than the baseline.\n";
  }
}

void Summary::diagnostics_table() {
  md << "\n## Attention diagnostics (mean over layers, heads, rows and seeds)\n\n"
        "The largest |score| is stage 1's |σ_ij| = |f·q_i·k_j|, its maximum over the layers, heads, rows and keys, "
        "averaged over the seeds.\n\n| variant |";
  for (int m : multiples) md << " sink " << m << "× |";
  for (int m : multiples) md << " entropy " << m << "× |";
  md << " largest \\|score\\| " << multiples.front() << "× | largest \\|score\\| " << multiples.back() << "× |";
  md << "\n|---|";
  for (size_t i = 0; i < 2 * multiples.size() + 2; ++i) md << "---|";
  md << "\n";
  for (const auto& v : vars) {
    md << "| `" << v.name << "` |";
    for (int m : multiples) md << " " << fmt(stat_at(v, m, "sink").mean, 3) << " |";
    for (int m : multiples) md << " " << fmt(stat_at(v, m, "entropy").mean, 2) << " |";
    for (int m : {multiples.front(), multiples.back()}) md << " " << fmt(stat_at(v, m, "max_score").mean, 2) << " |";
    md << "\n";
  }
}

// The measures beside the loss (docs/evaluation.md): KL at 1× against the
// unmodified model (kl_at_1x) and LongPPL's key-token loss per multiple
// (multiples[].longppl), mean ± sample sd over the seeds that have them.
void Summary::measures_table() {
  auto has = [](const Variant& v, const char* what) {
    for (const auto& res : v.results) {
      if (std::string(what) == "kl" && res.contains("kl_at_1x")) return true;
      if (std::string(what) == "longppl")
        for (const auto& row : res.at("multiples"))
          if (row.contains("longppl") && row.at("longppl").is_object()) return true;
    }
    return false;
  };
  bool any = false;
  for (const auto& v : vars) any |= has(v, "kl") || has(v, "longppl");
  if (!any) return;
  md << "\n## Measures beside the loss (mean ± sample sd over seeds)\n\n"
     << "KL at 1×: the mean KL divergence per position from the unmodified model's next-token distribution "
     << "(nats) and the share of positions whose top token is unchanged (`gpt eval --kl-against`). Key loss: "
     << "LongPPL's loss over the key tokens only, those whose loss the long context lowers (`gpt eval "
     << "--longppl-evaluator`; Fang et al. 2025), nats per key token, the mean count of key tokens in "
     << "parentheses.\n\n| variant | seeds | KL at 1× | same top at 1× |";
  for (int m : multiples) md << " key loss " << m << "× |";
  md << "\n|---|---|---|---|";
  for (size_t i = 0; i < multiples.size(); ++i) md << "---|";
  md << "\n";
  json rows = json::array();
  std::ofstream longppl_dat(out / "longppl.dat");  // the plot's data: a block per variant with LongPPL
  for (const auto& v : vars) {
    if (!has(v, "kl") && !has(v, "longppl")) continue;
    std::vector<double> kl, top;
    for (const auto& res : v.results)
      if (res.contains("kl_at_1x"))
        kl.push_back(num(res["kl_at_1x"].at("kl"))), top.push_back(num(res["kl_at_1x"].at("same_top")));
    const Stat sk = stat_of(kl), st = stat_of(top);
    md << "| `" << v.name << "` | " << v.results.size() << " | " << (kl.empty() ? "—" : fmt_stat(sk)) << " | "
       << (top.empty() ? std::string("—") : fmt(100 * st.mean, 1) + "%") << " |";
    json jr = {{"name", v.name},
               {"kl_at_1x_mean", kl.empty() ? json(nullptr) : json(sk.mean)},
               {"kl_at_1x_sd", !kl.empty() && std::isfinite(sk.sd) ? json(sk.sd) : json(nullptr)},
               {"same_top_mean", top.empty() ? json(nullptr) : json(st.mean)},
               {"longppl", json::array()}};
    // The plot's block: kept when some multiple has a key loss (no key token
    // anywhere: nothing to draw).
    std::ostringstream block;
    bool plot = false;
    for (int m : multiples) {
      std::vector<double> key, ntok;
      for (const auto& res : v.results)
        if (const json* row = row_of(res, m); row && row->contains("longppl") && row->at("longppl").is_object())
          key.push_back(num(row->at("longppl").at("key_loss"))),
              ntok.push_back(num(row->at("longppl").at("key_tokens")));
      const Stat sl = stat_of(key);
      plot |= !key.empty() && std::isfinite(sl.mean);
      block << m << " " << (key.empty() ? NAN : sl.mean) << " " << (key.size() > 1 ? sl.sd : NAN) << " "
            << stat_at(v, m, "loss").mean << "\n";
      md << " " << (key.empty() ? std::string("—") : fmt_stat(sl) + " (" + fmt(stat_of(ntok).mean, 0) + ")") << " |";
      jr["longppl"].push_back({{"multiple", m},
                               {"key_loss_mean", key.empty() ? json(nullptr) : json(sl.mean)},
                               {"key_loss_sd", !key.empty() && std::isfinite(sl.sd) ? json(sl.sd) : json(nullptr)},
                               {"key_tokens_mean", ntok.empty() ? json(nullptr) : json(stat_of(ntok).mean)}});
    }
    md << "\n";
    if (plot) {
      plots.longppl_runs.push_back(v.name);
      longppl_dat << "# " << v.name << ": multiple key-loss-mean key-loss-sd (over seeds; nan: one seed) loss-mean\n"
                  << block.str() << "\n\n";
    }
    rows.push_back(jr);
  }
  summary["measures"] = rows;
}

void Summary::plot_data() {
  // Data files for gnuplot: one index block per variant.
  std::ofstream loss_dat(out / "loss.dat"), diag_dat(out / "diagnostics.dat"), prof_dat(out / "profile.dat");
  std::vector<std::string>& plotted = plots.plotted;
  std::vector<std::string>& profiled = plots.profiled;
  std::vector<bool>& plotted_eval = plots.plotted_eval;  // training-free evaluations: dashed
  for (const auto& v : vars) {
    if (v.results.empty()) continue;
    plotted.push_back(v.name);
    plotted_eval.push_back(v.kind != "trained");
    const bool one_seed = v.results.size() == 1;
    loss_dat << "# " << v.name << ": multiple mean min max ci95_lo ci95_hi ("
             << (one_seed ? "one seed: the interval over its validation windows, loss ± t(0.975, K-1) · loss_se"
                          : "over seeds, Student t")
             << "; nan: none)\n";
    diag_dat << "# " << v.name << ": multiple sink entropy\n";
    for (int m : multiples) {
      const Stat s = stat_at(v, m, "loss");
      const stats::MeanInterval ci =
          one_seed ? window_interval(row_of(v.results[0], m), "loss", "loss_se") : interval_at(v, m);
      loss_dat << m << " " << s.mean << " " << s.min << " " << s.max << " " << ci.lo << " " << ci.hi << "\n";
      diag_dat << m << " " << stat_at(v, m, "sink").mean << " " << stat_at(v, m, "entropy").mean << "\n";
    }
    loss_dat << "\n\n";
    diag_dat << "\n\n";
    const bool want = plan.profile_variants.empty()
                          ? v.kind == "trained"
                          : std::count(plan.profile_variants.begin(), plan.profile_variants.end(), v.name) > 0;
    if (!want) continue;
    profiled.push_back(v.name);
    prof_dat << "# " << v.name << " at " << mmax << "x: bucket-centre-position mean-loss ci95_lo ci95_hi ("
             << (one_seed ? "one seed: over its validation windows, loss ± t(0.975, K-1) · se" : "over seeds")
             << "; nan: none)\n";
    const json* first = row_of(v.results[0], mmax);
    const size_t nb = first ? first->at("profile").size() : 0;
    for (size_t k = 0; k < nb; ++k) {
      std::vector<double> xs;
      for (const auto& res : v.results)
        if (const json* row = row_of(res, mmax)) xs.push_back(num(row->at("profile")[k].at("loss")));
      const json& b = first->at("profile")[k];
      const stats::MeanInterval ci = one_seed ? window_interval(first, nullptr, nullptr, &b) : stats::mean_interval(xs);
      prof_dat << 0.5 * (b.at("start").get<double>() + b.at("end").get<double>()) << " " << stat_of(xs).mean << " "
               << ci.lo << " " << ci.hi << "\n";
    }
    prof_dat << "\n\n";
  }

  // gnuplot reads these below: flush them now.
  loss_dat.close();
  diag_dat.close();
  prof_dat.close();
}

// Retrieval grids (passkey, synthetic tasks): exact match per cell and
// multiple, mean over seeds, written to PREFIX_RUN.dat for the heat map;
// the cell mean per seed as mean ± sd over seeds; answer tokens right.
// cells: the key of a multiple's cells in the result ("depths" or "cells").
// Returns the run's summary entry, or null when no seed has results.
json Summary::grid_summary(const SweepRun& r, const std::string& file, const std::string& prefix,
                           const std::string& cells, const std::string& what,
                           const std::function<std::string(const json&, size_t)>& header) {
  std::vector<json> res;
  for (uint64_t s : r.seeds)
    if (auto j = read_json_if(fs::path(plan.run_dir(r.name, s)) / "eval" / file)) res.push_back(*j);
  if (res.empty()) {
    md << "\n(" << what << " results of `" << r.name << "` are missing)\n";
    return nullptr;
  }
  const json& rows = res[0].at("multiples");
  md << "\n## " << header(res[0], res.size()) << "\n\n| depth |";
  for (const auto& row : rows) md << " " << row.at("multiple").get<int>() << "× |";
  md << "\n|---|";
  for (size_t i = 0; i < rows.size(); ++i) md << "---|";
  md << "\n";
  std::ofstream grid(out / (prefix + r.name + ".dat"));
  grid << "# column index of the multiple, depth, exact match (mean over seeds)\n";
  const size_t nc = rows[0].at(cells).size();
  json jr = {{"run", r.name}, {"seeds", res.size()}, {"cells", nc}, {"grid", json::array()}};
  for (size_t c = 0; c < nc; ++c) {
    const json& d = rows[0].at(cells)[c].at("depth");  // a number, or "random" (tasks without a depth)
    const double depth = d.is_number() ? d.get<double>() : 0.0;
    md << "| " << (d.is_number() ? fmt(depth, 2) : std::string("all")) << " |";
    for (size_t i = 0; i < rows.size(); ++i) {
      std::vector<double> xs;
      for (const auto& rr : res) xs.push_back(num(rr.at("multiples")[i].at(cells)[c].at("exact")));
      const double e = stat_of(xs).mean;
      md << " " << fmt(e, 2) << " |";
      grid << i << " " << depth << " " << e << "\n";
      jr["grid"].push_back({{"multiple", rows[i].at("multiple")}, {"depth", d}, {"exact", e}});
    }
    md << "\n";
    grid << "\n";
  }
  // The cell mean per seed, its mean over seeds, sd and range (the band
  // of the line plots): jr["line"], one entry per multiple.
  jr["line"] = json::array();
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<double> per_seed;
    for (const auto& rr : res) {
      double m = 0;
      for (const auto& cell : rr.at("multiples")[i].at(cells)) m += num(cell.at("exact")) / nc;
      per_seed.push_back(m);
    }
    const Stat st = stat_of(per_seed);
    jr["line"].push_back({{"multiple", rows[i].at("multiple")},
                          {"exact", st.mean},
                          {"sd", st.n > 1 ? json(st.sd) : json(nullptr)},
                          {"min", st.min},
                          {"max", st.max}});
  }
  if (nc > 1 || res.size() > 1) {  // the seed band of the cell mean
    md << "| mean, seed sd |";
    for (const auto& e : jr["line"]) md << " " << line_cell(e) << " |";
    md << "\n";
  }
  // Share of answer tokens predicted right, over cells and seeds: shows
  // whether anything was learned when exact match is 0.
  md << "| answer tokens right |";
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<double> xs;
    for (const auto& rr : res)
      for (const auto& cell : rr.at("multiples")[i].at(cells)) xs.push_back(num(cell.at("token_accuracy")));
    md << " " << fmt(stat_of(xs).mean, 2) << " |";
  }
  md << "\n";
  {  // RULER's effective length of the mean exact match (every multiple up to it keeps >= 85% of 1x)
    std::vector<int> ms;
    std::vector<double> scores;
    for (const auto& e : jr["line"]) ms.push_back(e.at("multiple").get<int>()), scores.push_back(num(e.at("exact")));
    const int eff = effective_multiple(ms, scores);
    jr["effective_multiple"] = effective_multiple_json(eff);
    md << "\neffective length (every multiple up to it keeps >= " << static_cast<int>(kEffectiveKeep * 100)
       << "% of the 1× mean exact match): " << effective_multiple_text(eff) << "\n\n";
  }
  return jr;
}

void Summary::retrieval_grids() {
  std::vector<std::string>& passkey_runs = plots.passkey_runs;
  std::vector<std::string>& task_grids = plots.task_grids;     // the runs of the task plots
  std::map<std::string, size_t>& task_rows = plots.task_rows;  // cells (depths) of each task grid
  for (const auto& r : plan.runs) {
    if (!r.passkey) continue;
    json jr = grid_summary(r, "passkey.json", "passkey_", "depths", "passkey", [&](const json& first, size_t n) {
      return "Passkey retrieval, `" + r.name + "`: exact match (" + std::to_string(n) + " seed(s) × " +
             std::to_string(first.at("samples").get<int>()) + " prompts per cell, " +
             std::to_string(first.at("digits").get<int>()) + " digits)";
    });
    if (jr.is_null()) continue;
    passkey_runs.push_back(r.name);
    summary["passkey"].push_back(jr);
  }
  for (const auto& r : plan.runs) {
    if (r.task.empty()) continue;
    json jr = grid_summary(r, "task_" + r.task + ".json", "task_", "cells", "task " + r.task,
                           [&](const json& first, size_t n) {
                             return "Task `" + r.task + "` " + first.at("options").dump() + ", `" + r.name +
                                    "`: exact match (" + std::to_string(n) + " seed(s) × " +
                                    std::to_string(first.at("samples").get<int>()) + " examples per cell)";
                           });
    if (jr.is_null()) continue;
    jr["task"] = r.task;
    task_grids.push_back(r.name);
    plots.run_task[r.name] = r.task;
    task_rows[r.name] = jr["cells"].get<size_t>();
    summary["tasks"].push_back(jr);
  }
}

void Summary::task_line_tables() {
  // Per task: every variant's exact match (mean over the cells) against the
  // multiple, mean ± sd over seeds, as one table and one panel of lines with
  // the seeds' range as a band (task_lines_TASK.dat, a block per run).
  std::vector<std::string>& line_tasks = plots.line_tasks;                  // in order of first appearance
  std::map<std::string, std::vector<json>>& task_lines = plots.task_lines;  // task -> its runs' summary entries
  if (summary.contains("tasks"))
    for (const auto& jr : summary["tasks"]) {
      const std::string t = jr["task"].get<std::string>();
      if (!task_lines.count(t)) line_tasks.push_back(t);
      task_lines[t].push_back(jr);
    }
  for (const auto& t : line_tasks) {
    const auto& runs = task_lines[t];
    md << "\n## Task `" << t << "`: exact match against the context multiple (mean over cells; ± sd over seeds)\n\n"
       << "| variant | seeds |";
    for (const auto& e : runs[0]["line"]) md << " " << e["multiple"].get<int>() << "× |";
    md << "\n|---|---|";
    for (size_t i = 0; i < runs[0]["line"].size(); ++i) md << "---|";
    md << "\n";
    std::ofstream dat(out / ("task_lines_" + t + ".dat"));
    dat << "# one block per run: multiple, exact match (mean over seeds of the cell mean), seeds' min, max\n";
    for (const auto& jr : runs) {
      md << "| " << jr["run"].get<std::string>() << " | " << jr["seeds"].get<size_t>() << " |";
      dat << "# " << jr["run"].get<std::string>() << "\n";
      for (const auto& e : jr["line"]) {
        md << " " << line_cell(e) << " |";
        dat << e["multiple"].get<int>() << " " << num(e["exact"]) << " " << num(e["min"]) << " " << num(e["max"])
            << "\n";
      }
      md << "\n";
      dat << "\n\n";
    }
  }
}

// The budget axis (plan.budgets): each run's loss at 1×, at the largest
// multiple and their gap against its training budget; every budget is its
// own training run, or a branch of the largest one's (budget_reuse).
void Summary::budget_table() {
  if (plan.budgets.empty()) return;
  auto find = [&](const std::string& name) -> const Variant* {
    for (const auto& v : vars)
      if (v.name == name) return &v;
    return nullptr;
  };
  md << "\n## Loss against the training budget (mean ± sample sd over seeds)\n\n"
     << (plan.budget_reuse == "wsd"
             ? "Every budget trains with the warmup-stable-decay schedule (`train.lr_schedule` = wsd); a shorter "
               "budget resumes from the checkpoint of the same seed's largest budget where its own decay starts "
               "(the run it would train from scratch under wsd, bit for bit), so only the decays differ."
             : "Each budget is a training run of its own (`train.steps` = K, with its own learning-rate schedule): "
               "no checkpoint is shared between budgets.")
     << "\n\n| run | tokens per step | measure |";
  for (int k : plan.budgets) md << " " << k << " steps |";
  md << "\n|---|---|---|";
  for (size_t i = 0; i < plan.budgets.size(); ++i) md << "---|";
  md << "\n";
  json jb = {{"steps", plan.budgets}, {"runs", json::array()}};
  std::vector<std::string> families;
  for (const auto& r : plan.runs)
    if (!r.family.empty() && std::find(families.begin(), families.end(), r.family) == families.end())
      families.push_back(r.family);
  // budget.dat (the budget plot): per run a block of rows "tokens, loss at
  // 1x, at the largest multiple, its sample sd" over the budgets with results.
  std::ofstream dat(out / "budget.dat");
  for (const std::string& f : families) {
    const SweepRun* first = nullptr;  // its first budget's run
    for (const auto& r : plan.runs)
      if (!first && r.family == f) first = &r;
    std::vector<std::string> sets = plan.set;
    sets.insert(sets.end(), first->set.begin(), first->set.end());
    const Config c = load_config(plan.base, sets);
    const long per_step = static_cast<long>(c.train.batch_size) * c.train.grad_accum * c.model.context;
    json jr = {{"name", f},
               {"tokens_per_step", per_step},
               {"loss_1x", json::array()},
               {"loss_max", json::array()},
               {"gap", json::array()}};
    const int m1 = multiples.front();
    for (int row = 0; row < 3; ++row) {
      md << "| `" << f << "` | " << per_step << " | "
         << (row == 0   ? std::to_string(m1) + "×"
             : row == 1 ? std::to_string(mmax) + "×"
                        : std::to_string(mmax) + "× − " + std::to_string(m1) + "×")
         << " |";
      for (int k : plan.budgets) {
        const Variant* v = find(f + "_" + std::to_string(k) + "steps");
        Stat st;
        if (v && row < 2) st = stat_at(*v, row == 0 ? m1 : mmax, "loss");
        if (v && row == 2) {  // the gap per seed, then its mean and sd
          const auto a = loss_by_seed(*v, mmax), b = loss_by_seed(*v, m1);
          std::vector<double> gaps;
          for (const auto& [seed, x] : a)
            if (b.count(seed)) gaps.push_back(x - b.at(seed));
          st = stat_of(gaps);
        }
        md << " " << fmt_stat(st) << " |";
        jr[row == 0 ? "loss_1x" : row == 1 ? "loss_max" : "gap"].push_back(st.n ? json(st.mean) : json(nullptr));
      }
      md << "\n";
    }
    jb["runs"].push_back(jr);
    // A run with no results yet gets no block: gnuplot skips empty blocks
    // in its index count, which would give the later runs the wrong titles.
    std::ostringstream block;
    for (int k : plan.budgets)
      if (const Variant* v = find(f + "_" + std::to_string(k) + "steps"); v && !v->results.empty()) {
        const Stat lo = stat_at(*v, m1, "loss"), hi = stat_at(*v, mmax, "loss");
        block << static_cast<double>(k) * per_step << " " << lo.mean << " " << hi.mean << " "
              << (std::isfinite(hi.sd) ? hi.sd : 0.0) << "\n";
      }
    if (block.tellp() == 0) continue;
    dat << "# " << f << "\n" << block.str() << "\n\n";
    plots.budget_runs.push_back(f);
  }
  md << "\nTokens trained = steps × tokens per step. Plot: `loss_vs_budget.png`.\n";
  summary["budgets"] = jb;
}

std::string Summary::write() {
  write_file_atomic((out / "plots.gp").string(), gnuplot_script(plots));
  write_json_file((out / "summary.json").string(), summary);
  write_file_atomic((out / "results.md").string(), md.str());
  const std::string cmd = "cd '" + out.string() + "' && gnuplot plots.gp";
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    if (std::system(cmd.c_str()) == 0)
      spdlog::info("sweep: plots drawn in {}", out.string());
    else
      spdlog::warn("sweep: gnuplot failed on {}/plots.gp", out.string());
  } else {
    spdlog::warn("sweep: gnuplot is not installed (apt-get install gnuplot-nox); the plot script is {}/plots.gp",
                 out.string());
  }
  return md.str();
}

}  // namespace

std::string summarize_sweep(const SweepPlan& plan) {
  Summary s(plan);
  s.loss_table();
  s.interval_table();
  s.paired_table();
  s.diagnostics_table();
  s.measures_table();
  s.budget_table();
  s.plot_data();
  s.retrieval_grids();
  s.task_line_tables();
  return s.write();
}

}  // namespace gpt
