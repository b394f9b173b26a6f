#include "eval/kl_divergence.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/check.h"

namespace gpt {

KlPosition compare_logits(const float* ref, const float* test, size_t V, int32_t target) {
  // log-softmax of each row in double: x − max − ln Σ e^(x − max).
  auto log_norm = [&](const float* x, size_t& top) {
    top = static_cast<size_t>(std::max_element(x, x + V) - x);
    const double mx = x[top];
    double z = 0;
    for (size_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(x[v]) - mx);
    return mx + std::log(z);
  };
  size_t top_p = 0, top_q = 0;
  const double lp = log_norm(ref, top_p), lq = log_norm(test, top_q);
  KlPosition r;
  for (size_t v = 0; v < V; ++v) {
    const double a = ref[v] - lp, b = test[v] - lq;  // ln p_v, ln q_v
    r.kl += std::exp(a) * (a - b);
  }
  r.kl = std::max(r.kl, 0.0);  // rounding can leave −1e-17 where p = q
  r.same_top = top_p == top_q;
  r.dp = std::exp(test[target] - lq) - std::exp(ref[target] - lp);
  return r;
}

KlResult evaluate_kl(Model<float>& model, Model<float>& reference, const TokenStream& val, const EvalLayout& layout,
                     int T) {
  const size_t V = static_cast<size_t>(model.config().vocab_size);
  GPT_CHECK(reference.config().vocab_size == model.config().vocab_size, "eval --kl-against: the reference's vocabulary (",
            reference.config().vocab_size, ") is not the model's (", model.config().vocab_size,
            "); KL compares distributions over the same tokens");
  const std::vector<EvalPiece> pieces = eval_pieces(layout, T);
  const size_t K = layout.starts.size();
  std::vector<double> w_kl(K, 0.0), w_top(K, 0.0), w_dp(K, 0.0), w_n(K, 0.0), all_kl;
  double dp2 = 0;
  std::vector<int32_t> inputs(T), targets(T);
  std::vector<float> ref_rows;
  for (const EvalPiece& pc : pieces) {
    val.read_example(pc.start, T, inputs.data(), targets.data());
    ref_rows.assign(static_cast<size_t>(T) * V, 0.f);
    reference.forward_logits(inputs.data(), 1, T, [&](size_t first, size_t rows, const float* logits) {
      std::copy_n(logits, rows * V, ref_rows.data() + first * V);
    });
    model.forward_logits(inputs.data(), 1, T, [&](size_t first, size_t rows, const float* logits) {
      for (size_t n = 0; n < rows; ++n) {
        const int t = static_cast<int>(first + n);
        if (t < pc.lo || t >= pc.hi || targets[t] == kIgnoreTarget) continue;
        const KlPosition c = compare_logits(ref_rows.data() + static_cast<size_t>(t) * V, logits + n * V, V, targets[t]);
        w_kl[pc.window] += c.kl;
        w_top[pc.window] += c.same_top;
        w_dp[pc.window] += c.dp;
        w_n[pc.window] += 1;
        dp2 += c.dp * c.dp;
        all_kl.push_back(c.kl);
      }
    });
  }
  GPT_CHECK(!all_kl.empty(), "eval --kl-against: no position was scored");
  KlResult r;
  r.context = T;
  r.tokens = static_cast<int64_t>(all_kl.size());
  double n = 0, kl = 0, top = 0, dp = 0;
  for (size_t k = 0; k < K; ++k) n += w_n[k], kl += w_kl[k], top += w_top[k], dp += w_dp[k];
  r.kl = kl / n, r.same_top = top / n, r.dp = dp / n, r.dp_rms = std::sqrt(dp2 / n);
  r.kl_se = ratio_standard_error(w_kl, w_n);
  r.same_top_se = ratio_standard_error(w_top, w_n);
  r.dp_se = ratio_standard_error(w_dp, w_n);
  // Nearest-rank order statistics: the value at rank ceil(q·n) (1-based).
  std::sort(all_kl.begin(), all_kl.end());
  auto rank = [&](double q) {
    const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(all_kl.size())));
    return all_kl[std::clamp<size_t>(i, 1, all_kl.size()) - 1];
  };
  r.kl_median = rank(0.5), r.kl_p99 = rank(0.99), r.kl_max = all_kl.back();
  return r;
}

nlohmann::json KlResult::to_json() const {
  // Standard errors are NaN with one window: null in JSON.
  auto se = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  return {{"reference", reference}, {"context", context},     {"tokens", tokens},
          {"kl", kl},               {"kl_se", se(kl_se)},     {"kl_median", kl_median},
          {"kl_p99", kl_p99},       {"kl_max", kl_max},       {"same_top", same_top},
          {"same_top_se", se(same_top_se)}, {"dp", dp},      {"dp_se", se(dp_se)},
          {"dp_rms", dp_rms}};
}

std::string KlResult::table() const {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(6);
  os << "KL at 1x (T=" << context << ", " << tokens << " positions) against " << reference << ":\n"
     << "  KL(reference || model)  mean " << kl << " ± " << kl_se << "  median " << kl_median << "  p99 " << kl_p99
     << "  max " << kl_max << " nats\n";
  os.precision(4);
  os << "  same top token         " << 100 * same_top << "% ± " << 100 * same_top_se << "%\n"
     << "  delta p (target)       mean " << 100 * dp << "% ± " << 100 * dp_se << "%  rms " << 100 * dp_rms << "%\n";
  return os.str();
}

}  // namespace gpt
