// KL at 1x (eval/kl_divergence.h): one position against a plain double
// reference written here from the definition KL(p‖q) = Σ_v p_v ln(p_v/q_v)
// with p = softmax(ref logits), q = softmax(test logits); whole evaluations
// against a loop over the same sequences; the identities (a model against
// itself, a method that is the identity at 1x) and a method that is not.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "config/attention.h"
#include "core/check.h"
#include "data/shard.h"
#include "eval/kl_divergence.h"
#include "model/gpt.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

std::vector<double> softmax(const std::vector<float>& x) {
  double z = 0;
  std::vector<double> p(x.size());
  for (size_t i = 0; i < x.size(); ++i) z += std::exp(static_cast<double>(x[i]));
  for (size_t i = 0; i < x.size(); ++i) p[i] = std::exp(static_cast<double>(x[i])) / z;
  return p;
}

TEST(KlDivergence, OnePositionMatchesTheDefinition) {
  std::vector<float> a(50), b(50);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(std::sin(0.7 * i) * 3);
    b[i] = static_cast<float>(std::cos(0.3 * i) * 2 + 0.1 * i);
  }
  const std::vector<double> p = softmax(a), q = softmax(b);
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) kl += p[i] * std::log(p[i] / q[i]);
  const int32_t target = 17;
  const KlPosition c = compare_logits(a.data(), b.data(), a.size(), target);
  EXPECT_NEAR(c.kl, kl, 1e-12 * kl);
  EXPECT_GT(c.kl, 0.1);
  EXPECT_NEAR(c.dp, q[target] - p[target], 1e-15);
  const size_t top_a = std::max_element(a.begin(), a.end()) - a.begin(),
               top_b = std::max_element(b.begin(), b.end()) - b.begin();
  EXPECT_EQ(c.same_top, top_a == top_b);
  // Against itself: zero, the same top, no change of p.
  const KlPosition self = compare_logits(a.data(), a.data(), a.size(), target);
  EXPECT_EQ(self.kl, 0.0);
  EXPECT_TRUE(self.same_top);
  EXPECT_EQ(self.dp, 0.0);
  // A shift of every logit is the same distribution.
  std::vector<float> shifted = a;
  for (float& v : shifted) v += 5.f;
  EXPECT_NEAR(compare_logits(a.data(), shifted.data(), a.size(), target).kl, 0.0, 1e-12);
}

class KlEvaluation : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpt_kl_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    cfg_.n_layer = 1;
    cfg_.n_head = 2;
    cfg_.n_embd = 16;
    cfg_.vocab_size = 61;
    cfg_.context = 8;
    cfg_.init_std = 0.5;
    std::vector<uint32_t> tokens(600);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((i * 37 + i / 5) % 61);
    tokens_ = tokens;
    write_shard((dir_ / "val.bin").string(), tokens, 2);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<GPT<float>> model(const ContextConfig& cc, uint64_t seed) {
    auto m = std::make_unique<GPT<float>>(cfg_, resolve_attention(AttentionConfig{}, cfg_, cc), *be_);
    m->init(seed);
    return m;
  }
  fs::path dir_;
  ModelConfig cfg_;
  std::vector<uint32_t> tokens_;
  std::unique_ptr<Backend<float>> be_ = make_cpu_backend<float>();
};

TEST_F(KlEvaluation, MatchesALoopOverTheSameSequences) {
  const TokenStream val((dir_ / "val.bin").string(), cfg_.vocab_size);
  EvalConfig ec;
  ec.tokens = 256;
  ec.span = 64;
  ec.multiples = {1, 2};
  const EvalLayout layout = eval_layout(val, ec, cfg_.context, -1);
  auto a = model(ContextConfig{}, 1), b = model(ContextConfig{}, 2);
  const KlResult r = evaluate_kl(*a, *b, val, layout, cfg_.context);
  // The loop: every piece of T tokens, every scored position, KL(b ‖ a) from the definition.
  const int T = cfg_.context;
  double sum = 0, top = 0;
  int64_t n = 0;
  for (const EvalPiece& pc : eval_pieces(layout, T)) {
    std::vector<int32_t> in(T);
    for (int t = 0; t < T; ++t) in[t] = static_cast<int32_t>(tokens_[pc.start + t]);
    for (int t = pc.lo; t < pc.hi; ++t) {
      const std::vector<float> la = a->next_token_logits(in.data(), t + 1), lb = b->next_token_logits(in.data(), t + 1);
      const std::vector<double> p = softmax(lb), q = softmax(la);
      for (size_t v = 0; v < p.size(); ++v) sum += p[v] * std::log(p[v] / q[v]);
      top += std::max_element(la.begin(), la.end()) - la.begin() == std::max_element(lb.begin(), lb.end()) - lb.begin();
      ++n;
    }
  }
  EXPECT_EQ(r.tokens, n);
  EXPECT_NEAR(r.kl, sum / n, 1e-5 * sum / n);
  EXPECT_NEAR(r.same_top, top / n, 1e-12);
  EXPECT_GT(r.kl, 0.01);
  EXPECT_GT(r.kl_se, 0.0);
  EXPECT_LE(r.kl_median, r.kl_p99);
  EXPECT_LE(r.kl_p99, r.kl_max);
  EXPECT_GE(r.dp_rms, std::abs(r.dp));
}

// A method that is the identity at 1x (YaRN, factor L/N) gives KL 0 against
// the same weights without it; ReRoPE, which is not (docs/context_extension.md
// §7), does not; another vocabulary is refused.
TEST_F(KlEvaluation, IdentityAtOneXIsZeroAndReropeIsNot) {
  const TokenStream val((dir_ / "val.bin").string(), cfg_.vocab_size);
  EvalConfig ec;
  ec.tokens = 128;
  ec.span = 64;
  ec.multiples = {1, 2};
  const EvalLayout layout = eval_layout(val, ec, cfg_.context, -1);
  ContextConfig yarn, rerope;
  yarn.rope_scaling = "yarn";
  rerope.remap = "rerope";
  auto base = model(ContextConfig{}, 3), with_yarn = model(yarn, 3), with_rerope = model(rerope, 3);
  const KlResult same = evaluate_kl(*with_yarn, *base, val, layout, cfg_.context);
  EXPECT_EQ(same.kl, 0.0);
  EXPECT_EQ(same.same_top, 1.0);
  EXPECT_EQ(same.dp_rms, 0.0);
  const KlResult moved = evaluate_kl(*with_rerope, *base, val, layout, cfg_.context);
  EXPECT_GT(moved.kl, 1e-4);
  ModelConfig other = cfg_;
  other.vocab_size = 62;
  GPT<float> wide(other, AttentionSpec{}, *be_);
  try {
    evaluate_kl(*base, wide, val, layout, cfg_.context);
    ADD_FAILURE() << "different vocabularies were compared";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary (62) is not the model's (61)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpt
