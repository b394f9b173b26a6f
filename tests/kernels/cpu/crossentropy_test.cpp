// Softmax cross-entropy with a padded vocabulary: hand-computed loss,
// finite-difference gradient, padding columns, large logits, aliasing;
// targets a loss mask does not score (kIgnoreTarget).
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/tokens.h"
#include "kernels/cpu/cpu_kernels.h"
#include "util/gradcheck.h"

namespace {

using gpt::test::max_rel_error;
using gpt::test::numeric_gradient;
using gpt::test::random_vector;
using gpt::test::weighted_sum;

constexpr int N = 5, V = 7, Vp = 9;  // two padding columns per row
const std::vector<int32_t> kTargets = {0, 6, 3, 3, 1};

TEST(CrossEntropy, ForwardMatchesHandComputedValue) {
  // Row 0: logits (1, 2, 3), target 0: log(e + e² + e³) - 1
  //        = log(2.71828 + 7.38906 + 20.08554) - 1 = 3.40760596444438 - 1.
  // Row 1: the same logits, target 2: 3.40760596444438 - 3.
  const std::vector<double> logits = {1, 2, 3, 1, 2, 3};
  const std::vector<int32_t> targets = {0, 2};
  std::vector<double> losses(2);
  gpt::cpu::crossentropy_forward(losses.data(), logits.data(), targets.data(), 2, 3, 3);
  EXPECT_NEAR(losses[0], 2.40760596444438, 1e-14);
  EXPECT_NEAR(losses[1], 0.40760596444438, 1e-14);
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  auto logits = random_vector(N * Vp, 1, -3.0, 3.0);
  const auto w = random_vector(N, 2);  // dL/dloss
  std::vector<double> losses(N), dlogits(N * Vp, 0.0);
  auto loss = [&] {
    gpt::cpu::crossentropy_forward(losses.data(), logits.data(), kTargets.data(), N, V, Vp);
    return weighted_sum(losses, w);
  };
  gpt::cpu::crossentropy_backward(dlogits.data(), logits.data(), kTargets.data(), w.data(), N, V, Vp);
  const double err = max_rel_error(dlogits, numeric_gradient(logits, loss));
  std::cout << "[gradcheck] crossentropy dlogits max_rel_err=" << err << "\n";
  EXPECT_LT(err, 1e-6);
}

TEST(CrossEntropy, PaddingColumnsAreIgnoredAndGetZeroGradient) {
  auto logits = random_vector(N * Vp, 3);
  const std::vector<double> dloss(N, 1.0);
  std::vector<double> before(N), after(N);
  gpt::cpu::crossentropy_forward(before.data(), logits.data(), kTargets.data(), N, V, Vp);
  for (int n = 0; n < N; ++n) logits[n * Vp + V] = logits[n * Vp + Vp - 1] = 1e6;
  gpt::cpu::crossentropy_forward(after.data(), logits.data(), kTargets.data(), N, V, Vp);
  EXPECT_EQ(before, after);

  // Backward overwrites: stale values (even NaN) in dlogits must not leak.
  std::vector<double> dlogits(N * Vp, std::numeric_limits<double>::quiet_NaN());
  gpt::cpu::crossentropy_backward(dlogits.data(), logits.data(), kTargets.data(), dloss.data(), N, V, Vp);
  for (int n = 0; n < N; ++n) {
    double row_sum = 0;
    for (int i = 0; i < V; ++i) row_sum += dlogits[n * Vp + i];
    EXPECT_NEAR(row_sum, 0.0, 1e-14);  // softmax sums to 1, one-hot to 1
    for (int i = V; i < Vp; ++i) EXPECT_EQ(dlogits[n * Vp + i], 0.0);
  }
}

TEST(CrossEntropy, StableForLargeLogits) {
  // (1e4, -1e4, 1e4 - 1), target 2: log(1 + e^-1 + e^-20000) + 1; a naive
  // exp(1e4) overflows in float and double alike.
  const std::vector<int32_t> targets = {2};
  const double expected = 1.3132616875182228;
  const std::vector<float> lf = {1e4f, -1e4f, 1e4f - 1.0f};
  const std::vector<double> ld = {1e4, -1e4, 1e4 - 1.0};
  float lossf;
  double lossd;
  gpt::cpu::crossentropy_forward(&lossf, lf.data(), targets.data(), 1, 3, 3);
  gpt::cpu::crossentropy_forward(&lossd, ld.data(), targets.data(), 1, 3, 3);
  EXPECT_NEAR(lossd, expected, 1e-12);
  // float spacing at 1e4 is ~1e-3, so lse - x[target] loses digits there.
  EXPECT_NEAR(lossf, expected, 2e-3);

  std::vector<float> df(3);
  const float one = 1.0f;
  gpt::cpu::crossentropy_backward(df.data(), lf.data(), targets.data(), &one, 1, 3, 3);
  for (float g : df) EXPECT_TRUE(std::isfinite(g));
  EXPECT_NEAR(df[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-3);
}

TEST(CrossEntropy, BackwardMayAliasLogits) {
  auto logits = random_vector(N * Vp, 4);
  const auto dloss = random_vector(N, 5);
  std::vector<double> separate(N * Vp);
  gpt::cpu::crossentropy_backward(separate.data(), logits.data(), kTargets.data(), dloss.data(), N, V, Vp);
  gpt::cpu::crossentropy_backward(logits.data(), logits.data(), kTargets.data(), dloss.data(), N, V, Vp);
  EXPECT_EQ(logits, separate);
}

TEST(CrossEntropy, RejectsTargetsOutsideTheVocabulary) {
  const std::vector<double> logits(Vp, 0.0);
  const std::vector<int32_t> bad = {V};  // a padding column is not a token
  double loss;
  EXPECT_THROW(gpt::cpu::crossentropy_forward(&loss, logits.data(), bad.data(), 1, V, Vp), gpt::Error);
  const std::vector<int32_t> negative = {-2};  // -1 is kIgnoreTarget, any other negative id is an error
  EXPECT_THROW(gpt::cpu::crossentropy_forward(&loss, logits.data(), negative.data(), 1, V, Vp), gpt::Error);
}

// Rows whose target is kIgnoreTarget: loss 0 and a zero gradient row (stale
// NaN overwritten), whatever their dloss; the other rows as the formula says,
// -log softmax(x)[target] in double from T×V loops.
TEST(CrossEntropy, IgnoredTargetsScoreZeroWithAZeroGradientRow) {
  const std::vector<int32_t> targets = {0, gpt::kIgnoreTarget, 3, gpt::kIgnoreTarget, 6};
  const auto logits = random_vector(N * Vp, 6, -3.0, 3.0);
  const auto dloss = random_vector(N, 7);
  std::vector<double> losses(N, std::numeric_limits<double>::quiet_NaN());
  gpt::cpu::crossentropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
  std::vector<double> dlogits(N * Vp, std::numeric_limits<double>::quiet_NaN());
  gpt::cpu::crossentropy_backward(dlogits.data(), logits.data(), targets.data(), dloss.data(), N, V, Vp);
  for (int n = 0; n < N; ++n) {
    const double* x = logits.data() + n * Vp;
    if (targets[n] == gpt::kIgnoreTarget) {
      EXPECT_EQ(losses[n], 0.0) << "row " << n;
      for (int i = 0; i < Vp; ++i) EXPECT_EQ(dlogits[n * Vp + i], 0.0) << "row " << n << " column " << i;
      continue;
    }
    double z = 0;
    for (int i = 0; i < V; ++i) z += std::exp(x[i]);
    EXPECT_NEAR(losses[n], std::log(z) - x[targets[n]], 1e-13) << "row " << n;
    for (int i = 0; i < V; ++i) {
      const double p = std::exp(x[i]) / z;
      EXPECT_NEAR(dlogits[n * Vp + i], dloss[n] * (p - (i == targets[n] ? 1.0 : 0.0)), 1e-13) << n << "," << i;
    }
  }
}

TEST(CrossEntropy, GradientWithIgnoredTargetsMatchesFiniteDifferences) {
  const std::vector<int32_t> targets = {gpt::kIgnoreTarget, 6, gpt::kIgnoreTarget, 3, 1};
  auto logits = random_vector(N * Vp, 8, -3.0, 3.0);
  const auto w = random_vector(N, 9);
  std::vector<double> losses(N), dlogits(N * Vp, 0.0);
  auto loss = [&] {
    gpt::cpu::crossentropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
    return weighted_sum(losses, w);
  };
  gpt::cpu::crossentropy_backward(dlogits.data(), logits.data(), targets.data(), w.data(), N, V, Vp);
  const double err = max_rel_error(dlogits, numeric_gradient(logits, loss));
  std::cout << "[gradcheck] crossentropy with ignored targets dlogits max_rel_err=" << err << "\n";
  EXPECT_LT(err, 1e-6);
}

}  // namespace
