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
#include "sweep/summary.h"
#include "train/model_io.h"
#include "train/schedule.h"

extern char** environ;

namespace fs = std::filesystem;

namespace gpt {
namespace {

using nlohmann::json;
using sweep_detail::fmt;

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
  auto allowed = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '+' || c == '-';
  };
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
    GPT_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0) || whole_float, file, ": \"",
              where, "seeds\" holds ", v.dump(), "; seeds must be integers from 0 to 2^64-1 (train.seed)");
    const uint64_t s = whole_float ? static_cast<uint64_t>(v.get<double>()) : v.get<uint64_t>();
    GPT_CHECK(std::find(seeds.begin(), seeds.end(), s) == seeds.end(), file, ": \"", where, "seeds\" lists seed ", s,
              " twice; each seed is one run directory");
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
  check_keys(j, "",
             {"dir", "base", "set", "seeds", "runs", "evals", "passkey", "task", "plot", "baseline", "budgets",
              "budget_reuse"},
             path);
  p.budget_reuse = get_as<std::string>(j, "budget_reuse", "", path, p.budget_reuse);
  GPT_CHECK(p.budget_reuse == "none" || p.budget_reuse == "wsd", path, ": \"budget_reuse\" \"", p.budget_reuse,
            "\" is not valid; allowed: none, wsd");
  GPT_CHECK(p.budget_reuse == "none" || j.contains("budgets"), path,
            ": \"budget_reuse\" needs \"budgets\" (the budgets that share a run)");
  p.budgets = get_as<std::vector<int>>(j, "budgets", "", path, {});
  for (size_t i = 0; i < p.budgets.size(); ++i)
    GPT_CHECK(p.budgets[i] >= 1 && (i == 0 || p.budgets[i] > p.budgets[i - 1]), path,
              ": \"budgets\" must be increasing numbers of training steps >= 1, got ", j.at("budgets").dump());
  p.dir = get_as<std::string>(j, "dir", "", path, p.dir);
  GPT_CHECK(j.contains("base"), path, ": \"base\" (the config every run starts from) is required");
  p.base = get_as<std::string>(j, "base", "", path, "");
  p.set = get_as<std::vector<std::string>>(j, "set", "", path, {});
  p.seeds = read_seeds(j, "", path, p.seeds);
  GPT_CHECK(!p.seeds.empty(), path, ": \"seeds\" must not be empty");
  GPT_CHECK(j.contains("runs") && j["runs"].is_array() && !j["runs"].empty(), path,
            ": \"runs\" must be a non-empty array of {name, set, seeds, passkey, task}");
  std::set<std::string> names;
  std::map<std::string, std::vector<int>> run_budgets;  // runs[].budgets where given
  for (const auto& r : j["runs"]) {
    check_keys(r, "runs[]", {"name", "set", "seeds", "passkey", "task", "budgets"}, path);
    SweepRun run;
    run.name = get_as<std::string>(r, "name", "runs[].", path, "");
    check_name(run.name, "run", path);
    GPT_CHECK(names.insert(run.name).second, path, ": two runs or evals are named \"", run.name, "\"");
    run.set = get_as<std::vector<std::string>>(r, "set", "runs[].", path, {});
    run.seeds = read_seeds(r, "runs[].", path, p.seeds);
    GPT_CHECK(!run.seeds.empty(), path, ": run \"", run.name, "\" has no seeds");
    run.passkey = get_as<bool>(r, "passkey", "runs[].", path, false);
    run.task = get_as<std::string>(r, "task", "runs[].", path, "");
    // runs[].budgets: the run at some of the sweep's budgets only.
    const std::vector<int> own = get_as<std::vector<int>>(r, "budgets", "runs[].", path, {});
    for (int k : own)
      GPT_CHECK(std::find(p.budgets.begin(), p.budgets.end(), k) != p.budgets.end(), path, ": run \"", run.name,
                "\": \"budgets\" lists ", k, ", which is not one of the sweep's \"budgets\"");
    if (!own.empty()) run_budgets[run.name] = own;
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
  // The budget axis: every run once per budget (NAME_Ksteps, train.steps=K),
  // each budget's config checked (a warmup longer than a budget fails here).
  auto at_budget = [](const std::string& name, int k) { return name + "_" + std::to_string(k) + "steps"; };
  if (!p.budgets.empty()) {
    const bool reuse = p.budget_reuse == "wsd";
    std::vector<SweepRun> expanded;
    for (const SweepRun& r : p.runs) {
      const std::vector<int>& ks = run_budgets.count(r.name) ? run_budgets.at(r.name) : p.budgets;
      const size_t first = expanded.size();
      std::vector<int> branch_steps;  // reuse: where each shorter budget's decay starts
      for (int k : ks) {
        SweepRun e = r;
        e.name = at_budget(r.name, k);
        check_name(e.name, "run", path);
        e.family = r.name;
        e.budget = k;
        e.set.push_back("train.steps=" + std::to_string(k));
        if (reuse) e.set.push_back("train.lr_schedule=wsd");
        std::vector<std::string> sets = p.set;
        sets.insert(sets.end(), e.set.begin(), e.set.end());
        try {
          const Config c = load_config(p.base, sets);
          if (reuse) branch_steps.push_back(wsd_decay_start(c.train));
        } catch (const Error& err) {
          fail(path, ": run \"", r.name, "\" at the budget of ", k, " steps: ", err.what());
        }
        GPT_CHECK(names.insert(e.name).second, path, ": the budget axis makes a second variant named \"", e.name, "\"");
        expanded.push_back(e);
      }
      // Reuse: the largest budget is the trunk; a shorter one whose decay
      // starts after step 0 and inside the trunk's stable phase branches off
      // the trunk's checkpoint there.
      if (reuse && ks.size() > 1) {
        SweepRun& trunk = expanded.back();
        std::string listed;
        for (size_t i = 0; i + 1 < ks.size(); ++i) {
          SweepRun& e = expanded[first + i];
          const int at = branch_steps[i];
          if (at < 1) continue;  // no stable phase to share
          GPT_CHECK(at <= branch_steps.back(), path, ": run \"", r.name, "\": the budget of ", ks[i],
                    " steps decays from step ", at, ", after the largest budget's decay starts (", branch_steps.back(),
                    "); budget_reuse needs the same train.decay_fraction-style stable phase");
          e.branch_of = trunk.name;
          e.branch_step = at;
          if (i > 0 && branch_steps[i - 1] == at && expanded[first + i - 1].branch_step == at) continue;  // listed
          listed += (listed.empty() ? "" : ",") + std::to_string(at);
        }
        if (!listed.empty()) trunk.set.push_back("train.checkpoint_steps=[" + listed + "]");
      }
    }
    p.runs = expanded;
  }
  // A name of the sweep file as the summary knows it: itself, or each of its
  // budgets' variants.
  auto expand = [&](const std::string& name, bool is_run) {
    if (p.budgets.empty() || !is_run) return std::vector<std::string>{name};
    std::vector<std::string> out;
    for (int k : p.budgets)
      if (names.count(at_budget(name, k))) out.push_back(at_budget(name, k));
    return out;
  };
  std::set<std::string> base_runs;
  for (const SweepRun& r : p.runs) base_runs.insert(r.family.empty() ? r.name : r.family);
  if (j.contains("evals")) {
    GPT_CHECK(j["evals"].is_array(), path, ": \"evals\" must be an array");
    for (const auto& e : j["evals"]) {
      check_keys(
          e, "evals[]",
          {"name", "run", "attention", "set", "context", "context_set", "protocol", "stride", "kl_against", "longppl"},
          path);
      SweepEval ev;
      ev.name = get_as<std::string>(e, "name", "evals[].", path, "");
      check_name(ev.name, "eval", path);
      GPT_CHECK(names.insert(ev.name).second, path, ": two runs or evals are named \"", ev.name, "\"");
      ev.run = get_as<std::string>(e, "run", "evals[].", path, "");
      GPT_CHECK(base_runs.count(ev.run), path, ": eval \"", ev.name, "\" names run \"", ev.run,
                "\", which the sweep does not train");
      ev.attention = get_as<std::string>(e, "attention", "evals[].", path, "");
      ev.set = get_as<std::vector<std::string>>(e, "set", "evals[].", path, {});
      ev.context = get_as<std::string>(e, "context", "evals[].", path, "");
      ev.context_set = get_as<std::vector<std::string>>(e, "context_set", "evals[].", path, {});
      ev.protocol = get_as<std::string>(e, "protocol", "evals[].", path, "");
      ev.stride = get_as<int>(e, "stride", "evals[].", path, 0);
      ev.kl_against = get_as<std::string>(e, "kl_against", "evals[].", path, "");
      ev.longppl = get_as<std::string>(e, "longppl", "evals[].", path, "");
      const auto& protocols = eval_protocols();
      std::string protocol_list;
      for (const auto& name : protocols) protocol_list += (protocol_list.empty() ? "" : ", ") + name;
      GPT_CHECK(ev.protocol.empty() || std::find(protocols.begin(), protocols.end(), ev.protocol) != protocols.end(),
                path, ": eval \"", ev.name, "\": \"protocol\" \"", ev.protocol, "\" is not one of ", protocol_list);
      GPT_CHECK(ev.stride >= 0 && (ev.stride == 0 || ev.protocol == "sliding"), path, ": eval \"", ev.name,
                "\": \"stride\" must be a positive number of tokens, with \"protocol\": \"sliding\"");
      GPT_CHECK(!ev.attention.empty() || !ev.set.empty() || !ev.context.empty() || !ev.context_set.empty() ||
                    !ev.protocol.empty() || !ev.longppl.empty(),
                path, ": eval \"", ev.name,
                "\" changes nothing; give \"attention\", \"set\", \"context\", \"context_set\", \"protocol\" or "
                "\"longppl\" (\"kl_against\" alone compares the model with itself)");
      GPT_CHECK(ev.kl_against.empty() || ev.kl_against == "base" || fs::exists(ev.kl_against), path, ": eval \"",
                ev.name,
                "\": \"kl_against\" is \"base\" (the same checkpoint without the eval's changes) or a run "
                "directory or checkpoint; \"",
                ev.kl_against, "\" does not exist");
      GPT_CHECK(ev.longppl.empty() || ev.longppl == "base" || fs::exists(ev.longppl), path, ": eval \"", ev.name,
                "\": \"longppl\" names LongPPL's evaluator: \"base\" (the same checkpoint without the eval's "
                "changes) or a run directory or checkpoint; \"",
                ev.longppl, "\" does not exist");
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
      if (p.budgets.empty()) {
        p.evals.push_back(ev);
        continue;
      }
      for (int k : run_budgets.count(ev.run) ? run_budgets.at(ev.run) : p.budgets) {  // each budget's run
        SweepEval eb = ev;
        eb.name = at_budget(ev.name, k);
        eb.run = at_budget(ev.run, k);
        check_name(eb.name, "eval", path);
        GPT_CHECK(names.insert(eb.name).second, path, ": the budget axis makes a second variant named \"", eb.name,
                  "\"");
        p.evals.push_back(eb);
      }
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
    std::vector<std::string> listed = get_as<std::vector<std::string>>(j["plot"], "profile", "plot.", path, {});
    for (const auto& v : listed) {
      bool family = false;
      for (int k : p.budgets) family |= names.count(at_budget(v, k)) > 0;
      for (const auto& x : expand(v, family)) {
        GPT_CHECK(names.count(x), path, ": plot.profile names \"", v, "\", which is no run or eval of the sweep");
        p.profile_variants.push_back(x);
      }
    }
  }
  const std::string first = p.runs[0].family.empty() ? p.runs[0].name : p.runs[0].family;
  p.baseline = get_as<std::string>(j, "baseline", "", path,
                                   names.count("softmax") || base_runs.count("softmax") ? "softmax" : first);
  for (auto k = p.budgets.rbegin(); k != p.budgets.rend(); ++k)  // the largest budget it was trained at
    if (names.count(at_budget(p.baseline, *k))) {
      p.baseline = at_budget(p.baseline, *k);
      break;
    }
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
    std::optional<size_t> after = std::nullopt;  // a job that must have finished first (a branch's trunk)
  };
  std::vector<Job> jobs;
  // Evaluations use the run config's thread count (train.threads; 0 = all).
  auto threads_of = [&](const SweepRun& r) {
    std::vector<std::string> sets = plan.set;
    sets.insert(sets.end(), r.set.begin(), r.set.end());
    return std::to_string(load_config(plan.base, sets).train.threads);
  };
  // Runs trained from scratch first, then the branches of budget_reuse, each
  // after its trunk (the same seed's largest budget) has finished.
  std::map<std::string, size_t> train_job;  // "run seed" -> its job
  for (int branches : {0, 1})
    for (const auto& r : plan.runs) {
      if (r.branch_of.empty() == (branches == 1)) continue;
      for (uint64_t seed : r.seeds) {
        const std::string dir = plan.run_dir(r.name, seed);
        Job job{
            "train " + r.name + " seed " + std::to_string(seed), {gpt, "train"}, fs::path(dir) / "extrapolation.json"};
        if (fs::exists(fs::path(dir) / "checkpoints" / "latest")) {
          job.argv.insert(job.argv.end(), {"--resume", dir});
        } else {
          job.argv.push_back(plan.base);
          std::vector<std::string> sets = plan.set;
          sets.insert(sets.end(), r.set.begin(), r.set.end());
          sets.push_back("train.seed=" + std::to_string(seed));
          sets.push_back("run.dir=" + dir);
          for (const auto& s : sets) job.argv.insert(job.argv.end(), {"--set", s});
          if (!r.branch_of.empty()) {
            job.argv.insert(job.argv.end(),
                            {"--resume", checkpoint_path(plan.run_dir(r.branch_of, seed), r.branch_step)});
            job.after = train_job.at(r.branch_of + " " + std::to_string(seed));
          }
        }
        train_job[r.name + " " + std::to_string(seed)] = jobs.size();
        jobs.push_back(job);
      }
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
      if (!e.kl_against.empty()) job.argv.insert(job.argv.end(), {"--kl-against", e.kl_against});
      if (!e.longppl.empty()) job.argv.insert(job.argv.end(), {"--longppl-evaluator", e.longppl});
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
                        {gpt, "eval", dir, "--threads", threads_of(r), "--task", "text_passkey", "--passkey-depths",
                         depths, "--passkey-samples", std::to_string(plan.passkey_samples), "--out", out.string()},
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
  struct sigaction ignore {
  }, old{};
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
        spdlog::info("sweep [{}/{}] {}: done ({} exists), skipped", i + 1, jobs.size(), job.what, job.done.string());
        continue;
      }
      if (dry_run) {
        spdlog::info("sweep [{}/{}] {}: {}", i + 1, jobs.size(), job.what, quoted(job.argv));
        continue;
      }
      if (job.after)  // a branch waits for its trunk's checkpoint
        while (!interrupted &&
               std::any_of(running.begin(), running.end(), [&](const auto& r) { return r.second == *job.after; }))
          reap();
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

}  // namespace gpt
