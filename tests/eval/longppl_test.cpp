// LongPPL (eval/longppl.h): the key tokens against a per-token loop written
// here from the definition (Fang et al. 2025, arXiv 2410.23771, §3: LSD =
// ln P(x | long) − ln P(x | short) > α and LCL = ln P(x | long) > β, the
// authors' longppl.py), with each token's long and short contexts as
// docs/evaluation.md states them; and the key-token loss of every multiple
// against a loop over the same sequences.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "core/check.h"
#include "data/shard.h"
#include "eval/longppl.h"
#include "model/gpt.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

class LongPpl : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpt_longppl_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    cfg_.n_layer = 1;
    cfg_.n_head = 2;
    cfg_.n_embd = 16;
    cfg_.vocab_size = 23;
    cfg_.context = 8;
    cfg_.init_std = 0.8;  // far from uniform, so that context matters
    tokens_.resize(700);
    for (size_t i = 0; i < tokens_.size(); ++i) tokens_[i] = static_cast<uint32_t>((i * 7 + i / 3 + (i % 11) * i) % 23);
    write_shard((dir_ / "val.bin").string(), tokens_, 2);
    model_ = std::make_unique<GPT<float>>(cfg_, AttentionSpec{}, *be_);
    model_->init(4);
    ec_.tokens = 128;
    ec_.span = 64;
    ec_.multiples = {1, 2, 4};
  }
  void TearDown() override { fs::remove_all(dir_); }
  // The loss of the token after stream position `at`, given the tokens from `from` to `at`.
  double loss_of(uint64_t from, uint64_t at) {
    const int n = static_cast<int>(at - from + 1);
    std::vector<int32_t> in(n), tg(n);
    for (int t = 0; t < n; ++t) in[t] = static_cast<int32_t>(tokens_[from + t]), tg[t] = tokens_[from + t + 1];
    std::vector<float> l;
    model_->forward_losses(in.data(), tg.data(), 1, n, l);
    return l.back();
  }
  fs::path dir_;
  ModelConfig cfg_;
  EvalConfig ec_;
  std::vector<uint32_t> tokens_;
  std::unique_ptr<Backend<float>> be_ = make_cpu_backend<float>();
  std::unique_ptr<GPT<float>> model_;
};

TEST_F(LongPpl, KeyTokensMatchTheDefinition) {
  const TokenStream val((dir_ / "val.bin").string(), cfg_.vocab_size);
  const EvalLayout layout = eval_layout(val, ec_, cfg_.context, -1);
  const int T = cfg_.context, L = 32, S = (T + 1) / 2;
  const double alpha = 0.05, beta = -3;
  const KeyTokens key = select_key_tokens(*model_, val, layout, T, L, alpha, beta);
  int64_t expect = 0, borderline = 0;
  for (size_t k = 0; k < layout.starts.size(); ++k)
    for (int64_t j = 0; j < layout.span; ++j) {
      const uint64_t w0 = layout.starts[k];
      const double lo = loss_of(w0 + j / L * L, w0 + j);  // long: from its sequence of L
      const int64_t end = std::min<int64_t>(layout.span, j / S * S + S), from = std::max<int64_t>(0, end - T);
      const double sh = loss_of(w0 + from, w0 + j);  // short: the block's sequence of at most T
      const double lsd = sh - lo;
      if (std::abs(lsd - alpha) < 1e-5 || std::abs(-lo - beta) < 1e-5) {
        ++borderline;
        continue;
      }
      const bool is_key = lsd > alpha && -lo > beta;
      expect += is_key;
      EXPECT_EQ(key.is_key(k, j), is_key) << "window " << k << " offset " << j;
      if (j < T) { EXPECT_FALSE(key.is_key(k, j)) << "the first T tokens see the same context both ways"; }
    }
  EXPECT_EQ(borderline, 0);
  EXPECT_EQ(key.count, expect);
  EXPECT_EQ(key.candidates, static_cast<int64_t>(layout.starts.size()) * layout.span);
  EXPECT_GT(key.count, 5) << "the fixture must have key tokens";
  EXPECT_LT(key.count, key.candidates / 2);
}

// The key-token loss of each multiple: every key token's loss as that
// multiple scores it, averaged; with every token a key (α = β = −∞) it is the
// multiple's loss itself.
TEST_F(LongPpl, KeyLossOfEachMultipleMatchesALoop) {
  const TokenStream val((dir_ / "val.bin").string(), cfg_.vocab_size);
  const EvalLayout layout = eval_layout(val, ec_, cfg_.context, -1);
  const KeyTokens key = select_key_tokens(*model_, val, layout, cfg_.context, 32, 0.05, -3);
  const ExtrapolationResult r = evaluate_extrapolation(*model_, val, ec_, cfg_.context, 64, nullptr, &key);
  ASSERT_TRUE(r.longppl);
  for (const MultipleResult& m : r.rows) {
    double sum = 0;
    int64_t n = 0;
    for (size_t k = 0; k < layout.starts.size(); ++k)
      for (int64_t j = 0; j < layout.span; ++j)
        if (key.is_key(k, j)) sum += loss_of(layout.starts[k] + j / m.context * m.context, layout.starts[k] + j), ++n;
    EXPECT_EQ(m.key_tokens, n) << m.multiple;
    EXPECT_NEAR(m.key_loss, sum / n, 1e-5) << m.multiple;
  }
  const KeyTokens all = select_key_tokens(*model_, val, layout, cfg_.context, 32, -1e30, -1e30);
  EXPECT_EQ(all.count, all.candidates);
  const ExtrapolationResult every = evaluate_extrapolation(*model_, val, ec_, cfg_.context, 64, nullptr, &all);
  for (const MultipleResult& m : every.rows) {
    EXPECT_EQ(m.key_tokens, m.tokens);
    EXPECT_DOUBLE_EQ(m.key_loss, m.loss);
  }
  EXPECT_FALSE(every.to_json()["multiples"][0]["longppl"].is_null());
  EvalConfig sliding = ec_;
  sliding.protocol = "sliding";
  EXPECT_THROW(select_key_tokens(*model_, val, eval_layout(val, sliding, cfg_.context, -1), cfg_.context, 32, 2, -2),
               Error);
}

}  // namespace
}  // namespace gpt
