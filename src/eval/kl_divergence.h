// KL divergence at 1× against a reference model (docs/evaluation.md, "KL
// at 1×"): a context-extension method should leave the model unchanged
// inside its training context, and this measures by how much it does not,
// as llama.cpp's `perplexity --kl-divergence` measures a quantised model
// against the original. On the scored positions of the evaluation layout at
// context T (the same tokens the 1× loss scores), with p the reference's
// next-token distribution and q the evaluated model's:
//   KL(p ‖ q) = Σ_v p_v (ln p_v − ln q_v)   (nats, per position)
//   same top: argmax p = argmax q
//   Δp = q(target) − p(target)
// Means with standard errors over the layout's windows (ratio estimators,
// as the loss), and KL's median, 99th percentile and maximum over positions.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/shard.h"
#include "eval/extrapolation.h"
#include "model/gpt.h"

namespace gpt {

struct KlResult {
  int context = 0;     // T
  int64_t tokens = 0;  // positions compared
  double kl = 0, kl_se = 0, kl_median = 0, kl_p99 = 0, kl_max = 0;
  double same_top = 0, same_top_se = 0;  // share of positions
  double dp = 0, dp_se = 0, dp_rms = 0;  // Δp, its standard error and root mean square
  std::string reference;                 // what the reference was (for reports)
  nlohmann::json to_json() const;
  std::string table() const;
};

// One position's comparison from the two models' logits over the same V
// entries (double arithmetic): KL(p ‖ q), whether the argmaxes agree (ties:
// the lower id), and q(target) − p(target).
struct KlPosition {
  double kl = 0;
  bool same_top = false;
  double dp = 0;
};
KlPosition compare_logits(const float* ref, const float* test, size_t V, int32_t target);

// model against reference over the pieces of `layout` at context T. Both
// models must share the vocabulary (refused otherwise, naming both sizes).
// Holds the reference's logits of one sequence on the host (T·V floats).
KlResult evaluate_kl(Model<float>& model, Model<float>& reference, const TokenStream& val, const EvalLayout& layout,
                     int T);

}  // namespace gpt
