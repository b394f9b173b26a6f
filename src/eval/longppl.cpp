#include "eval/longppl.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "core/check.h"

namespace gpt {

namespace {

// Per-token losses of `model` on the sequence of n tokens from `start`
// (targets from start + 1); positions a loss mask does not score are NaN.
std::vector<float> sequence_losses(Model<float>& model, const TokenStream& val, uint64_t start, int n) {
  std::vector<int32_t> in(n), tg(n);
  val.read_example(start, n, in.data(), tg.data());
  std::vector<float> losses;
  model.forward_losses(in.data(), tg.data(), 1, n, losses);
  for (int t = 0; t < n; ++t)
    if (tg[t] == kIgnoreTarget) losses[t] = std::numeric_limits<float>::quiet_NaN();
  return losses;
}

}  // namespace

KeyTokens select_key_tokens(Model<float>& evaluator, const TokenStream& val, const EvalLayout& layout, int T,
                            int long_context, double alpha, double beta) {
  GPT_CHECK(layout.protocol != "sliding", "LongPPL: the key tokens are judged on windows read from their start "
            "(protocols chunks and documents), not on eval.protocol sliding");
  GPT_CHECK(long_context >= T && long_context <= layout.span, "LongPPL: the long context ", long_context,
            " must lie between the training context ", T, " and the window eval.span = ", layout.span);
  KeyTokens key;
  key.span = layout.span;
  key.alpha = alpha, key.beta = beta;
  key.long_context = long_context;
  key.short_context = T;
  key.short_stride = (T + 1) / 2;
  const int64_t span = layout.span, S = key.short_stride;
  key.mask.assign(layout.starts.size() * static_cast<size_t>(span), 0);
  std::vector<float> long_loss(span), short_loss(span);
  for (size_t k = 0; k < layout.starts.size(); ++k) {
    const uint64_t w0 = layout.starts[k];
    std::fill(long_loss.begin(), long_loss.end(), std::numeric_limits<float>::quiet_NaN());
    for (int64_t s0 = 0; s0 + long_context <= span; s0 += long_context) {
      const std::vector<float> l = sequence_losses(evaluator, val, w0 + s0, long_context);
      std::copy(l.begin(), l.end(), long_loss.begin() + s0);
    }
    // Short: block [b0, b0 + S) scored in the sequence of min(T, b0 + S) tokens ending with it.
    for (int64_t b0 = 0; b0 < span; b0 += S) {
      const int64_t end = std::min(span, b0 + S), from = std::max<int64_t>(0, end - T);
      const std::vector<float> l = sequence_losses(evaluator, val, w0 + from, static_cast<int>(end - from));
      std::copy(l.begin() + (b0 - from), l.end(), short_loss.begin() + b0);
    }
    for (int64_t j = 0; j < span; ++j) {
      const double lo = long_loss[j], sh = short_loss[j];
      if (!std::isfinite(lo) || !std::isfinite(sh)) continue;
      ++key.candidates;
      // LSD = (−lo) − (−sh) > α and LCL = −lo > β
      if (sh - lo > alpha && -lo > beta) {
        key.mask[k * static_cast<size_t>(span) + static_cast<size_t>(j)] = 1;
        ++key.count;
      }
    }
  }
  spdlog::info("LongPPL: {} key tokens of {} judged ({:.2f}%), long context {}, short {} (blocks of {})", key.count,
               key.candidates, 100.0 * key.count / std::max<int64_t>(1, key.candidates), long_context, T, S);
  return key;
}

nlohmann::json KeyTokens::to_json() const {
  return {{"evaluator", evaluator}, {"alpha", alpha},           {"beta", beta},
          {"long_context", long_context}, {"short_context", short_context}, {"short_stride", short_stride},
          {"key_tokens", count},   {"judged", candidates}};
}

}  // namespace gpt
