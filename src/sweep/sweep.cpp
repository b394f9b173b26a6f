#include "sweep/sweep.h"

#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <spdlog/spdlog.h>

#include "config/config.h"
#include "config/attention.h"
#include "core/check.h"
#include "core/files.h"
#include "core/json.h"
#include "data/synthetic.h"
#include "sweep/stats.h"

extern char** environ;

namespace fs = std::filesystem;

namespace gpt {
namespace {

using nlohmann::json;

// ---- parsing ------------------------------------------------------------------

void check_keys(const json& j, const std::string& where, const std::set<std::string>& allowed,
                const std::string& file) {
  GPT_CHECK(j.is_object(), file, ": ", where, " must be a JSON object");
  for (const auto& [k, v] : j.items()) {
    if (allowed.count(k)) continue;
    std::string valid;
    for (const auto& a : allowed) valid += (valid.empty() ? "" : ", ") + a;
    fail(file, ": unknown key \"", where.empty() ? k : where + "." + k, "\"; valid keys: ", valid);
  }
}

template <typename V>
V get_as(const json& j, const std::string& key, const std::string& where, const std::string& file, V fallback) {
  if (!j.contains(key)) return fallback;
  try {
    return j.at(key).get<V>();
  } catch (const json::exception&) {
    fail(file, ": \"", where, key, "\" has the wrong type (", j.at(key).dump(), ")");
  }
}

// Run and eval names become directory names under the sweep's dir: plain
// names only (no separator, not "." or "..", bounded length), checked by a
// loop (std::regex recurses per character and overflows the stack on long input).
constexpr size_t kMaxNameLength = 100;

void check_name(const std::string& name, const std::string& what, const std::string& file) {
  auto allowed = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '+' || c == '-'; };
  const std::string shown = name.size() > 40 ? name.substr(0, 40) + "..." : name;
  GPT_CHECK(!name.empty() && name.size() <= kMaxNameLength, file, ": ", what, " name \"", shown, "\" (", name.size(),
            " characters) must have 1 to ", kMaxNameLength, " characters");
  GPT_CHECK(std::all_of(name.begin(), name.end(), allowed), file, ": ", what, " name \"", shown,
            "\" must use only letters, digits and _ . + - (it names a directory of the sweep)");
  GPT_CHECK(name != "." && name != "..", file, ": ", what, " name \"", name,
            "\" is not a plain name (it would name the sweep directory or its parent)");
}

// "seeds": distinct non-negative integers (train.seed is a uint64; each seed
// names its run directory, so a repeated seed would be two jobs in one).
std::vector<uint64_t> read_seeds(const json& j, const std::string& where, const std::string& file,
                                 const std::vector<uint64_t>& fallback) {
  if (!j.contains("seeds")) return fallback;
  const json& a = j.at("seeds");
  GPT_CHECK(a.is_array(), file, ": \"", where, "seeds\" must be an array of non-negative integers, got ", a.dump());
  std::vector<uint64_t> seeds;
  for (const json& v : a) {
    // As the config reads train.seed: an integer, or a whole-valued number
    // (2e4) that fits; never a fraction, a negative or a narrowed value.
    const bool whole_float = v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() >= 0 &&
                             v.get<double>() == std::floor(v.get<double>()) && v.get<double>() < 0x1p64;
    GPT_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0) || whole_float, file,
              ": \"", where, "seeds\" holds ", v.dump(), "; seeds must be integers from 0 to 2^64-1 (train.seed)");
    const uint64_t s = whole_float ? static_cast<uint64_t>(v.get<double>()) : v.get<uint64_t>();
    GPT_CHECK(std::find(seeds.begin(), seeds.end(), s) == seeds.end(), file, ": \"", where, "seeds\" lists seed ",
              s, " twice; each seed is one run directory");
    seeds.push_back(s);
  }
  return seeds;
}

// ---- subprocesses -------------------------------------------------------------

std::string quoted(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    const bool plain = a.find_first_of(" \t\"'$\\*?;&|<>()") == std::string::npos && !a.empty();
    s += (s.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  return s;
}

// Starts argv with the parent's stdout/stderr and SIGINT at its default
// disposition (the sweep itself ignores SIGINT while jobs run: Ctrl-C reaches
// the whole process group, each child saves and exits 130, and the sweep
// then stops).
pid_t spawn_child(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, args[0], nullptr, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  GPT_CHECK(err == 0, "sweep: cannot start ", args[0], ": ", std::strerror(err));
  return pid;
}

// Waits for any child; returns its pid and exit status (128+signal if killed).
std::pair<pid_t, int> wait_child() {
  int status = 0;
  pid_t pid;
  while ((pid = waitpid(-1, &status, 0)) < 0 && errno == EINTR) {
  }
  GPT_CHECK(pid > 0, "sweep: waitpid failed: ", std::strerror(errno));
  if (WIFEXITED(status)) return {pid, WEXITSTATUS(status)};
  if (WIFSIGNALED(status)) return {pid, 128 + WTERMSIG(status)};
  return {pid, 1};
}

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

std::string fmt(double x, int prec = 4) {
  if (!std::isfinite(x)) return "–";
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", prec, x);
  return b;
}

std::string fmt_stat(const Stat& s) {
  if (s.n == 0) return "–";
  return s.n > 1 ? fmt(s.mean) + " ± " + fmt(s.sd, 3) : fmt(s.mean);
}

double num(const json& j) { return j.is_number() ? j.get<double>() : NAN; }

// One variant of the summary: a trained run or an evaluation of one.
struct Variant {
  std::string name, kind, run;
  std::vector<uint64_t> seeds;
  std::vector<json> results;  // per finished seed
  std::vector<uint64_t> missing;   // seeds without a result
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

double layer_mean(const json& row, const char* key) {
  const json& layers = row.at("attention_diagnostics");
  if (!layers.is_array() || layers.empty()) return NAN;
  double s = 0;
  for (const auto& l : layers) s += num(l.at(key));
  return s / layers.size();
}

}  // namespace

// ---- plan ---------------------------------------------------------------------

const SweepRun& SweepPlan::run(const std::string& name) const {
  for (const auto& r : runs)
    if (r.name == name) return r;
  fail("sweep: no run named \"", name, "\"");
}

std::string SweepPlan::run_dir(const std::string& run, uint64_t seed) const {
  return (fs::path(dir) / run / ("seed" + std::to_string(seed))).string();
}

SweepPlan load_sweep(const std::string& path) {
  const json j = read_json_file(path, "sweep");
  SweepPlan p;
  p.file = path;
  check_keys(j, "", {"dir", "base", "set", "seeds", "runs", "evals", "passkey", "task", "plot", "baseline"}, path);
  p.dir = get_as<std::string>(j, "dir", "", path, p.dir);
  GPT_CHECK(j.contains("base"), path, ": \"base\" (the config every run starts from) is required");
  p.base = get_as<std::string>(j, "base", "", path, "");
  p.set = get_as<std::vector<std::string>>(j, "set", "", path, {});
  p.seeds = read_seeds(j, "", path, p.seeds);
  GPT_CHECK(!p.seeds.empty(), path, ": \"seeds\" must not be empty");
  GPT_CHECK(j.contains("runs") && j["runs"].is_array() && !j["runs"].empty(), path,
            ": \"runs\" must be a non-empty array of {name, set, seeds, passkey, task}");
  std::set<std::string> names;
  for (const auto& r : j["runs"]) {
    check_keys(r, "runs[]", {"name", "set", "seeds", "passkey", "task"}, path);
    SweepRun run;
    run.name = get_as<std::string>(r, "name", "runs[].", path, "");
    check_name(run.name, "run", path);
    GPT_CHECK(names.insert(run.name).second, path, ": two runs or evals are named \"", run.name, "\"");
    run.set = get_as<std::vector<std::string>>(r, "set", "runs[].", path, {});
    run.seeds = read_seeds(r, "runs[].", path, p.seeds);
    GPT_CHECK(!run.seeds.empty(), path, ": run \"", run.name, "\" has no seeds");
    run.passkey = get_as<bool>(r, "passkey", "runs[].", path, false);
    run.task = get_as<std::string>(r, "task", "runs[].", path, "");
    if (!run.task.empty()) {
      const auto& tasks = synthetic_task_names();
      std::string all;
      for (const auto& t : tasks) all += (all.empty() ? "" : ", ") + t;
      GPT_CHECK(std::find(tasks.begin(), tasks.end(), run.task) != tasks.end(), path, ": run \"", run.name,
                "\": \"task\" \"", run.task, "\" is not a synthetic task (", all, ")");
    }
    // The overrides must make a valid config (fails now, not an hour in).
    std::vector<std::string> sets = p.set;
    sets.insert(sets.end(), run.set.begin(), run.set.end());
    try {
      load_config(p.base, sets);
    } catch (const Error& e) {
      fail(path, ": run \"", run.name, "\": ", e.what());
    }
    p.runs.push_back(run);
  }
  if (j.contains("evals")) {
    GPT_CHECK(j["evals"].is_array(), path, ": \"evals\" must be an array");
    for (const auto& e : j["evals"]) {
      check_keys(e, "evals[]", {"name", "run", "attention", "set", "context", "context_set", "protocol", "stride"},
                 path);
      SweepEval ev;
      ev.name = get_as<std::string>(e, "name", "evals[].", path, "");
      check_name(ev.name, "eval", path);
      GPT_CHECK(names.insert(ev.name).second, path, ": two runs or evals are named \"", ev.name, "\"");
      ev.run = get_as<std::string>(e, "run", "evals[].", path, "");
      GPT_CHECK(std::any_of(p.runs.begin(), p.runs.end(), [&](const SweepRun& r) { return r.name == ev.run; }), path,
                ": eval \"", ev.name, "\" names run \"", ev.run, "\", which the sweep does not train");
      ev.attention = get_as<std::string>(e, "attention", "evals[].", path, "");
      ev.set = get_as<std::vector<std::string>>(e, "set", "evals[].", path, {});
      ev.context = get_as<std::string>(e, "context", "evals[].", path, "");
      ev.context_set = get_as<std::vector<std::string>>(e, "context_set", "evals[].", path, {});
      ev.protocol = get_as<std::string>(e, "protocol", "evals[].", path, "");
      ev.stride = get_as<int>(e, "stride", "evals[].", path, 0);
      const auto& protocols = eval_protocols();
      std::string protocol_list;
      for (const auto& name : protocols) protocol_list += (protocol_list.empty() ? "" : ", ") + name;
      GPT_CHECK(ev.protocol.empty() || std::find(protocols.begin(), protocols.end(), ev.protocol) != protocols.end(),
                path, ": eval \"", ev.name, "\": \"protocol\" \"", ev.protocol, "\" is not one of ",
                protocol_list);
      GPT_CHECK(ev.stride >= 0 && (ev.stride == 0 || ev.protocol == "sliding"), path, ": eval \"", ev.name,
                "\": \"stride\" must be a positive number of tokens, with \"protocol\": \"sliding\"");
      GPT_CHECK(!ev.attention.empty() || !ev.set.empty() || !ev.context.empty() || !ev.context_set.empty() ||
                    !ev.protocol.empty(),
                path, ": eval \"", ev.name,
                "\" changes nothing; give \"attention\", \"set\", \"context\", \"context_set\" or \"protocol\"");
      if (!ev.context.empty()) {
        GPT_CHECK(ev.context.find_first_not_of("0123456789") != std::string::npos, path, ": eval \"", ev.name,
                  "\": \"context\" names context-extension methods (", context_method_names(), "), not a length");
        std::vector<std::string> methods;
        for (size_t a = 0, b; a <= ev.context.size(); a = b + 1) {
          b = ev.context.find(',', a);
          if (b == std::string::npos) b = ev.context.size();
          methods.push_back(ev.context.substr(a, b - a));
        }
        try {
          context_methods_to_json(methods);
        } catch (const Error& err) {
          fail(path, ": eval \"", ev.name, "\": ", err.what());
        }
      }
      p.evals.push_back(ev);
    }
  }
  if (j.contains("passkey")) {
    const json& pk = j["passkey"];
    check_keys(pk, "passkey", {"depths", "samples"}, path);
    p.passkey_depths = get_as<std::vector<double>>(pk, "depths", "passkey.", path, p.passkey_depths);
    p.passkey_samples = get_as<int>(pk, "samples", "passkey.", path, p.passkey_samples);
    GPT_CHECK(!p.passkey_depths.empty() && p.passkey_samples >= 1, path,
              ": passkey needs at least one depth and samples >= 1");
    for (double d : p.passkey_depths) GPT_CHECK(d >= 0 && d <= 1, path, ": passkey depths must lie in [0, 1]");
  }
  if (j.contains("task")) {
    const json& tk = j["task"];
    check_keys(tk, "task", {"depths", "samples"}, path);
    p.task_depths = get_as<std::vector<double>>(tk, "depths", "task.", path, p.task_depths);
    p.task_samples = get_as<int>(tk, "samples", "task.", path, p.task_samples);
    GPT_CHECK(!p.task_depths.empty() && p.task_samples >= 1, path, ": task needs at least one depth and samples >= 1");
    for (double d : p.task_depths) GPT_CHECK(d >= 0 && d <= 1, path, ": task depths must lie in [0, 1]");
  }
  if (j.contains("plot")) {
    check_keys(j["plot"], "plot", {"profile"}, path);
    p.profile_variants = get_as<std::vector<std::string>>(j["plot"], "profile", "plot.", path, {});
    for (const auto& v : p.profile_variants)
      GPT_CHECK(names.count(v), path, ": plot.profile names \"", v, "\", which is no run or eval of the sweep");
  }
  p.baseline = get_as<std::string>(j, "baseline", "", path, names.count("softmax") ? "softmax" : p.runs[0].name);
  GPT_CHECK(names.count(p.baseline), path, ": \"baseline\" names \"", p.baseline,
            "\", which is no run or eval of the sweep");
  return p;
}

// ---- running ------------------------------------------------------------------

int run_sweep(const SweepPlan& plan, const std::string& gpt, bool dry_run, int parallel) {
  GPT_CHECK(parallel >= 1, "sweep: --jobs must be >= 1, got ", parallel);
  struct Job {
    std::string what;
    std::vector<std::string> argv;
    fs::path done;
  };
  std::vector<Job> jobs;
  // Evaluations use the run config's thread count (train.threads; 0 = all).
  auto threads_of = [&](const SweepRun& r) {
    std::vector<std::string> sets = plan.set;
    sets.insert(sets.end(), r.set.begin(), r.set.end());
    return std::to_string(load_config(plan.base, sets).train.threads);
  };
  for (const auto& r : plan.runs)
    for (uint64_t seed : r.seeds) {
      const std::string dir = plan.run_dir(r.name, seed);
      Job job{"train " + r.name + " seed " + std::to_string(seed), {gpt, "train"}, fs::path(dir) / "extrapolation.json"};
      if (fs::exists(fs::path(dir) / "checkpoints" / "latest")) {
        job.argv.insert(job.argv.end(), {"--resume", dir});
      } else {
        job.argv.push_back(plan.base);
        std::vector<std::string> sets = plan.set;
        sets.insert(sets.end(), r.set.begin(), r.set.end());
        sets.push_back("train.seed=" + std::to_string(seed));
        sets.push_back("run.dir=" + dir);
        for (const auto& s : sets) job.argv.insert(job.argv.end(), {"--set", s});
      }
      jobs.push_back(job);
    }
  for (const auto& e : plan.evals)
    for (uint64_t seed : plan.run(e.run).seeds) {
      const std::string dir = plan.run_dir(e.run, seed);
      Job job{"eval " + e.name + " seed " + std::to_string(seed),
              {gpt, "eval", dir, "--threads", threads_of(plan.run(e.run))},
              fs::path(dir) / "eval" / (e.name + ".json")};
      if (!e.attention.empty()) job.argv.insert(job.argv.end(), {"--attention", e.attention});
      for (const auto& s : e.set) job.argv.insert(job.argv.end(), {"--attention-set", s});
      if (!e.context.empty()) job.argv.insert(job.argv.end(), {"--context", e.context});
      for (const auto& s : e.context_set) job.argv.insert(job.argv.end(), {"--context-set", s});
      if (!e.protocol.empty()) job.argv.insert(job.argv.end(), {"--protocol", e.protocol});
      if (e.stride > 0) job.argv.insert(job.argv.end(), {"--stride", std::to_string(e.stride)});
      job.argv.insert(job.argv.end(), {"--out", job.done.string()});
      jobs.push_back(job);
    }
  std::string depths;
  for (double d : plan.passkey_depths) depths += (depths.empty() ? "" : ",") + fmt(d, 3);
  for (const auto& r : plan.runs)
    if (r.passkey)
      for (uint64_t seed : r.seeds) {
        const std::string dir = plan.run_dir(r.name, seed);
        const fs::path out = fs::path(dir) / "eval" / "passkey.json";
        jobs.push_back({"passkey " + r.name + " seed " + std::to_string(seed),
                        {gpt, "eval", dir, "--threads", threads_of(r), "--task", "passkey", "--passkey-depths", depths, "--passkey-samples",
                         std::to_string(plan.passkey_samples), "--out", out.string()},
                        out});
      }
  std::string task_depths;
  for (double d : plan.task_depths) task_depths += (task_depths.empty() ? "" : ",") + fmt(d, 3);
  for (const auto& r : plan.runs)
    if (!r.task.empty())
      for (uint64_t seed : r.seeds) {
        const std::string dir = plan.run_dir(r.name, seed);
        const fs::path out = fs::path(dir) / "eval" / ("task_" + r.task + ".json");
        jobs.push_back({"task " + r.task + " " + r.name + " seed " + std::to_string(seed),
                        {gpt, "eval", dir, "--threads", threads_of(r), "--task", r.task, "--depths", task_depths,
                         "--samples", std::to_string(plan.task_samples), "--out", out.string()},
                        out});
      }

  // Trainings first, then the evaluations that read their checkpoints; up to
  // `parallel` jobs at once within each phase.
  int failed = 0, skipped = 0;
  bool interrupted = false;
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  if (!dry_run) sigaction(SIGINT, &ignore, &old);
  std::map<pid_t, size_t> running;
  auto reap = [&] {
    const auto [pid, rc] = wait_child();
    const auto it = running.find(pid);
    if (it == running.end()) return;
    const Job& job = jobs[it->second];
    running.erase(it);
    if (rc == 130 || rc == 128 + SIGINT) {
      spdlog::warn("sweep: {} was interrupted; run the same command again to resume", job.what);
      interrupted = true;
    } else if (rc != 0) {
      spdlog::error("sweep: {} failed (exit status {}); its variant is reported as missing", job.what, rc);
      ++failed;
    } else {
      spdlog::info("sweep: {} finished", job.what);
    }
  };
  for (int phase : {0, 1}) {
    for (size_t i = 0; i < jobs.size() && !interrupted; ++i) {
      const Job& job = jobs[i];
      if ((job.what.rfind("train ", 0) == 0) != (phase == 0)) continue;
      if (fs::exists(job.done)) {
        ++skipped;
        spdlog::info("sweep [{}/{}] {}: done ({} exists), skipped", i + 1, jobs.size(), job.what,
                     job.done.string());
        continue;
      }
      if (dry_run) {
        spdlog::info("sweep [{}/{}] {}: {}", i + 1, jobs.size(), job.what, quoted(job.argv));
        continue;
      }
      while (static_cast<int>(running.size()) >= parallel && !interrupted) reap();
      if (interrupted) break;
      spdlog::info("sweep [{}/{}] {}: {}", i + 1, jobs.size(), job.what, quoted(job.argv));
      running[spawn_child(job.argv)] = i;
    }
    while (!running.empty()) reap();
    if (interrupted) break;
  }
  if (!dry_run) sigaction(SIGINT, &old, nullptr);
  if (interrupted) return 130;
  spdlog::info("sweep: {} jobs, {} already done, {} failed", jobs.size(), skipped, failed);
  return failed > 0 ? 1 : 0;
}

// ---- summary ------------------------------------------------------------------

std::string summarize_sweep(const SweepPlan& plan) {
  std::vector<Variant> vars;
  for (const auto& r : plan.runs) {
    Variant v{r.name, "trained", r.name, r.seeds, {}, {}, {}};
    for (uint64_t s : r.seeds) {
      auto j = read_json_if(fs::path(plan.run_dir(r.name, s)) / "extrapolation.json");
      if (j) v.results.push_back(*j), v.result_seeds.push_back(s);
      else v.missing.push_back(s);
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
    Variant v{e.name, "eval of " + e.run + ": " + how, e.run, plan.run(e.run).seeds, {}, {}, {}};
    for (uint64_t s : v.seeds) {
      auto j = read_json_if(fs::path(plan.run_dir(e.run, s)) / "eval" / (e.name + ".json"));
      if (j) v.results.push_back(*j), v.result_seeds.push_back(s);
      else v.missing.push_back(s);
    }
    vars.push_back(v);
  }
  // The multiples: those of the first result found.
  std::vector<int> multiples;
  int trained_context = 0;
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
  auto row_of = [&](const json& res, int m) -> const json* {
    for (const auto& row : res.at("multiples"))
      if (row.at("multiple").get<int>() == m) return &row;
    return nullptr;
  };
  auto stat_at = [&](const Variant& v, int m, const char* key) {
    std::vector<double> xs;
    for (const auto& res : v.results)
      if (const json* row = row_of(res, m)) xs.push_back(std::string(key) == "sink" || std::string(key) == "entropy"
                                                             ? layer_mean(*row, key)
                                                             : num(row->at(key)));
    return stat_of(xs);
  };
  const int mmax = multiples.back();
  // The loss of each finished seed at multiple m (NaN where that row is missing).
  auto loss_by_seed = [&](const Variant& v, int m) {
    std::map<uint64_t, double> by;
    for (size_t i = 0; i < v.results.size(); ++i) {
      const json* row = row_of(v.results[i], m);
      by[v.result_seeds[i]] = row ? num(row->at("loss")) : NAN;
    }
    return by;
  };
  auto interval_at = [&](const Variant& v, int m) {
    std::vector<double> xs;
    for (const auto& [seed, x] : loss_by_seed(v, m)) xs.push_back(x);
    return stats::mean_interval(xs);
  };
  // One seed: the 95% interval of a mean over the K validation windows of
  // that result's row (its "windows": the layout's K), from the standard
  // error the evaluation wrote (loss ± t(0.975, K - 1) · se). bucket: a
  // profile entry of the row instead (its "loss" and "se"). NaN where the
  // result has no standard error (one window, or written before it had one).
  auto window_interval = [&](const json* row, const char* key, const char* se_key, const json* bucket = nullptr) {
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
  };
  // variant − baseline over the seeds both finished, at multiple m.
  const Variant* base = nullptr;
  for (const auto& v : vars)
    if (v.name == plan.baseline) base = &v;
  // The per-window losses of variant v's seed at multiple m (empty if not recorded).
  auto windows_of = [&](const Variant& v, uint64_t seed, int m) {
    std::vector<double> w;
    for (size_t i = 0; i < v.results.size(); ++i)
      if (v.result_seeds[i] == seed)
        if (const json* row = row_of(v.results[i], m); row && row->contains("window_losses"))
          for (const auto& x : row->at("window_losses")) w.push_back(num(x));
    return w;
  };
  // Over seeds: the paired t-test. With one shared seed: the paired bootstrap
  // over the validation windows both scored (the table check above makes them
  // the same windows); `windows` is then their number, else 0.
  struct Paired {
    stats::PairedTest t;
    size_t windows = 0;
    // The interval excludes 0 (the bootstrap's n counts seeds, so its test is on the interval alone).
    bool distinguishable() const {
      return windows ? std::isfinite(t.lo) && (t.lo > 0 || t.hi < 0) : t.distinguishable();
    }
  };
  auto paired_at = [&](const Variant& v, int m) {
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
  };

  const fs::path out = fs::path(plan.dir) / "summary";
  fs::create_directories(out);
  std::ostringstream md;
  md << "## Validation loss by context (mean ± sample sd over seeds; T = " << trained_context << ")\n\n"
     << "| variant | how | seeds |";
  for (int m : multiples) md << " " << m << "× |";
  md << " " << mmax << "× past T | " << mmax << "× − 1× |\n|---|---|---|";
  for (size_t i = 0; i < multiples.size() + 2; ++i) md << "---|";
  md << "\n";
  json summary = {{"trained_context", trained_context}, {"multiples", multiples}, {"variants", json::array()}};
  for (const auto& v : vars) {
    md << "| `" << v.name << "` | " << v.kind << " | " << v.results.size();
    if (!v.missing.empty()) md << " (" << v.missing.size() << " missing)";
    md << " |";
    json jv = {{"name", v.name}, {"kind", v.kind}, {"seeds", v.results.size()}, {"missing_seeds", v.missing},
               {"multiples", json::array()}};
    for (int m : multiples) {
      const Stat s = stat_at(v, m, "loss");
      md << " " << fmt_stat(s) << " |";
      const stats::MeanInterval ci = interval_at(v, m);
      jv["multiples"].push_back({{"multiple", m}, {"loss_mean", s.n ? json(s.mean) : json(nullptr)},
                                 {"loss_sd", std::isfinite(s.sd) ? json(s.sd) : json(nullptr)},
                                 {"loss_ci95_lo", number_or_null(ci.lo)}, {"loss_ci95_hi", number_or_null(ci.hi)},
                                 {"loss_min", s.n ? json(s.min) : json(nullptr)},
                                 {"loss_max", s.n ? json(s.max) : json(nullptr)},
                                 {"past_train_mean", json(stat_at(v, m, "loss_past_train").mean)},
                                 {"sink", json(stat_at(v, m, "sink").mean)},
                                 {"entropy", json(stat_at(v, m, "entropy").mean)}});
    }
    md << " " << fmt_stat(stat_at(v, mmax, "loss_past_train")) << " | "
       << fmt(stat_at(v, mmax, "loss").mean - stat_at(v, multiples.front(), "loss").mean) << " |\n";
    if (base && &v != base) {
      json paired = {{"baseline", base->name}, {"multiples", json::array()}};
      for (int m : multiples) {
        const Paired pr = paired_at(v, m);
        const stats::PairedTest& t = pr.t;
        paired["multiples"].push_back(
            {{"multiple", m}, {"seeds", t.n},
             {"method", pr.windows ? "paired bootstrap over validation windows (one seed)" : "paired t over seeds"},
             {"windows", pr.windows}, {"diff_mean", number_or_null(t.mean)},
             {"diff_ci95_lo", number_or_null(t.lo)}, {"diff_ci95_hi", number_or_null(t.hi)},
             {"t", number_or_null(t.t)}, {"p", number_or_null(t.p)},
             {"distinguishable", pr.distinguishable()}});
      }
      jv["paired"] = paired;
    }
    summary["variants"].push_back(jv);
  }
  summary["baseline"] = plan.baseline;

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
      if (ci.n >= 2) md << " [" << fmt(ci.lo) << ", " << fmt(ci.hi) << "] |";
      else md << " – |";
    }
    md << "\n";
  }
  md << "\n(– : fewer than 2 seeds, no interval.)\n";
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
        md << " " << fmt_signed(t.mean) << " [" << fmt_signed(t.lo) << ", " << fmt_signed(t.hi) << "], p "
           << fmt_p(t.p) << (t.distinguishable() ? "" : ", not distinguishable") << " |";
      }
      md << "\n";
    }
    md << "\nA difference whose interval contains 0 is marked not distinguishable: it is inside the seed noise "
          "(with one shared seed, inside the window-to-window noise of the paired bootstrap, which says nothing "
          "about seeds). Negative is a lower loss than the baseline.\n";
  }

  md << "\n## Attention diagnostics (mean over layers, heads, rows and seeds)\n\n| variant |";
  for (int m : multiples) md << " sink " << m << "× |";
  for (int m : multiples) md << " entropy " << m << "× |";
  md << "\n|---|";
  for (size_t i = 0; i < 2 * multiples.size(); ++i) md << "---|";
  md << "\n";
  for (const auto& v : vars) {
    md << "| `" << v.name << "` |";
    for (int m : multiples) md << " " << fmt(stat_at(v, m, "sink").mean, 3) << " |";
    for (int m : multiples) md << " " << fmt(stat_at(v, m, "entropy").mean, 2) << " |";
    md << "\n";
  }

  // Data files for gnuplot: one index block per variant.
  std::ofstream loss_dat(out / "loss.dat"), diag_dat(out / "diagnostics.dat"), prof_dat(out / "profile.dat");
  std::vector<std::string> plotted, profiled;
  std::vector<bool> plotted_eval;  // training-free evaluations: dashed
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
      const stats::MeanInterval ci = one_seed ? window_interval(row_of(v.results[0], m), "loss", "loss_se")
                                              : interval_at(v, m);
      loss_dat << m << " " << s.mean << " " << s.min << " " << s.max << " " << ci.lo << " " << ci.hi << "\n";
      diag_dat << m << " " << stat_at(v, m, "sink").mean << " " << stat_at(v, m, "entropy").mean << "\n";
    }
    loss_dat << "\n\n";
    diag_dat << "\n\n";
    const bool want = plan.profile_variants.empty() ? v.kind == "trained"
                                                    : std::count(plan.profile_variants.begin(),
                                                                 plan.profile_variants.end(), v.name) > 0;
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
      const stats::MeanInterval ci =
          one_seed ? window_interval(first, nullptr, nullptr, &b) : stats::mean_interval(xs);
      prof_dat << 0.5 * (b.at("start").get<double>() + b.at("end").get<double>()) << " " << stat_of(xs).mean << " "
               << ci.lo << " " << ci.hi << "\n";
    }
    prof_dat << "\n\n";
  }

  // gnuplot reads these below: flush them now.
  loss_dat.close();
  diag_dat.close();
  prof_dat.close();

  // Retrieval grids (passkey, synthetic tasks): exact match per cell and
  // multiple, mean over seeds, written to PREFIX_RUN.dat for the heat map;
  // the cell mean per seed as mean ± sd over seeds; answer tokens right.
  // cells: the key of a multiple's cells in the result ("depths" or "cells").
  // Returns the run's summary entry, or null when no seed has results.
  // One multiple of a run's line as a table cell: "mean" or "mean ± sd".
  auto line_cell = [](const json& e) {
    return fmt(num(e["exact"]), 2) + (e["sd"].is_null() ? std::string() : " ± " + fmt(num(e["sd"]), 2));
  };
  auto grid_summary = [&](const SweepRun& r, const std::string& file, const std::string& prefix,
                          const std::string& cells, const std::string& what,
                          const std::function<std::string(const json&, size_t)>& header) -> json {
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
      jr["line"].push_back({{"multiple", rows[i].at("multiple")}, {"exact", st.mean},
                            {"sd", st.n > 1 ? json(st.sd) : json(nullptr)}, {"min", st.min}, {"max", st.max}});
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
    return jr;
  };
  std::vector<std::string> passkey_runs, task_grids;  // task_grids: the runs of the task plots
  std::map<std::string, size_t> task_rows;              // cells (depths) of each task grid
  for (const auto& r : plan.runs) {
    if (!r.passkey) continue;
    json jr = grid_summary(r, "passkey.json", "passkey_", "depths", "passkey", [&](const json& first, size_t n) {
      return "Passkey retrieval, `" + r.name + "`: exact match (" + std::to_string(n) + " seed(s) × " + std::to_string(first.at("samples").get<int>()) +
             " prompts per cell, " + std::to_string(first.at("digits").get<int>()) + " digits)";
    });
    if (jr.is_null()) continue;
    passkey_runs.push_back(r.name);
    summary["passkey"].push_back(jr);
  }
  for (const auto& r : plan.runs) {
    if (r.task.empty()) continue;
    json jr = grid_summary(r, "task_" + r.task + ".json", "task_", "cells", "task " + r.task, [&](const json& first, size_t n) {
      return "Task `" + r.task + "` " + first.at("options").dump() + ", `" + r.name + "`: exact match (" +
             std::to_string(n) + " seed(s) × " + std::to_string(first.at("samples").get<int>()) +
             " examples per cell)";
    });
    if (jr.is_null()) continue;
    jr["task"] = r.task;
    task_grids.push_back(r.name);
    task_rows[r.name] = jr["cells"].get<size_t>();
    summary["tasks"].push_back(jr);
  }
  // Per task: every variant's exact match (mean over the cells) against the
  // multiple, mean ± sd over seeds, as one table and one panel of lines with
  // the seeds' range as a band (task_lines_TASK.dat, a block per run).
  std::vector<std::string> line_tasks;                 // in order of first appearance
  std::map<std::string, std::vector<json>> task_lines;  // task -> its runs' summary entries
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

  // gnuplot script; the PNGs are drawn when gnuplot is installed.
  // The x axis of the plots against the multiple (log 2, a tic per multiple).
  std::ostringstream multiple_axis;
  multiple_axis << "set logscale x 2\nset xrange [" << multiples.front() * 0.85 << ":" << multiples.back() * 1.15
                << "]\nset xtics (";
  for (size_t i = 0; i < multiples.size(); ++i)
    multiple_axis << (i ? ", " : "") << "'" << multiples[i] << "x' " << multiples[i];
  multiple_axis << ")\n";
  std::ostringstream gp;
  gp << "# Written by gpt sweep; run from this folder: gnuplot plots.gp\n"
     << "set terminal pngcairo size 1100,700 font ',11' noenhanced\nset grid\nset key outside right\n"
     << multiple_axis.str() << "set xlabel 'evaluation context / training context (T = " << trained_context << ")'\n"
     << "set output 'loss_vs_context.png'\nset ylabel 'validation loss (nats/token)'\n"
     << "set title 'Validation loss past the training context (band: 95% interval of the mean over seeds, or over "
        "the validation windows for one seed; dashed: evaluated with another attention, no retraining)'\n";
  // Distinct colours for up to 12 variants; evaluations of a trained
  // checkpoint are dashed.
  static const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                                    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#aec7e8"};
  auto colour = [&](size_t i) { return std::string("lc rgb '") + kColours[i % 12] + "'"; };
  auto style = [&](size_t i) { return colour(i) + (plotted_eval[i] ? " dt 2" : " dt 1"); };
  gp << "set logscale y\nset ytics (1.5, 1.75, 2, 2.5, 3, 4, 5, 6, 8, 10)\n";
  for (size_t i = 0; i < plotted.size(); ++i)
    gp << "  " << (i ? "" : "plot ") << "'loss.dat' index " << i
       << " using 1:5:6 with filledcurves fs transparent solid 0.15 " << colour(i) << " notitle, 'loss.dat' index "
       << i << " using 1:2 with linespoints lw 2 " << style(i) << " title '" << plotted[i] << "'"
       << (i + 1 < plotted.size() ? ", \\\n" : "\nunset logscale y\nset ytics auto\n");
  gp << "set output 'diagnostics.png'\nset multiplot layout 1,2 title 'Attention diagnostics (mean over layers, "
        "heads and rows)'\nset key off\nset ylabel 'sink share (weight on the first key)'\nset title ''\nplot \\\n";
  for (size_t i = 0; i < plotted.size(); ++i)
    gp << "  'diagnostics.dat' index " << i << " using 1:2 with linespoints lw 2 " << style(i) << " title '"
       << plotted[i] << "'" << (i + 1 < plotted.size() ? ", \\\n" : "\n");
  gp << "set key outside right\nset ylabel 'entropy of the weights (nats)'\nplot \\\n";
  for (size_t i = 0; i < plotted.size(); ++i)
    gp << "  'diagnostics.dat' index " << i << " using 1:3 with linespoints lw 2 " << style(i) << " title '"
       << plotted[i] << "'" << (i + 1 < plotted.size() ? ", \\\n" : "\n");
  gp << "unset multiplot\n";
  if (!profiled.empty()) {
    gp << "set output 'profile.png'\nunset logscale x\nset autoscale x\nset xtics auto\nset key outside right\n"
       << "set xlabel 'position in the " << mmax * trained_context << "-token window'\n"
       << "set ylabel 'mean loss in the bucket (nats/token)'\nset title 'Loss by position at " << mmax
       << "x the training context (band: 95% interval as in the loss plot; dashed: T)'\nset arrow 1 from " << trained_context
       << ", graph 0 to " << trained_context << ", graph 1 nohead dt 2\nplot \\\n";
    for (size_t i = 0; i < profiled.size(); ++i)
      gp << "  'profile.dat' index " << i << " using 1:3:4 with filledcurves fs transparent solid 0.15 "
         << colour(i) << " notitle, 'profile.dat' index " << i << " using 1:2 with linespoints lw 2 " << colour(i)
         << " title '" << profiled[i] << "'" << (i + 1 < profiled.size() ? ", \\\n" : "\n");
    gp << "unset arrow 1\n";
  }
  // Synthetic tasks: a panel per task, a line per variant (band: the seeds'
  // range); colours cycle, dashed after the first 12.
  if (!line_tasks.empty()) {
    const size_t cols = std::min<size_t>(line_tasks.size(), 2), nrows = (line_tasks.size() + cols - 1) / cols;
    gp << "set terminal pngcairo size " << 820 * cols << "," << 460 * nrows + 60
       << " font ',10' noenhanced\nset output 'tasks_lines.png'\n"
       << multiple_axis.str() << "set yrange [-0.02:1.02]\nset xlabel 'context multiple'\nset ylabel 'exact match'\n"
       << "set key outside right font ',8'\nset multiplot layout " << nrows << "," << cols
       << " title 'Synthetic tasks: exact match past the training context (band: range over seeds)'\n";
    // A run's key without its task's name in front (copy_softmax: softmax).
    auto key_of = [](const std::string& run, const std::string& task) {
      return run.size() > task.size() + 1 && run.compare(0, task.size() + 1, task + "_") == 0
                 ? run.substr(task.size() + 1)
                 : run;
    };
    for (const auto& t : line_tasks) {
      const auto& runs = task_lines[t];
      gp << "set title '" << t << "'\nplot \\\n";
      for (size_t i = 0; i < runs.size(); ++i) {
        const std::string c = colour(i) + (i >= 12 ? " dt 2" : " dt 1");
        gp << "  'task_lines_" << t << ".dat' index " << i << " using 1:3:4 with filledcurves fs transparent solid 0.12 "
           << colour(i) << " notitle, 'task_lines_" << t << ".dat' index " << i << " using 1:2 with linespoints lw 2 "
           << c << " pt " << (i % 13 + 1) << " title '" << key_of(runs[i]["run"].get<std::string>(), t) << "'"
           << (i + 1 < runs.size() ? ", \\\n" : "\n");
      }
    }
    gp << "unset multiplot\nset autoscale y\nunset logscale x\n";
  }
  // One heat map panel per run of a retrieval grid (PREFIX_RUN.dat): exact
  // match by depth and context; a grid of one row (no depth) as a line. At
  // most 5 panels a row.
  auto grid_plots = [&](const std::string& png, const std::string& title, const std::string& ylabel,
                        const std::string& prefix, const std::vector<std::string>& runs,
                        const std::function<std::string(const std::string&)>& panel,
                        const std::function<size_t(const std::string&)>& rows) {
    if (runs.empty()) return;
    const size_t cols = std::min<size_t>(runs.size(), 5), nrows = (runs.size() + cols - 1) / cols;
    gp << "set terminal pngcairo size " << std::max<size_t>(1100, 300 * cols) << "," << std::max<size_t>(700, 320 * nrows)
       << " font ',10' noenhanced\nset output '" << png << "'\nunset logscale x\nset autoscale x\nset multiplot layout "
       << nrows << "," << cols << " title '" << title << "'\nset cbrange [0:1]\n"
       << "set palette defined (0 '#b2182b', 0.5 '#f7f7f7', 1 '#2166ac')\nset xlabel 'context'\n"
       << "set ylabel '" << ylabel << "'\nunset key\nset xtics (";
    for (size_t i = 0; i < multiples.size(); ++i) gp << (i ? ", " : "") << "'" << multiples[i] << "x' " << i;
    gp << ")\n";
    for (const auto& r : runs) {
      gp << "set title '" << panel(r) << "'\n";
      if (rows(r) > 1)
        gp << "plot '" << prefix << r << ".dat' using 1:2:3 with image, '' using 1:2:(sprintf('%.2f', $3)) with labels\n";
      else
        gp << "set yrange [0:1]\nplot '" << prefix << r << ".dat' using 1:3 with linespoints\nset autoscale y\n";
    }
    gp << "unset multiplot\n";
  };
  // (The passkey panels stay heat maps whatever their number of depths, as before.)
  grid_plots("passkey.png", "Passkey retrieval: exact match by depth and context", "depth of the key", "passkey_",
             passkey_runs, [](const std::string& r) { return r; }, [](const std::string&) { return SIZE_MAX; });
  // Tasks with depths as heat maps (those with one cell are lines of tasks_lines.png).
  std::vector<std::string> depth_grids;
  for (const auto& r : task_grids)
    if (task_rows[r] > 1) depth_grids.push_back(r);
  grid_plots("tasks.png", "Synthetic tasks: exact match by depth and context", "depth of the needle",
             "task_", depth_grids, [&](const std::string& r) { return r + " (" + plan.run(r).task + ")"; },
             [&](const std::string& r) { return task_rows[r]; });
  write_file_atomic((out / "plots.gp").string(), gp.str());
  write_json_file((out / "summary.json").string(), summary);
  write_file_atomic((out / "results.md").string(), md.str());
  const std::string cmd = "cd '" + out.string() + "' && gnuplot plots.gp";
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    if (std::system(cmd.c_str()) == 0) spdlog::info("sweep: plots drawn in {}", out.string());
    else spdlog::warn("sweep: gnuplot failed on {}/plots.gp", out.string());
  } else {
    spdlog::warn("sweep: gnuplot is not installed (apt-get install gnuplot-nox); the plot script is {}/plots.gp",
                 out.string());
  }
  return md.str();
}

}  // namespace gpt
