#include "eval/passkey.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "core/check.h"
#include "data/rng.h"
#include "eval/task_eval.h"

namespace gpt {
namespace {

std::vector<int32_t> encode_ids(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids;
  for (uint32_t id : tok.encode(text)) ids.push_back(static_cast<int32_t>(id));
  return ids;
}

// One seed per (seed, draw, row): splitmix-style mixing of the three.
uint64_t mix(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = a ^ 0x9E3779B97F4A7C15ull;
  for (uint64_t x : {b, c}) {
    h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 31)) * 0xBF58476D1CE4E5B9ull;
  }
  return h;
}

}  // namespace

PasskeyBuilder::PasskeyBuilder(const Tokenizer& tok, int digits) : digits_(digits), tok_(tok) {
  GPT_CHECK(digits >= 1 && digits <= 32, "passkey: digits must be in [1, 32], got ", digits);
  intro_ = encode_ids(tok, kPasskeyIntro);
  outro_ = encode_ids(tok, kPasskeyOutro);
}

int PasskeyBuilder::overhead() const {
  // The key's token count depends on the digits with a BPE tokenizer; the
  // longest possible spelling is one token per digit.
  return 2 * static_cast<int>(intro_.size()) + static_cast<int>(outro_.size()) + 2 * digits_;
}

std::string PasskeyBuilder::random_key(Rng& rng) const {
  std::string key(digits_, '0');
  for (char& c : key) c = static_cast<char>('0' + rng.below(10));
  return key;
}

std::vector<int32_t> PasskeyBuilder::build(const int32_t* filler, int n, const std::string& key, double depth,
                                           int* answer_begin) const {
  GPT_CHECK(depth >= 0 && depth <= 1, "passkey: depth must be in [0, 1], got ", depth);
  GPT_CHECK(n > overhead(), "passkey: a sequence of ", n, " tokens cannot hold a ", digits_,
            "-digit passkey example (needle, question and answer take up to ", overhead(), " tokens)");
  const std::vector<int32_t> answer = encode_ids(tok_, key);
  const int fixed =
      2 * static_cast<int>(intro_.size()) + static_cast<int>(outro_.size()) + 2 * static_cast<int>(answer.size());
  const int nfill = n - fixed;
  const int at = static_cast<int>(std::lround(depth * nfill));
  std::vector<int32_t> out;
  out.reserve(n);
  out.insert(out.end(), filler, filler + at);
  out.insert(out.end(), intro_.begin(), intro_.end());
  out.insert(out.end(), answer.begin(), answer.end());
  out.insert(out.end(), outro_.begin(), outro_.end());
  out.insert(out.end(), filler + at, filler + nfill);
  out.insert(out.end(), intro_.begin(), intro_.end());
  if (answer_begin) *answer_begin = static_cast<int>(out.size());
  out.insert(out.end(), answer.begin(), answer.end());
  return out;
}

PasskeyMixer::PasskeyMixer(const Tokenizer& tok, int digits, double fraction, uint64_t seed)
    : builder_(tok, digits), fraction_(fraction), seed_(seed) {
  GPT_CHECK(fraction >= 0 && fraction <= 1, "data.passkey_fraction must be in [0, 1], got ", fraction);
}

void PasskeyMixer::check_context(int T) const {
  GPT_CHECK(T + 1 > builder_.overhead(), "data.passkey_fraction > 0: training windows of ", T,
            " tokens (model.context, or the first stage of train.length_start) are too short for a passkey example of ",
            builder_.digits(), " digits (needs more than ", builder_.overhead() - 1, " tokens)");
}

int PasskeyMixer::apply(int32_t* inputs, int32_t* targets, int rows, int T, int row0, uint64_t draw) const {
  if (fraction_ <= 0) return 0;
  check_context(T);
  int replaced = 0;
  std::vector<int32_t> seq(T + 1);
  for (int r = 0; r < rows; ++r) {
    Rng rng(mix(seed_, draw, static_cast<uint64_t>(row0 + r)));
    if (rng.uniform() >= fraction_) continue;
    int32_t* in = inputs + static_cast<size_t>(r) * T;
    int32_t* tg = targets + static_cast<size_t>(r) * T;
    std::copy(in, in + T, seq.begin());
    seq[T] = tg[T - 1];
    const std::string key = builder_.random_key(rng);
    const std::vector<int32_t> ex = builder_.build(seq.data(), T + 1, key, rng.uniform(), nullptr);
    std::copy(ex.begin(), ex.begin() + T, in);
    std::copy(ex.begin() + 1, ex.end(), tg);
    ++replaced;
  }
  return replaced;
}

PasskeyResult evaluate_passkey(Model<float>& model, const TokenStream& val, const Tokenizer& tok,
                               const PasskeyEvalConfig& cfg, int trained_context, int64_t batch_tokens) {
  GPT_CHECK(!cfg.multiples.empty() && !cfg.depths.empty(), "passkey: need at least one multiple and one depth");
  GPT_CHECK(cfg.samples >= 1, "passkey: samples must be >= 1, got ", cfg.samples);
  GPT_CHECK(static_cast<int64_t>(tok.vocab_size()) <= model.config().vocab_size, "passkey: tokenizer ", tok.spec(),
            " has ", tok.vocab_size(), " ids but the model's vocabulary is ", model.config().vocab_size,
            "; evaluate with the tokenizer the model was trained with (--tokenizer)");
  for (double d : cfg.depths) GPT_CHECK(d >= 0 && d <= 1, "passkey: depths must be in [0, 1], got ", d);
  const PasskeyBuilder builder(tok, cfg.digits);
  PasskeyResult res;
  res.trained_context = trained_context;
  res.config = cfg;
  const int nd = static_cast<int>(cfg.depths.size());
  for (int m : cfg.multiples) {
    const auto t0 = std::chrono::steady_clock::now();
    const int L = m * trained_context;
    GPT_CHECK(static_cast<int64_t>(val.size()) > L, "passkey: the validation data has ", val.size(),
              " tokens, too few for prompts of ", L, " tokens (", m, "x the context)");
    // Prompts of this multiple: every (depth, sample), from seeded offsets
    // drawn in order from one stream.
    std::vector<int32_t> filler(L);
    Rng rng(mix(cfg.seed, static_cast<uint64_t>(m), 0));
    RetrievalScores sc = score_retrieval(model, L, nd, cfg.samples, batch_tokens, [&](int k) {
      val.read(rng.below(val.size() - L), L, filler.data());
      int a = 0;
      RetrievalExample ex;
      ex.tokens = builder.build(filler.data(), L, builder.random_key(rng), cfg.depths[k / cfg.samples], &a);
      for (int t = a; t < L; ++t) ex.answers.push_back({t, ex.tokens[t]});
      return ex;
    });
    const std::vector<double>&exact = sc.exact, &tokacc = sc.token_accuracy;
    res.exact.push_back(exact);
    res.token_accuracy.push_back(tokacc);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double mean = 0;
    for (double e : exact) mean += e / nd;
    spdlog::info("passkey {:>2}x ({} tokens): exact match {:.3f} over {} prompts ({:.1f} s)", m, L, mean,
                 nd * cfg.samples, secs);
  }
  return res;
}

std::vector<double> PasskeyResult::mean_exact() const {
  std::vector<double> out;
  for (const std::vector<double>& row : exact) {
    double s = 0;
    for (double v : row) s += v;
    out.push_back(row.empty() ? 0.0 : s / static_cast<double>(row.size()));
  }
  return out;
}

nlohmann::json PasskeyResult::to_json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < config.multiples.size(); ++i) {
    nlohmann::json cells = nlohmann::json::array();
    for (size_t d = 0; d < config.depths.size(); ++d)
      cells.push_back({{"depth", config.depths[d]}, {"exact", exact[i][d]}, {"token_accuracy", token_accuracy[i][d]}});
    rows.push_back(
        {{"multiple", config.multiples[i]}, {"context", config.multiples[i] * trained_context}, {"depths", cells}});
  }
  return {{"task", "passkey"},       {"trained_context", trained_context},
          {"digits", config.digits}, {"samples", config.samples},
          {"seed", config.seed},     {"multiples", rows},
          {"effective_multiple",
           {{"keep", kEffectiveKeep},
            {"exact", effective_multiple_json(effective_multiple(config.multiples, mean_exact()))}}}};
}

std::string PasskeyResult::table() const {
  std::string out = "passkey exact match (rows: depth of the key; columns: context multiple)\n  depth";
  char cellbuf[64];
  for (int m : config.multiples) {
    std::snprintf(cellbuf, sizeof cellbuf, " %6dx", m);
    out += cellbuf;
  }
  out += "\n";
  for (size_t d = 0; d < config.depths.size(); ++d) {
    std::snprintf(cellbuf, sizeof cellbuf, "  %5.2f", config.depths[d]);
    out += cellbuf;
    for (size_t i = 0; i < config.multiples.size(); ++i) {
      std::snprintf(cellbuf, sizeof cellbuf, " %7.2f", exact[i][d]);
      out += cellbuf;
    }
    out += "\n";
  }
  out += "effective length (every multiple up to it keeps >= " + std::to_string(static_cast<int>(kEffectiveKeep * 100)) +
         "% of the 1x exact match, mean over depths): " +
         effective_multiple_text(effective_multiple(config.multiples, mean_exact())) + "\n";
  return out;
}

}  // namespace gpt
