#include "eval/extrapolation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include <spdlog/spdlog.h>

#include "core/check.h"

namespace gpt {

void check_eval_contexts(const ModelConfig& model, const EvalConfig& eval, int trained_context) {
  if (model.position != "learned") return;
  for (int m : eval.multiples) {
    const int64_t ctx = static_cast<int64_t>(m) * trained_context;
    GPT_CHECK(ctx <= model.position_rows(), "evaluation at ", m, "x the training context (", ctx,
              " tokens) is impossible with learned positions: the position table has ", model.position_rows(),
              " rows. Use position \"rope\" or \"none\", raise model.max_position, or drop that multiple from "
              "eval.multiples");
  }
}

void check_eval_feasible(uint64_t val_tokens, const EvalConfig& eval, int trained_context) {
  const int max_m = *std::max_element(eval.multiples.begin(), eval.multiples.end());
  const int64_t longest = static_cast<int64_t>(max_m) * trained_context;
  GPT_CHECK(eval.tokens >= longest, "eval.tokens = ", eval.tokens, " is less than one sequence at the largest multiple (",
            max_m, "x the context of ", trained_context, " = ", longest, " tokens); raise eval.tokens");
  GPT_CHECK(static_cast<int64_t>(val_tokens) >= longest + 1, "the validation data has ", val_tokens,
            " tokens; evaluating at ", max_m, "x the context of ", trained_context, " needs at least ", longest + 1,
            " (one sequence of ", longest, " tokens plus its last target)");
}

ExtrapolationResult evaluate_extrapolation(Model<float>& model, const TokenStream& val, const EvalConfig& eval,
                                           int trained_context, int64_t batch_tokens) {
  check_eval_contexts(model.config(), eval, trained_context);
  const int T = trained_context;
  const int max_m = *std::max_element(eval.multiples.begin(), eval.multiples.end());
  const int64_t longest = static_cast<int64_t>(max_m) * T;
  // Same tokens at every multiple: a whole number of windows of the longest
  // context, spread evenly over the validation stream (its text need not be
  // homogeneous: a contiguous prefix would measure only its first part).
  check_eval_feasible(val.size(), eval, trained_context);
  const int64_t available = static_cast<int64_t>(val.size()) - 1;
  const int64_t windows = std::min<int64_t>(eval.tokens, available) / longest;
  const int64_t budget = windows * longest;
  const int64_t stride = available / windows;  // >= longest, so windows do not overlap
  if (budget < eval.tokens)
    spdlog::warn("eval: using {} validation tokens per multiple (eval.tokens = {}; rounded down to whole {}-token "
                 "windows / limited by the validation data)",
                 budget, eval.tokens, longest);
  // Start of sequence s at context L: window s / (longest / L), then offset.
  auto sequence_start = [&](int64_t s, int L) {
    const int64_t per_window = longest / L;
    return static_cast<uint64_t>((s / per_window) * stride + (s % per_window) * L);
  };

  ExtrapolationResult res;
  res.trained_context = T;
  res.tokens_per_multiple = budget;
  res.n_layer = model.config().n_layer;
  res.n_head = model.config().n_head;
  std::vector<int32_t> buf;
  std::vector<float> losses;
  for (int m : eval.multiples) {
    const auto t0 = std::chrono::steady_clock::now();
    const int L = m * T;
    if (longest % L != 0)
      spdlog::warn("eval: {}x does not divide the largest multiple {}x, so it scores {} of every {} tokens", m, max_m,
                   longest / L * L, longest);
    const int64_t nseq = windows * (longest / L);
    const int B = static_cast<int>(std::clamp<int64_t>(batch_tokens / L, 1, nseq));
    const int nb = std::min(eval.profile_buckets, L);
    std::vector<double> bucket_sum(nb, 0.0);
    std::vector<int64_t> bucket_n(nb, 0);
    double sum = 0, sum_past = 0;
    int64_t n_past = 0;
    std::vector<int32_t> inputs, targets;
    std::vector<double> diag;
    model.collect_attention_diagnostics(&diag);
    for (int64_t s0 = 0; s0 < nseq; s0 += B) {
      const int b = static_cast<int>(std::min<int64_t>(B, nseq - s0));
      inputs.resize(static_cast<size_t>(b) * L);
      targets.resize(inputs.size());
      buf.resize(L + 1);
      for (int i = 0; i < b; ++i) {
        val.read(sequence_start(s0 + i, L), L + 1, buf.data());
        std::copy(buf.begin(), buf.end() - 1, inputs.begin() + static_cast<size_t>(i) * L);
        std::copy(buf.begin() + 1, buf.end(), targets.begin() + static_cast<size_t>(i) * L);
      }
      model.forward_losses(inputs.data(), targets.data(), b, L, losses);
      for (int i = 0; i < b; ++i)
        for (int t = 0; t < L; ++t) {
          const double l = losses[static_cast<size_t>(i) * L + t];
          sum += l;
          if (t >= T) sum_past += l, ++n_past;
          const int k = static_cast<int>(static_cast<int64_t>(t) * nb / L);
          bucket_sum[k] += l;
          ++bucket_n[k];
        }
    }
    model.collect_attention_diagnostics(nullptr);
    MultipleResult r;
    r.attention_diag = std::move(diag);
    r.multiple = m;
    r.context = L;
    r.sequences = nseq;
    r.tokens = nseq * L;
    r.loss = sum / static_cast<double>(r.tokens);
    r.loss_past_train = n_past ? sum_past / n_past : std::numeric_limits<double>::quiet_NaN();
    for (int k = 0; k < nb; ++k) r.profile.push_back(bucket_sum[k] / bucket_n[k]);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    spdlog::info("eval {:>2}x (context {:>6}): loss {:.4f}  [{} sequences, {:.1f}s]", m, L, r.loss, nseq, secs);
    res.rows.push_back(std::move(r));
  }
  return res;
}

namespace {

// The diagnostics' names, in the order of kAttentionDiagStats after the
// entropy: shares of the sink and of the most recent N keys, total weight.
constexpr const char* kDiagNames[] = {"entropy", "sink", "recent", "mass"};
constexpr int kDiagMeans = 4;  // the fifth stat is the row count

// Mean of stat k over the rows of (layer l, head h); over all heads when h < 0.
double diag_mean(const std::vector<double>& d, int n_head, int l, int h, int k) {
  double sum = 0, rows = 0;
  for (int hh = h < 0 ? 0 : h; hh < (h < 0 ? n_head : h + 1); ++hh) {
    const double* s = d.data() + (static_cast<size_t>(l) * n_head + hh) * kAttentionDiagStats;
    sum += s[k];
    rows += s[kAttentionDiagStats - 1];
  }
  return rows > 0 ? sum / rows : 0.0;
}

nlohmann::json diagnostics_json(const std::vector<double>& d, int n_layer, int n_head) {
  nlohmann::json layers = nlohmann::json::array();
  if (d.size() != static_cast<size_t>(n_layer) * n_head * kAttentionDiagStats) return layers;
  for (int l = 0; l < n_layer; ++l) {
    nlohmann::json layer = {{"layer", l}};
    for (int k = 0; k < kDiagMeans; ++k) {
      nlohmann::json per_head = nlohmann::json::array();
      for (int h = 0; h < n_head; ++h) per_head.push_back(diag_mean(d, n_head, l, h, k));
      layer[kDiagNames[k]] = diag_mean(d, n_head, l, -1, k);
      layer[std::string(kDiagNames[k]) + "_per_head"] = per_head;
    }
    layers.push_back(layer);
  }
  return layers;
}

}  // namespace

nlohmann::json ExtrapolationResult::to_json() const {
  nlohmann::json rows_json = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json profile = nlohmann::json::array();
    const int nb = static_cast<int>(r.profile.size());
    for (int k = 0; k < nb; ++k)
      profile.push_back({{"start", static_cast<int64_t>(k) * r.context / nb},
                         {"end", static_cast<int64_t>(k + 1) * r.context / nb},
                         {"loss", r.profile[k]}});
    rows_json.push_back({{"multiple", r.multiple},
                         {"context", r.context},
                         {"sequences", r.sequences},
                         {"tokens", r.tokens},
                         {"loss", r.loss},
                         {"loss_past_train", std::isnan(r.loss_past_train) ? nlohmann::json(nullptr)
                                                                           : nlohmann::json(r.loss_past_train)},
                         {"profile", profile},
                         {"attention_diagnostics", diagnostics_json(r.attention_diag, n_layer, n_head)}});
  }
  return {{"trained_context", trained_context},
          {"tokens_per_multiple", tokens_per_multiple},
          {"attention", attention},
          {"multiples", rows_json}};
}

std::string ExtrapolationResult::diagnostics_table() const {
  std::string out;
  char cell[64];
  const char* titles[] = {"entropy (nats)", "sink share", "recent-N share"};
  for (int k = 0; k < 3; ++k) {
    out += std::string(titles[k]) + " by layer:\n";
    for (const auto& r : rows) {
      std::snprintf(cell, sizeof cell, "  %-5s", (std::to_string(r.multiple) + "x").c_str());
      out += cell;
      if (r.attention_diag.size() == static_cast<size_t>(n_layer) * n_head * kAttentionDiagStats)
        for (int l = 0; l < n_layer; ++l) {
          std::snprintf(cell, sizeof cell, " %7.3f", diag_mean(r.attention_diag, n_head, l, -1, k));
          out += cell;
        }
      out += "\n";
    }
  }
  return out;
}

std::string ExtrapolationResult::table() const {
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "%-9s %8s %10s %12s %12s\n", "multiple", "context", "loss", "loss past T",
                "last bucket");
  out += line;
  for (const auto& r : rows) {
    char past[32] = "-";
    if (!std::isnan(r.loss_past_train)) std::snprintf(past, sizeof past, "%.4f", r.loss_past_train);
    std::snprintf(line, sizeof line, "%-9s %8d %10.4f %12s %12.4f\n", (std::to_string(r.multiple) + "x").c_str(),
                  r.context, r.loss, past, r.profile.empty() ? 0.0 : r.profile.back());
    out += line;
  }
  return out;
}

}  // namespace gpt
