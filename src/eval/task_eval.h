// Retrieval scoring, written once for every retrieval evaluation (the
// synthetic tasks here, the text passkey in eval/passkey.h): an example is an
// exact match when the model's top prediction is right at every answer token
// (teacher forcing: each answer predicted from the true tokens before it), and
// token accuracy is the share of answer tokens right.
//
// Evaluation on a synthetic task (data/synthetic.h): at each multiple m of
// the training context, examples of m·T tokens built by the task's generator
// from an evaluation seed (validation haystacks), scored by the task's
// checker. Tasks with a depth are scored on a multiple × depth grid.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/synthetic.h"
#include "model/gpt.h"

namespace gpt {

// One example to score: its tokens and the answer tokens at their positions.
struct RetrievalExample {
  std::vector<int32_t> tokens;
  std::vector<SyntheticAnswer> answers;
};

// Per cell: the share of exact matches and the mean token accuracy.
struct RetrievalScores {
  std::vector<double> exact, token_accuracy;
};

// Scores cells × samples examples of L tokens; make(k) builds example k =
// cell · samples + sample, called once for each k in increasing order (a
// generator may draw from one sequential stream). batch_tokens bounds the
// tokens of one forward pass. An example without answers scores 0.
RetrievalScores score_retrieval(Model<float>& model, int L, int cells, int samples, int64_t batch_tokens,
                                const std::function<RetrievalExample(int)>& make);

struct TaskEvalConfig {
  std::vector<int> multiples = {1, 2, 4, 8, 16};
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};  // tasks with a depth; others ignore them
  int samples = 50;                                          // examples per (multiple, depth) cell
  uint64_t seed = 20261203;                                  // the same examples for every model evaluated
};

// Effective length (RULER, Hsieh et al. 2024, arXiv 2404.06654; NoLiMa,
// arXiv 2502.05167): the largest multiple m such that the score at every
// evaluated multiple up to m keeps at least `keep` of the score at 1×
// (default 85%). Needs 1 among the multiples and a 1× score above 0; else
// 0 (undefined). 1 when the first multiple past 1× already falls short.
constexpr double kEffectiveKeep = 0.85;
int effective_multiple(const std::vector<int>& multiples, const std::vector<double>& scores,
                       double keep = kEffectiveKeep);
// An effective_multiple for the results JSON (null when undefined) and for tables ("4x").
nlohmann::json effective_multiple_json(int m);
std::string effective_multiple_text(int m);

struct TaskEvalResult {
  nlohmann::json task;  // SyntheticTask::to_json()
  int trained_context = 0;
  TaskEvalConfig config;
  bool has_depth = false;
  // [multiple][cell] (one cell, depth at random, for tasks without a depth).
  std::vector<std::vector<double>> exact, token_accuracy;
  std::vector<double> mean_exact, mean_token_accuracy;  // per multiple, over its cells
  nlohmann::json to_json() const;
  nlohmann::json effective_json() const;  // effective_multiple of the mean exact match and token accuracy
  std::string table() const;  // exact match and token accuracy, cells × multiples
};

// Throws when a multiple's examples are shorter than the task needs or the
// model's vocabulary does not hold the task's ids. batch_tokens bounds the
// tokens of one forward pass.
TaskEvalResult evaluate_task(Model<float>& model, const SyntheticTask& task, const TaskEvalConfig& cfg,
                             int trained_context, int64_t batch_tokens);

}  // namespace gpt
