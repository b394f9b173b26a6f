// Length-extrapolation evaluation: the validation loss of a model trained at
// context T, measured at contexts m·T for each multiple m. Every multiple sees
// the same validation tokens: eval.tokens (rounded down) taken as windows of
// the longest context spread evenly over the validation stream, each window
// cut into non-overlapping sequences of m·T.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "data/shard.h"
#include "model/gpt.h"

namespace gpt {

struct MultipleResult {
  int multiple = 1;
  int context = 0;             // m·T
  int64_t sequences = 0;
  int64_t tokens = 0;          // positions scored
  double loss = 0;             // mean over all positions
  double loss_past_train = 0;  // mean over positions >= T (NaN when m == 1)
  std::vector<double> profile; // mean loss per bucket of positions
  // Attention diagnostics, sums over rows: (n_layer, n_head, kAttentionDiagStats)
  // as GPT::collect_attention_diagnostics accumulates them.
  std::vector<double> attention_diag;
};

struct ExtrapolationResult {
  int trained_context = 0;
  int64_t tokens_per_multiple = 0;
  int n_layer = 0, n_head = 0;
  nlohmann::json attention;   // the variant evaluated (set by the caller: config/attention.h)
  std::vector<MultipleResult> rows;
  nlohmann::json to_json() const;
  std::string table() const;  // the human-readable 1×–16× table
  // Entropy, sink and recent-N shares per multiple and layer (means over heads and rows).
  std::string diagnostics_table() const;
};

// Evaluates `model` at each multiple of eval.multiples. batch_tokens bounds the
// tokens of one forward pass (sequences per batch = max(1, batch_tokens / (m·T))).
// Throws if the validation stream is shorter than one sequence at the largest
// multiple, or if learned positions cannot reach the largest context.
ExtrapolationResult evaluate_extrapolation(Model<float>& model, const TokenStream& val, const EvalConfig& eval,
                                           int trained_context, int64_t batch_tokens);

// Throws, naming the cause, when eval.tokens or the validation data cannot
// hold one sequence at the largest multiple. Run before training starts.
void check_eval_feasible(uint64_t val_tokens, const EvalConfig& eval, int trained_context);

// The largest context the eval config asks for, checked against the model's
// position encoding; throws with a clear message when learned positions can't
// reach it.
void check_eval_contexts(const ModelConfig& model, const EvalConfig& eval, int trained_context);

}  // namespace gpt
