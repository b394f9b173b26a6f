// Length-extrapolation evaluation: the validation loss of a model trained at
// context T, measured at contexts m·T for each multiple m. The scored tokens
// are fixed by the validation set and three recorded settings, never by which
// multiples are asked: eval.tokens / eval.span windows of eval.span tokens
// (default 16·T), spread evenly over the validation stream (protocols chunks
// and sliding) or opening its longest documents (protocol documents). At
// multiple m every window is cut into non-overlapping sequences of m·T
// (chunks, documents) or scored by sliding windows of m·T advanced by
// eval.stride (sliding). Per multiple: the mean loss, its standard error over
// the windows, bits per byte where the tokenizer is known, and the per-position
// profile.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "data/shard.h"
#include "model/gpt.h"
#include "tokenizer/tokenizer.h"

namespace gpt {

// Where the scored tokens lie. Window k scores targets start[k] + 1 ..
// start[k] + span (inputs from start[k]); under `documents` start[k] is the
// end-of-text token that opens a document holding at least span tokens.
struct EvalLayout {
  std::string protocol = "chunks";
  int64_t span = 0;
  int stride = 0;  // sliding only (0 otherwise)
  uint64_t validation_tokens = 0;
  std::vector<uint64_t> starts;
  int64_t documents = -1;  // documents: how many qualify in the stream (-1 otherwise)
  // Two results scored the same tokens the same way exactly when these agree.
  nlohmann::json to_json() const;
};

// What the tokenizer of the shards tells the evaluation: the bytes of each id
// (end-of-text counts 0: it is no text) for bits per byte, and the
// end-of-text id that separates documents.
struct EvalText {
  std::string tokenizer;        // its spec
  std::vector<uint32_t> bytes;  // per id; empty: bits per byte unknown
  int32_t separator = -1;
};
// From a tokenizer spec (data.tokenizer); throws gpt::Error naming it when it
// cannot be loaded or when its vocabulary is not the model's vocab_size.
// above_text (a run mixing a synthetic task, data.mix_task): the model's
// vocabulary may exceed the tokenizer's by the task's ids, which validation
// text does not hold (they count 0 bytes).
EvalText eval_text(const std::string& tokenizer_spec, int vocab_size, bool above_text = false);
EvalText eval_text(const Tokenizer& tok);
// eval_text, or, when the tokenizer cannot be loaded, none (with a warning
// naming the cause: bits per byte are left out). The documents protocol
// cannot run without it: then the error is thrown, naming eval.protocol.
std::optional<EvalText> load_eval_text(const std::string& tokenizer_spec, int vocab_size, const EvalConfig& eval,
                                       bool above_text = false);

// The windows of eval over val (separator: the end-of-text id, needed by the
// documents protocol). Throws, naming the cause, when the stream cannot hold
// one window, and under `documents` when fewer documents hold a whole span
// than eval.tokens / span asks (saying how many it found). On a stream with
// loss masks the chunks and sliding windows start at multiples of
// trained_context (where synthetic examples begin).
EvalLayout eval_layout(const TokenStream& val, const EvalConfig& eval, int trained_context, int32_t separator);

// One piece of the evaluation at context L: the sequence read from `start`
// (L inputs, L targets) and the positions [lo, hi) of it that are scored, for
// window `window` of the layout.
struct EvalPiece {
  uint64_t start = 0;
  int lo = 0, hi = 0;
  int window = 0;
};
// The pieces at context L: chunks and documents cut each window into
// floor(span / L) sequences scored whole; llamacpp cuts them so too but
// scores positions L/2 .. L − 2 of each (llama.cpp's perplexity, whose
// scored tokens therefore differ by multiple); sliding scores each window in
// blocks of S, each block the last positions of a sequence of L that ends
// with it (the window's first block reaches back before the window when the
// stream allows, else it is the stream's first L tokens, scored whole), so
// every scored token sees at least L - S tokens of context except in the
// stream's first L tokens, and every token of every window is scored once.
std::vector<EvalPiece> eval_pieces(const EvalLayout& layout, int L);

// sqrt of the ratio estimator's variance: the standard error of
// sum(num) / sum(den) over the units k (num[k], den[k]); NaN with fewer than
// two units. With equal den it is the sample sd of num[k]/den[k] over √n.
double ratio_standard_error(const std::vector<double>& num, const std::vector<double>& den);

struct MultipleResult {
  int multiple = 1;
  int context = 0;             // m·T
  int64_t sequences = 0;       // forward sequences of m·T
  int64_t tokens = 0;          // positions scored
  double loss = 0;             // mean over all positions
  double loss_se = 0;          // its standard error over the windows (NaN with one window)
  double loss_past_train = 0;  // mean over positions >= T (NaN when m == 1)
  int64_t bytes = 0;           // bytes of the scored targets (0: tokenizer unknown)
  double bits_per_byte = 0;    // total loss / (ln 2 · bytes) (NaN: unknown)
  double bits_per_byte_se = 0;
  std::vector<double> window_losses;  // mean loss per window of the layout
  // LongPPL (eval/longppl.h), with key tokens only: the mean loss over the key
  // tokens scored here, its standard error over the windows, their count;
  // LongPPL = exp(key_loss).
  int64_t key_tokens = 0;
  double key_loss = 0, key_loss_se = 0;
  std::vector<double> profile;        // mean loss per bucket of positions (NaN: nothing scored there)
  std::vector<double> profile_se;
  // Attention diagnostics, sums over rows: (n_layer, n_head, kAttentionDiagStats)
  // as GPT::collect_attention_diagnostics accumulates them.
  std::vector<double> attention_diag;
};

struct KeyTokens;

struct ExtrapolationResult {
  int trained_context = 0;
  int64_t tokens_per_multiple = 0;  // span · windows
  EvalLayout layout;
  int n_layer = 0, n_head = 0;
  nlohmann::json attention;              // the variant evaluated (set by the caller: config/attention.h)
  nlohmann::json layer_plan;             // every layer's attention as it ran (layer_plan_to_json)
  nlohmann::json block;                  // the block's options (block_to_json)
  std::vector<std::string> layer_kinds;  // each layer's kind of the per-layer plan; "" without one
  std::vector<MultipleResult> rows;
  bool longppl = false;  // rows hold key_* (key tokens were given)
  nlohmann::json to_json() const;
  std::string table() const;  // the human-readable 1×–16× table
  std::string longppl_table() const;  // LongPPL per multiple (longppl only)
  // Entropy, sink and recent-N shares per multiple and layer (means over heads and rows).
  std::string diagnostics_table() const;
};

// Evaluates `model` at each multiple of eval.multiples. batch_tokens bounds the
// tokens of one forward pass (sequences per batch = max(1, batch_tokens / (m·T))).
// text (may be null) gives bits per byte and the documents' separator.
// Throws if the validation stream cannot hold the layout (eval_layout), or if
// learned positions cannot reach the largest context. key (may be null):
// LongPPL's key tokens of the same layout, whose loss each row also reports.
ExtrapolationResult evaluate_extrapolation(Model<float>& model, const TokenStream& val, const EvalConfig& eval,
                                           int trained_context, int64_t batch_tokens, const EvalText* text = nullptr,
                                           const KeyTokens* key = nullptr);

// Throws, naming the cause, when eval.tokens or the validation data cannot
// hold one window of eval.span. Run before training starts.
void check_eval_feasible(uint64_t val_tokens, const EvalConfig& eval, int trained_context);

// The largest context the eval config asks for, checked against the model's
// position encoding; throws with a clear message when learned positions can't
// reach it.
void check_eval_contexts(const ModelConfig& model, const EvalConfig& eval, int trained_context);

}  // namespace gpt
