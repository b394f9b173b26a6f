#include "probe/force_probe.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "config/attention.h"
#include "config/config.h"
#include "core/check.h"
#include "core/files.h"
#include "core/json.h"
#include "core/metrics.h"
#include "data/loader.h"
#include "data/rng.h"
#include "eval/force_fit.h"
#include "model/gpt.h"
#include "train/model_io.h"
#include "train/optimizer.h"

namespace gpt {

namespace fs = std::filesystem;

std::vector<ProbePoint> probe_points(const std::string& rows_path, int window, int64_t sequences) {
  std::vector<ProbePoint> out;
  int64_t seq = -1;
  int k = 0;  // the record's listed position within its sequence: tokens 1 + 2k (x) and 2 + 2k (y)
  for_each_orbit_record(rows_path, [&](const OrbitRecord& r) {
    if (r.sequence != seq) {
      GPT_CHECK(r.sequence == seq + 1, rows_path, ": records of sequence ", r.sequence, " follow sequence ", seq,
                "; a rows file lists its sequences in order");
      seq = r.sequence, k = 0;
    }
    if (sequences >= 0 && seq >= sequences) return false;
    const int token = 2 + 2 * k++;
    // Not the star's row (no separation of its own), nor past the window.
    if (r.r != 0 && token < window) out.push_back({seq, token, r.r, r.mass, r.star_mass, std::hypot(r.fx, r.fy)});
    return true;
  });
  return out;
}

std::vector<char> choose_labels(const std::vector<ProbePoint>& points, int full, int sparse, int per_sequence,
                                uint64_t seed) {
  std::vector<char> label(points.size(), 0);
  for (size_t i = 0; i < points.size();) {
    size_t j = i;
    while (j < points.size() && points[j].sequence == points[i].sequence) ++j;
    const int64_t s = points[i].sequence;
    if (s < full) {
      std::fill(label.begin() + i, label.begin() + j, 1);
    } else if (s < full + sparse) {
      // per_sequence of the sequence's points, by a partial Fisher-Yates
      // shuffle from a generator of its own (seed, sequence).
      std::vector<size_t> idx(j - i);
      for (size_t t = 0; t < idx.size(); ++t) idx[t] = i + t;
      Rng rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(s) + 1);
      const size_t take = std::min(idx.size(), static_cast<size_t>(per_sequence));
      for (size_t t = 0; t < take; ++t) {
        const size_t u = t + static_cast<size_t>(rng.uniform() * static_cast<double>(idx.size() - t));
        std::swap(idx[t], idx[std::min(u, idx.size() - 1)]);
        label[idx[t]] = 1;
      }
    }
    i = j;
  }
  return label;
}

namespace {

std::atomic<bool> g_probe_interrupted{false};
extern "C" void on_probe_sigint(int) { g_probe_interrupted.store(true); }

nlohmann::json fit_json(const PowerLawFit& f) {
  nlohmann::json j = {{"n", f.n}, {"rmse_log", f.rmse_log}};
  const char* names[4] = {"lnC", "a", "b", "c"};
  for (int i = 0; i < 4; ++i)
    j[names[i]] = {{"value", f.coef[i]}, {"se", f.se[i]}, {"lo95", f.lo[i]}, {"hi95", f.hi[i]}};
  return j;
}

// ln F of a prediction, NaN where it is not positive (a raw-target model may
// predict 0 or less; the log-space fit leaves those out and says how many).
double log_or_nan(double f) { return f > 0 ? std::log(f) : std::numeric_limits<double>::quiet_NaN(); }

// Mean of the squared differences of ln F over the points where both are
// finite, and Pearson's correlation of the logs there.
std::pair<double, double> log_agreement(const std::vector<double>& pred, const std::vector<ProbePoint>& pts) {
  double n = 0, sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0, sq = 0;
  for (size_t i = 0; i < pts.size(); ++i) {
    const double x = log_or_nan(pred[i]), y = std::log(pts[i].force);
    if (!std::isfinite(x)) continue;
    n += 1, sx += x, sy += y, sxx += x * x, syy += y * y, sxy += x * y, sq += (x - y) * (x - y);
  }
  if (n < 2) return {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  const double cov = sxy - sx * sy / n, vx = sxx - sx * sx / n, vy = syy - sy * sy / n;
  return {std::sqrt(sq / n), cov / std::sqrt(vx * vy)};
}

// The power law of the positive predictions (none: an empty fit with n = 0
// and the reason).
nlohmann::json fit_predictions(const std::vector<double>& pred, const std::vector<ProbePoint>& pts) {
  std::vector<ForceSample> samples;
  for (size_t i = 0; i < pts.size(); ++i)
    if (pred[i] > 0 && std::isfinite(pred[i])) samples.push_back({pts[i].r, pts[i].m1, pts[i].m2, pred[i]});
  nlohmann::json j;
  try {
    j = fit_json(fit_power_law(samples));
  } catch (const Error& e) {
    j = {{"n", samples.size()}, {"error", e.what()}};
  }
  j["non_positive"] = pts.size() - samples.size();
  const auto [rmse, corr] = log_agreement(pred, pts);
  j["rmse_log_vs_truth"] = rmse;
  j["corr_log_vs_truth"] = corr;
  return j;
}

}  // namespace

int run_force_probe(const ForceProbeOptions& opt) {
  GPT_CHECK(opt.target == "log" || opt.target == "raw", "probe force: --target must be log or raw, not \"",
            opt.target, "\"");
  GPT_CHECK(opt.steps >= 0 && opt.batch >= 1 && opt.lr > 0 && opt.knn >= 1 && opt.eval_sequences >= 1 &&
                opt.labelled_sequences >= 0 && opt.sparse_sequences >= 0 && opt.sparse_points >= 1 &&
                opt.labelled_sequences + opt.sparse_sequences >= 1,
            "probe force: --steps >= 0, --batch, --lr, --knn, --eval-sequences, --sparse-points >= 1 and "
            "--labelled-sequences + --sparse-sequences >= 1 are needed");
  if (opt.threads > 0) omp_set_num_threads(opt.threads);
  const auto t0 = std::chrono::steady_clock::now();

  // The model: a pretrained one gets a fresh head; a probe's own checkpoint
  // (it has the head) continues with its optimizer and step.
  const std::string ckpt_path = resolve_checkpoint(opt.from);
  CheckpointReader reader(ckpt_path);
  Config cfg = checkpoint_config(reader.meta(), ckpt_path);
  const bool resume = cfg.model.regression_outputs > 0;
  GPT_CHECK(!resume || cfg.model.regression_outputs == 1, "probe force: ", ckpt_path, " has a regression head of ",
            cfg.model.regression_outputs, " outputs; the force probe predicts one (the magnitude)");
  cfg.model.regression_outputs = 1;
  if (!opt.device.empty()) cfg.run.device = opt.device;
  const ModelConfig& mc = cfg.model;

  // The data: the metadata of gpt data orbits, its shards and rows.
  const fs::path data(opt.data);
  const fs::path meta_path = data / "orbits.json";
  GPT_CHECK(fs::exists(meta_path), "probe force: ", opt.data,
            " has no orbits.json; make the data with gpt data orbits DIR --max-planets 1 (two-body systems, as the "
            "source's force task)");
  const nlohmann::json meta = read_json_file(meta_path.string(), "probe force: the orbits metadata");
  const std::string name = meta.value("name", std::string("orbits"));
  const int per_seq = meta.at("tokens_per_sequence").get<int>();
  GPT_CHECK(meta.at("vocab_size").get<int>() == mc.vocab_size, "probe force: the data's vocabulary (",
            meta.at("vocab_size").get<int>(), " ids, ", meta_path.string(), ") is not the model's (", mc.vocab_size,
            "); probe a model pretrained on orbits of the same --bins");
  const int W = opt.window > 0 ? opt.window : mc.context;
  GPT_CHECK(W >= 3 && W <= per_seq, "probe force: --window ", W, " must be in [3, ", per_seq,
            "] (a sequence's tokens)");
  GPT_CHECK(mc.position != "learned" || W <= mc.position_rows(), "probe force: --window ", W,
            " exceeds the learned position table (", mc.position_rows(), " rows)");
  const std::string train_base = (data / (name + "_train_000001")).string();
  const std::string val_base = (data / (name + "_val_000000")).string();
  const TokenStream train_tokens(train_base + ".bin", mc.vocab_size), val_tokens(val_base + ".bin", mc.vocab_size);
  const int64_t train_seqs = static_cast<int64_t>(train_tokens.size() / per_seq);
  const int64_t val_seqs = static_cast<int64_t>(val_tokens.size() / per_seq);
  const int64_t used = static_cast<int64_t>(opt.labelled_sequences) + opt.sparse_sequences;
  GPT_CHECK(used <= train_seqs, "probe force: --labelled-sequences + --sparse-sequences = ", used, " but ",
            train_base, ".bin holds ", train_seqs, " sequences");
  GPT_CHECK(opt.eval_sequences <= val_seqs, "probe force: --eval-sequences ", opt.eval_sequences, " but ", val_base,
            ".bin holds ", val_seqs, " sequences");
  const std::vector<ProbePoint> train_pts = probe_points(train_base + ".rows", W, used);
  const std::vector<ProbePoint> eval_pts = probe_points(val_base + ".rows", W, opt.eval_sequences);
  const std::vector<char> labelled =
      choose_labels(train_pts, opt.labelled_sequences, opt.sparse_sequences, opt.sparse_points, opt.seed);
  // Targets: ln F standardised by the labelled points' mean and sd (log), or F.
  double mu = 0, sd = 1;
  size_t n_labels = 0;
  if (opt.target == "log") {
    double s = 0, s2 = 0;
    for (size_t i = 0; i < train_pts.size(); ++i)
      if (labelled[i]) {
        const double v = std::log(train_pts[i].force);
        s += v, s2 += v * v, ++n_labels;
      }
    GPT_CHECK(n_labels >= 2, "probe force: fewer than 2 labelled planet points within the window of ", W, " tokens");
    mu = s / n_labels;
    sd = std::sqrt(std::max(s2 / n_labels - mu * mu, 1e-12));
  } else {
    for (char l : labelled) n_labels += l;
    GPT_CHECK(n_labels >= 1, "probe force: no labelled planet point within the window of ", W, " tokens");
  }
  auto encode = [&](double f) { return opt.target == "log" ? (std::log(f) - mu) / sd : f; };
  auto decode = [&](double y) { return opt.target == "log" ? std::exp(mu + sd * y) : y; };
  // Per training sequence: (token, target) of its labelled points.
  std::vector<std::vector<std::pair<int, float>>> labels_of(static_cast<size_t>(used));
  for (size_t i = 0; i < train_pts.size(); ++i)
    if (labelled[i])
      labels_of[train_pts[i].sequence].push_back({train_pts[i].token, static_cast<float>(encode(train_pts[i].force))});
  std::vector<int64_t> pool;  // the sequences with labels
  for (int64_t s = 0; s < used; ++s)
    if (!labels_of[s].empty()) pool.push_back(s);

  // The run directory.
  fs::create_directories(opt.out);
  DirLock lock(opt.out, "probe");
  const AttentionSpec attn = resolve_attention(cfg);
  std::unique_ptr<Model<float>> model = make_model(mc, attn, cfg.run.device, cfg.run.precision, cfg.run.storage);
  TrainConfig tc = cfg.train;
  tc.optimizer = "adamw";
  tc.lr = opt.lr;
  tc.weight_decay = opt.weight_decay;
  tc.grad_clip = opt.grad_clip;
  tc.seed = opt.seed;
  cfg.train = tc;
  Optimizer<float> adam(*model, tc);
  int step = 0;
  if (resume) {
    restore_checkpoint(reader, *model, &adam);
    step = checkpoint_progress(reader.meta(), ckpt_path).step;
    spdlog::info("probe force: continuing {} at step {}", ckpt_path, step);
  } else {
    model->init(opt.seed);
    const InitFromSummary init = init_from_checkpoint(*model, ckpt_path);
    std::string fresh;
    for (const auto& k : init.kept) fresh += (fresh.empty() ? "" : ", ") + k;
    spdlog::info("probe force: {} tensors from {}; fresh: {}", init.copied.size(), ckpt_path, fresh);
  }
  const nlohmann::json probe_json = {
      {"from", ckpt_path},      {"data", opt.data},
      {"steps", opt.steps},     {"lr", opt.lr},
      {"batch", opt.batch},     {"weight_decay", opt.weight_decay},
      {"grad_clip", opt.grad_clip},
      {"labelled_sequences", opt.labelled_sequences},
      {"sparse_sequences", opt.sparse_sequences},
      {"sparse_points", opt.sparse_points},
      {"target", opt.target},   {"window", W},
      {"eval_sequences", opt.eval_sequences},
      {"knn", opt.knn},         {"seed", opt.seed},
      {"labelled_points", n_labels},
      {"target_mean", mu},      {"target_sd", sd}};
  write_json_file((fs::path(opt.out) / "config.json").string(), config_to_json(cfg));
  write_json_file((fs::path(opt.out) / "probe.json").string(), probe_json);
  MetricsLog metrics((fs::path(opt.out) / "metrics.jsonl").string(), resume);
  spdlog::info(
      "probe force: {} labelled points on {} training sequences ({} fully, {} with {} each), windows of {} tokens, "
      "target {}, {} steps of {} sequences, lr {:.3g}; {} validation points to predict",
      n_labels, pool.size(), opt.labelled_sequences, opt.sparse_sequences, opt.sparse_points, W, opt.target,
      opt.steps, opt.batch, opt.lr, eval_pts.size());

  // Fine-tuning: batch `step` is a function of (seed, step) alone, so a run
  // continued from a checkpoint draws what the uninterrupted one would.
  const int B = opt.batch;
  std::vector<int32_t> tokens(static_cast<size_t>(B) * W);
  std::vector<float> targets(static_cast<size_t>(B) * W);
  auto save = [&](int at) {
    TrainProgress progress;
    progress.step = at;
    save_run_checkpoint(opt.out, at, make_checkpoint(*model, &adam, cfg, progress));
  };
  g_probe_interrupted.store(false);
  auto previous = std::signal(SIGINT, on_probe_sigint);
  bool interrupted = false;
  const auto train_start = std::chrono::steady_clock::now();
  const int first = step;
  for (; step < opt.steps; ++step) {
    Rng rng(opt.seed * 0xD1B54A32D192ED03ull + static_cast<uint64_t>(step) + 1);
    std::fill(targets.begin(), targets.end(), std::numeric_limits<float>::quiet_NaN());
    for (int b = 0; b < B; ++b) {
      const int64_t s = pool[std::min(pool.size() - 1, static_cast<size_t>(rng.uniform() * pool.size()))];
      train_tokens.read(static_cast<uint64_t>(s) * per_seq, W, tokens.data() + static_cast<size_t>(b) * W);
      for (const auto& [tok, y] : labels_of[s]) targets[static_cast<size_t>(b) * W + tok] = y;
    }
    model->zero_grad();
    const double loss = model->forward_regression(tokens.data(), targets.data(), B, W);
    GPT_CHECK(std::isfinite(loss), "probe force: the loss is not finite at step ", step + 1);
    model->backward();
    const double norm = adam.clip(tc.grad_clip);
    adam.step(tc.lr);
    if ((step + 1) % opt.log_every == 0 || step + 1 == opt.steps || step == first) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - train_start).count();
      const double per = elapsed / (step + 1 - first);
      metrics.write({{"event", "train"}, {"step", step + 1}, {"loss", loss}, {"grad_norm", norm}, {"lr", tc.lr}});
      spdlog::info("probe step {}/{}: loss {:.4f}, grad norm {:.3f}, {:.2f} s/step, about {:.0f} s left", step + 1,
                   opt.steps, loss, norm, per, per * (opt.steps - step - 1));
    }
    if (g_probe_interrupted.load()) {
      interrupted = true;
      ++step;
      break;
    }
  }
  std::signal(SIGINT, previous);
  save(step);
  if (interrupted) {
    spdlog::warn("probe force: interrupted at step {}; saved {}; run again with --from {} to go on", step,
                 checkpoint_path(opt.out, step), opt.out);
    return 130;
  }

  // Predictions on the held-out systems' planet points.
  std::vector<double> pred(eval_pts.size());
  {
    std::vector<float> out;
    size_t next = 0;
    for (int64_t s0 = 0; s0 < opt.eval_sequences; s0 += B) {
      const int nb = static_cast<int>(std::min<int64_t>(B, opt.eval_sequences - s0));
      std::vector<int32_t> toks(static_cast<size_t>(nb) * W);
      for (int b = 0; b < nb; ++b)
        val_tokens.read(static_cast<uint64_t>(s0 + b) * per_seq, W, toks.data() + static_cast<size_t>(b) * W);
      model->forward_regression_outputs(toks.data(), nb, W, out);
      for (; next < eval_pts.size() && eval_pts[next].sequence < s0 + nb; ++next)
        pred[next] = decode(out[static_cast<size_t>(eval_pts[next].sequence - s0) * W + eval_pts[next].token]);
    }
  }
  // The oracle: the mean true force of the k nearest labelled training
  // points in (ln r, ln m1, ln m2).
  std::vector<ForceSample> oracle_train, queries;
  for (size_t i = 0; i < train_pts.size(); ++i)
    if (labelled[i]) oracle_train.push_back({train_pts[i].r, train_pts[i].m1, train_pts[i].m2, train_pts[i].force});
  for (const ProbePoint& p : eval_pts) queries.push_back({p.r, p.m1, p.m2, p.force});
  const std::vector<double> oracle = nearest_neighbour_forces(oracle_train, queries, opt.knn);
  std::vector<double> truth(eval_pts.size());
  for (size_t i = 0; i < eval_pts.size(); ++i) truth[i] = eval_pts[i].force;

  {
    std::ofstream csv(fs::path(opt.out) / "predictions.csv");
    GPT_CHECK(csv, "probe force: cannot write ", (fs::path(opt.out) / "predictions.csv").string());
    csv.precision(10);
    csv << "sequence,token,r,m1,m2,force,model,oracle\n";
    for (size_t i = 0; i < eval_pts.size(); ++i) {
      const ProbePoint& p = eval_pts[i];
      csv << p.sequence << ',' << p.token << ',' << p.r << ',' << p.m1 << ',' << p.m2 << ',' << p.force << ','
          << pred[i] << ',' << oracle[i] << '\n';
    }
    GPT_CHECK(csv, "probe force: writing predictions.csv failed");
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const nlohmann::json results = {{"probe", probe_json},
                                   {"attention", cfg.attention.preset},
                                   {"points", eval_pts.size()},
                                   {"model", fit_predictions(pred, eval_pts)},
                                   {"oracle", fit_predictions(oracle, eval_pts)},
                                   {"truth", fit_predictions(truth, eval_pts)},
                                   {"wall_seconds", wall}};
  write_json_file((fs::path(opt.out) / "results.json").string(), results);
  auto line = [&](const char* who, const nlohmann::json& j) {
    if (!j.contains("a")) {
      spdlog::info("  {:<7} no fit: {}", who, j.value("error", std::string("?")));
      return;
    }
    spdlog::info("  {:<7} a = {:+.3f} [{:+.3f}, {:+.3f}]  b = {:+.3f} [{:+.3f}, {:+.3f}]  c = {:+.3f} [{:+.3f}, "
                 "{:+.3f}]  rmse(ln F) {:.3f}",
                 who, j["a"]["value"].get<double>(), j["a"]["lo95"].get<double>(), j["a"]["hi95"].get<double>(),
                 j["b"]["value"].get<double>(), j["b"]["lo95"].get<double>(), j["b"]["hi95"].get<double>(),
                 j["c"]["value"].get<double>(), j["c"]["lo95"].get<double>(), j["c"]["hi95"].get<double>(),
                 j["rmse_log_vs_truth"].get<double>());
  };
  spdlog::info("probe force: F = C m1^a m2^b r^c fitted on {} held-out planet points (Newton: a = b = 1, c = -2):",
               eval_pts.size());
  line("model", results["model"]);
  line("oracle", results["oracle"]);
  line("truth", results["truth"]);
  spdlog::info("probe force: {}/results.json, predictions.csv ({:.0f} s)", opt.out, wall);
  return 0;
}

}  // namespace gpt
