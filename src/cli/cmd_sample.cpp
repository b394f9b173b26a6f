#include <omp.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>

#include "cli/commands.h"
#include "cli/run_options.h"
#include "cli/validators.h"
#include "core/check.h"
#include "data/rng.h"
#include "tokenizer/tokenizer.h"
#include "train/model_io.h"

namespace gpt::cli {
namespace {

struct SampleArgs {
  std::string checkpoint;
  std::string prompt;
  int tokens = 256;
  double temperature = 1.0;
  int top_k = 0;
  uint64_t seed = 42;
  int context = 0;
  int threads = 0;
  RunOptions run;         // --device, --precision, --storage
  std::string tokenizer;  // empty: the run's data.tokenizer
};

// Draws the next token from logits: greedy at temperature 0, otherwise from
// softmax(logits / temperature) restricted to the top_k largest (0 = all).
int32_t pick_token(std::vector<float> logits, double temperature, int top_k, Rng& rng) {
  const int V = static_cast<int>(logits.size());
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  if (temperature <= 0) return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const int k = top_k > 0 ? std::min(top_k, V) : V;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const double maxv = logits[ids[0]];
  std::vector<double> p(k);
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[i] = std::exp((logits[ids[i]] - maxv) / temperature);
  double u = rng.uniform() * sum;
  for (int i = 0; i < k; ++i) {
    u -= p[i];
    if (u <= 0) return ids[i];
  }
  return ids[k - 1];
}

void run_sample(const SampleArgs& a) {
  if (a.threads > 0) omp_set_num_threads(a.threads);
  LoadedModel lm = load_model(a.checkpoint, {}, a.run.device, a.run.precision, a.run.storage,
                                a.run.hf_context);
  const ModelConfig& mc = lm.config.model;
  const std::string tok_spec = a.tokenizer.empty() ? lm.config.data.tokenizer : a.tokenizer;
  const std::unique_ptr<Tokenizer> tok = make_tokenizer(tok_spec);
  // A Hugging Face model's embedding often has spare rows past its
  // tokenizer's ids (Pythia: 50304 against 50277); sampling keeps to the ids
  // the tokenizer has. Elsewhere the two must agree.
  const bool hf_tok = tok_spec.rfind("hf:", 0) == 0;
  const auto n_tok = static_cast<int64_t>(tok->vocab_size());
  GPT_CHECK(n_tok == mc.vocab_size || (hf_tok && n_tok < mc.vocab_size), "sample: the checkpoint has a vocabulary of ",
            mc.vocab_size, " tokens but tokenizer ", tok_spec, " has ", tok->vocab_size(),
            "; pass the tokenizer the model was trained with (--tokenizer)");
  GPT_CHECK(a.top_k <= n_tok, "sample --top-k ", a.top_k, " is larger than the vocabulary of ", a.checkpoint,
            " (", n_tok, " tokens); give 0 (all tokens) or at most ", n_tok);
  int window = a.context > 0 ? a.context : mc.context;
  if (mc.position == "learned") window = std::min(window, mc.position_rows());
  std::vector<int32_t> ids = {static_cast<int32_t>(tok->end_of_text())};
  for (uint32_t id : tok->encode(a.prompt)) ids.push_back(static_cast<int32_t>(id));
  Rng rng(a.seed);
  std::cout << a.prompt << std::flush;
  for (int n = 0; n < a.tokens; ++n) {
    const int len = std::min<int>(window, static_cast<int>(ids.size()));
    std::vector<float> logits = lm.model->next_token_logits(ids.data() + ids.size() - len, len);
    logits.resize(static_cast<size_t>(n_tok));
    const int32_t next = pick_token(logits, a.temperature, a.top_k, rng);
    ids.push_back(next);
    std::cout << tok->token_bytes(static_cast<uint32_t>(next)) << std::flush;
  }
  std::cout << '\n';
}

}  // namespace

void add_sample(CLI::App& app) {
  auto args = std::make_shared<SampleArgs>();
  CLI::App* cmd = app.add_subcommand("sample", "Generate text from a checkpoint");
  cmd->add_option("checkpoint", args->checkpoint,
                  "Checkpoint file, a run directory (its latest checkpoint), or a Hugging Face model directory")
      ->required();
  cmd->add_option("--prompt", args->prompt, "Text to continue (default: empty, start of a document)");
  cmd->add_option("--tokens", args->tokens, "Number of tokens to generate")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--temperature", args->temperature, "Sampling temperature; 0 = greedy")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--top-k", args->top_k, "Sample among the K most likely tokens; 0 = all")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--seed", args->seed, "Random seed")->capture_default_str();
  cmd->add_option("--context", args->context, "Tokens of history the model sees (default: the training context)")
      ->check(non_negative());
  cmd->add_option("--tokenizer", args->tokenizer,
                  std::string("Tokenizer of the model (default: the run's data.tokenizer): ") + kTokenizerSpecHelp)
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "OpenMP threads (default: all cores)")->check(non_negative());
  add_run_options(cmd, args->run);
  cmd->callback([args] { run_sample(*args); });
}

}  // namespace gpt::cli
