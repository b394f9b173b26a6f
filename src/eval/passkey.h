// Passkey retrieval: a random k-digit key is hidden at a chosen depth of a
// stretch of ordinary text, and the sequence ends with a question whose
// answer is the key. As text (tokenized with the run's tokenizer):
//
//   <filler ...> pass key: 48213. <... filler> pass key: 48213
//                ^ the needle, at depth d        ^ question, then the answer
//
// Depth 0 puts the needle at the start of the filler, depth 1 right before the
// question. The same builder makes training examples (data.passkey_fraction
// of the training sequences, built from their own text so the filler is
// in-distribution) and evaluation prompts (from validation text) at each
// multiple of the training context, scored by exact match.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/shard.h"
#include "model/gpt.h"
#include "tokenizer/tokenizer.h"

namespace gpt {

struct Rng;

// The task name of `gpt eval --task` for this passkey (the synthetic tasks
// have a `passkey` of their own: data/synthetic.h).
inline constexpr const char* kTextPasskey = "text_passkey";

// The fixed text around the key.
inline constexpr const char* kPasskeyIntro = " pass key: ";
inline constexpr const char* kPasskeyOutro = ". ";

class PasskeyBuilder {
 public:
  PasskeyBuilder(const Tokenizer& tok, int digits);
  int digits() const { return digits_; }
  // Tokens the needle, question and answer take together: a sequence must be
  // longer than this to hold any filler.
  int overhead() const;
  // A fresh key of digits() decimal digits (leading zeros allowed).
  std::string random_key(Rng& rng) const;
  // Builds a sequence of exactly n tokens: the first n - overhead() tokens of
  // filler with the needle inserted at depth (in [0,1]) of them, then the
  // question and the answer. filler must hold >= n - overhead() tokens.
  // *answer_begin (if non-null) receives the index of the answer's first token;
  // the answer runs to the end of the sequence.
  std::vector<int32_t> build(const int32_t* filler, int n, const std::string& key, double depth,
                             int* answer_begin) const;

 private:
  int digits_;
  std::vector<int32_t> intro_, outro_;
  const Tokenizer& tok_;
};

// Replaces data.passkey_fraction of the training sequences by passkey
// examples made from their own tokens. Which rows are replaced, the key and
// the depth depend only on (seed, draw, global row), so every rank of a
// data-parallel run, and a resumed run, makes the same choices.
class PasskeyMixer {
 public:
  PasskeyMixer(const Tokenizer& tok, int digits, double fraction, uint64_t seed);
  // Throws, naming data.passkey_fraction, when sequences of T+1 tokens
  // cannot hold an example.
  void check_context(int T) const;
  // inputs/targets hold rows × T ids: rows [row0, row0+rows) of global batch
  // number `draw`. A replaced row's inputs/targets become the example's
  // tokens [0,T) and [1,T] (the row's T+1 tokens are its filler).
  // Returns the number of rows replaced.
  int apply(int32_t* inputs, int32_t* targets, int rows, int T, int row0, uint64_t draw) const;

 private:
  PasskeyBuilder builder_;
  double fraction_;
  uint64_t seed_;
};

struct PasskeyEvalConfig {
  std::vector<int> multiples = {1, 2, 4, 8, 16};
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};
  int samples = 20;  // prompts per (multiple, depth) cell
  int digits = 5;
  uint64_t seed = 20261130;  // same prompts for every model evaluated
};

struct PasskeyResult {
  int trained_context = 0;
  PasskeyEvalConfig config;
  // [multiple][depth]: share of prompts whose every answer token is the
  // model's top prediction (= greedy decoding reproduces the key), and the
  // mean share of answer tokens predicted right.
  std::vector<std::vector<double>> exact, token_accuracy;
  std::vector<double> mean_exact() const;  // per multiple, over its depths
  nlohmann::json to_json() const;  // with effective_multiple (eval/task_eval.h) of mean_exact
  std::string table() const;  // depth × multiple grid of exact-match accuracy, then the effective length
};

// Scores the model on passkey prompts of m·T tokens built from validation text
// at spread, seeded offsets. batch_tokens bounds the tokens of one forward pass.
PasskeyResult evaluate_passkey(Model<float>& model, const TokenStream& val, const Tokenizer& tok,
                               const PasskeyEvalConfig& cfg, int trained_context, int64_t batch_tokens);

}  // namespace gpt
