// The regression head (model.regression_outputs; docs/orbits.md, "The force
// probe"): its outputs against the LM head's logits (the same linear map of
// the final norm's output when its weights are a row of the tied
// embedding), the masked loss against the definition of Vafa et al.'s probe
// written here, the gradient of every parameter against finite differences
// in double, and the checkpoint table.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "backend/backend.h"
#include "config/attention.h"
#include "core/check.h"
#include "model/gpt.h"
#include "util/gradcheck.h"
#include "util/tiny_model.h"

namespace gpt {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

ModelConfig head_config(int outputs) {
  ModelConfig m = test::tiny_model_config("rope");
  m.regression_outputs = outputs;
  return m;
}

AttentionSpec spec_for(const ModelConfig& m) {
  AttentionSpec s;
  s.trained_context = m.context;
  return s;
}

std::vector<int32_t> some_tokens(int n, int vocab) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (7 * i + 3) % vocab;
  return t;
}

TEST(RegressionHead, ParametersAreInTheTableOnlyWhenAsked) {
  const ParamLayout none(head_config(0)), two(head_config(2));
  EXPECT_FALSE(none.has("regw"));
  EXPECT_FALSE(none.has("regb"));
  ASSERT_TRUE(two.has("regw") && two.has("regb"));
  EXPECT_EQ(two.find("regw").shape, (Shape{2, 8}));
  EXPECT_EQ(two.find("regb").shape, (Shape{2}));
  EXPECT_TRUE(two.find("regw").decay);
  EXPECT_FALSE(two.find("regb").decay);
  EXPECT_EQ(two.total, none.total + 2 * 8 + 2);
  // A pretrained model's tensors are all there, with their shapes: the probe
  // copies them and only the head starts fresh.
  const ParamDifference d = param_difference(none, two);
  EXPECT_EQ(d.added.size(), 2u);
  EXPECT_TRUE(d.dropped.empty() && d.changed.empty());
}

TEST(RegressionHead, OutputsAreTheFinalNormTimesTheHead) {
  // With regw = row k of the tied embedding and regb = b, output r is the
  // LM head's logit k plus b at every position.
  const ModelConfig m = head_config(2);
  auto be = make_cpu_backend<double>();
  GPT<double> model(m, spec_for(m), *be);
  model.init(3);
  std::vector<double> p = model.get_params();
  const ParamSpec& wte = model.layout().find("wte");
  const ParamSpec& regw = model.layout().find("regw");
  const ParamSpec& regb = model.layout().find("regb");
  const int C = m.n_embd, rows[2] = {4, 9};
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < C; ++c) p[regw.offset + r * C + c] = p[wte.offset + rows[r] * C + c];
  p[regb.offset] = 0.25;
  p[regb.offset + 1] = -1.5;
  model.set_params(p);
  const int B = 2, T = m.context;
  const auto tokens = some_tokens(B * T, m.vocab_size);
  std::vector<double> out;
  model.forward_regression_outputs(tokens.data(), B, T, out);
  ASSERT_EQ(out.size(), static_cast<size_t>(B * T * 2));
  size_t checked = 0;
  model.forward_logits(tokens.data(), B, T, [&](size_t first, size_t n, const double* logits) {
    for (size_t i = 0; i < n; ++i) {
      const size_t row = first + i;
      EXPECT_NEAR(out[row * 2], logits[i * m.vocab_size + rows[0]] + 0.25, 1e-12) << row;
      EXPECT_NEAR(out[row * 2 + 1], logits[i * m.vocab_size + rows[1]] - 1.5, 1e-12) << row;
      ++checked;
    }
  });
  EXPECT_EQ(checked, static_cast<size_t>(B * T));
}

// Labels: sequence 0 has three labelled positions (one with a single
// labelled output), sequence 1 two, sequence 2 none.
std::vector<double> some_targets(int B, int T, int R) {
  std::vector<double> y(static_cast<size_t>(B) * T * R, kNaN);
  auto at = [&](int b, int t, int r) -> double& { return y[(static_cast<size_t>(b) * T + t) * R + r]; };
  at(0, 1, 0) = 0.7, at(0, 1, 1) = -0.2;
  at(0, 3, 0) = 1.1;
  at(0, 4, 0) = -0.4, at(0, 4, 1) = 0.9;
  at(1, 0, 0) = 0.3, at(1, 0, 1) = 0.5;
  at(1, 2, 0) = -1.0, at(1, 2, 1) = 0.1;
  return y;
}

TEST(RegressionHead, LossIsTheMeanOverSequencesOfEachOnesLabelledMse) {
  const ModelConfig m = head_config(2);
  auto be = make_cpu_backend<double>();
  GPT<double> model(m, spec_for(m), *be);
  model.init(5);
  const int B = 3, T = m.context, R = 2;
  const auto tokens = some_tokens(B * T, m.vocab_size);
  const std::vector<double> y = some_targets(B, T, R);
  std::vector<double> out;
  model.forward_regression_outputs(tokens.data(), B, T, out);
  // Vafa et al.'s masked loss: per sequence Σ(ŷ − y)² / (its labelled
  // count) over labelled entries, averaged over sequences with labels.
  double total = 0;
  int seqs = 0;
  for (int b = 0; b < B; ++b) {
    double sq = 0;
    int n = 0;
    for (int i = 0; i < T * R; ++i) {
      const size_t k = static_cast<size_t>(b) * T * R + i;
      if (std::isnan(y[k])) continue;
      sq += (out[k] - y[k]) * (out[k] - y[k]);
      ++n;
    }
    if (n) total += sq / n, ++seqs;
  }
  ASSERT_EQ(seqs, 2);
  EXPECT_NEAR(model.forward_regression(tokens.data(), y.data(), B, T), total / seqs, 1e-12);
  // No labels at all: loss 0 and no gradient.
  const std::vector<double> none(y.size(), kNaN);
  EXPECT_EQ(model.forward_regression(tokens.data(), none.data(), B, T), 0.0);
  model.zero_grad();
  model.backward();
  std::vector<double> g(model.num_params());
  be->download(g.data(), model.grads(), g.size());
  for (double v : g) ASSERT_EQ(v, 0.0);
  // An infinite target is refused (NaN is the only "no label").
  std::vector<double> bad = y;
  bad[3] = std::numeric_limits<double>::infinity();
  EXPECT_THROW(model.forward_regression(tokens.data(), bad.data(), B, T), Error);
  // A model without the head refuses the regression passes.
  GPT<double> plain(head_config(0), spec_for(m), *be);
  plain.init(5);
  EXPECT_THROW(plain.forward_regression_outputs(tokens.data(), B, T, out), Error);
}

TEST(RegressionHead, GradientMatchesFiniteDifferences) {
  for (const char* preset : {"softmax", "lssar"}) {
    const ModelConfig m = head_config(2);
    AttentionConfig ac;
    ac.preset = preset;
    const AttentionSpec spec = resolve_attention(ac, m, ContextConfig{});
    auto be = make_cpu_backend<double>();
    GPT<double> model(m, spec, *be);
    model.init(7);
    std::vector<double> params = model.get_params();
    const auto noise = test::random_vector(params.size(), 13, -0.1, 0.1);
    for (size_t i = 0; i < params.size(); ++i) params[i] += noise[i];
    model.set_params(params);
    const int B = 3, T = m.context;
    const auto tokens = some_tokens(B * T, m.vocab_size);
    const std::vector<double> y = some_targets(B, T, 2);
    model.zero_grad();
    model.forward_regression(tokens.data(), y.data(), B, T);
    model.backward(0.5);  // loss_scale reaches the gradient
    std::vector<double> analytic(model.num_params());
    be->download(analytic.data(), model.grads(), analytic.size());
    auto loss = [&] {
      model.set_params(params);
      return 0.5 * model.forward_regression(tokens.data(), y.data(), B, T);
    };
    const std::vector<double> numeric =
        test::numeric_gradient(params, loss, std::string(preset) == "lssar" ? 5e-5 : 1e-3);
    test::expect_model_gradient(std::string("regression head, ") + preset, model.layout(), analytic, numeric);
    for (const char* head : {"regw", "regb"}) {  // the head itself gets a gradient
      const ParamSpec& t = model.layout().find(head);
      double largest = 0;
      for (size_t i = t.offset; i < t.offset + t.numel(); ++i) largest = std::max(largest, std::abs(numeric[i]));
      EXPECT_GT(largest, 1e-3) << head;
    }
  }
}

}  // namespace
}  // namespace gpt
