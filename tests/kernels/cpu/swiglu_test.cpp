// The MLP activations of the modern blocks (docs/blocks.md): SwiGLU (Shazeer
// 2020, "GLU Variants Improve Transformer", eq. 6: FFN_SwiGLU(x) = (Swish₁(xW)
// ⊗ xV)W₂, Swish₁(x) = x·σ(x)) on the [gate | up] halves of one projection,
// and ReLU² (So et al. 2021, "Primer": relu(x)²), each against its formula in
// double, its backward against finite differences, and float against double.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "util/gradcheck.h"

namespace {

using gpt::test::numeric_gradient;
using gpt::test::random_vector;
using gpt::test::weighted_sum;

constexpr int N = 4, F = 9;

TEST(SwiGlu, ForwardIsSwishOfTheGateTimesTheUpHalf) {
  const auto h = random_vector(N * 2 * F, 1, -6.0, 6.0);
  std::vector<double> out(N * F);
  gpt::cpu::swiglu_forward(out.data(), h.data(), N, F);
  for (int n = 0; n < N; ++n)
    for (int f = 0; f < F; ++f) {
      const double g = h[n * 2 * F + f], u = h[n * 2 * F + F + f];
      EXPECT_NEAR(out[n * F + f], g / (1.0 + std::exp(-g)) * u, 1e-14);
    }
}

TEST(SwiGlu, GradientMatchesFiniteDifferences) {
  auto h = random_vector(N * 2 * F, 2, -5.0, 5.0);
  const auto w = random_vector(N * F, 3);
  std::vector<double> out(N * F), dh(N * 2 * F, 0.0);
  auto loss = [&] {
    gpt::cpu::swiglu_forward(out.data(), h.data(), N, F);
    return weighted_sum(out, w);
  };
  gpt::cpu::swiglu_backward(dh.data(), h.data(), w.data(), N, F);
  gpt::test::expect_gradient("swiglu", "dinp", dh, numeric_gradient(h, loss));
}

TEST(Relu2, ForwardAndGradient) {
  auto x = random_vector(40, 4, -3.0, 3.0);
  x[0] = 0.0;
  std::vector<double> out(40), dx(40, 0.0);
  gpt::cpu::relu2_forward(out.data(), x.data(), 40);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(out[i], x[i] > 0 ? x[i] * x[i] : 0.0);
  const auto w = random_vector(40, 5);
  gpt::cpu::relu2_backward(dx.data(), x.data(), w.data(), 40);
  for (int i = 0; i < 40; ++i) EXPECT_NEAR(dx[i], x[i] > 0 ? 2 * x[i] * w[i] : 0.0, 1e-15);
  x[0] = 0.5;  // away from the kink for the finite differences
  std::fill(dx.begin(), dx.end(), 0.0);
  gpt::cpu::relu2_backward(dx.data(), x.data(), w.data(), 40);
  auto loss = [&] {
    gpt::cpu::relu2_forward(out.data(), x.data(), 40);
    return weighted_sum(out, w);
  };
  gpt::test::expect_gradient("relu2", "dinp", dx, numeric_gradient(x, loss));
}

// Exact GELU (Hendrycks & Gimpel 2016, eq. 1: x·Φ(x)) at points where Φ is
// tabulated (Abramowitz & Stegun 26.2), its backward by finite differences,
// and float against double.
TEST(GeluErf, MatchesTabulatedNormalCdfAndFiniteDifferences) {
  const std::vector<double> x = {0.0, 1.0, -2.0, 2.5, -0.5};
  const std::vector<double> phi = {0.5, 0.8413447460685429, 0.0227501319481792, 0.9937903346742239, 0.3085375387259869};
  std::vector<double> y(x.size());
  gpt::cpu::gelu_erf_forward(y.data(), x.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i] * phi[i], 1e-15) << x[i];
  auto v = random_vector(50, 8, -4.0, 4.0);
  const auto w = random_vector(50, 9);
  std::vector<double> out(50), dv(50, 0.0);
  gpt::cpu::gelu_erf_backward(dv.data(), v.data(), w.data(), 50);
  auto loss = [&] {
    gpt::cpu::gelu_erf_forward(out.data(), v.data(), 50);
    return weighted_sum(out, w);
  };
  gpt::test::expect_gradient("gelu_erf", "dinp", dv, numeric_gradient(v, loss));
  std::vector<float> fv(v.begin(), v.end()), fw(w.begin(), w.end()), fo(50), fdv(50, 0.f);
  gpt::cpu::gelu_erf_forward(fo.data(), fv.data(), 50);
  gpt::cpu::gelu_erf_backward(fdv.data(), fv.data(), fw.data(), 50);
  loss();
  for (int i = 0; i < 50; ++i) {
    EXPECT_NEAR(fo[i], out[i], 1e-6 * (1 + std::abs(out[i])));
    EXPECT_NEAR(fdv[i], dv[i], 1e-6 * (1 + std::abs(dv[i])));
  }
}

TEST(SwiGlu, FloatMatchesDoubleIncludingSaturatedGates) {
  const int n = 7, f = 300;
  auto h = random_vector(n * 2 * f, 6, -8.0, 8.0);
  h[0] = -200.0;  // e^200 saturates in float: σ = 0, no NaN
  h[1] = 200.0;
  const auto dy = random_vector(n * f, 7);
  std::vector<double> out(n * f), dh(n * 2 * f, 0.0);
  gpt::cpu::swiglu_forward(out.data(), h.data(), n, f);
  gpt::cpu::swiglu_backward(dh.data(), h.data(), dy.data(), n, f);
  std::vector<float> fh(h.begin(), h.end()), fdy(dy.begin(), dy.end()), fo(n * f), fdh(n * 2 * f, 0.f);
  gpt::cpu::swiglu_forward(fo.data(), fh.data(), n, f);
  gpt::cpu::swiglu_backward(fdh.data(), fh.data(), fdy.data(), n, f);
  for (int i = 0; i < n * f; ++i) EXPECT_NEAR(fo[i], out[i], 2e-5 * (1 + std::abs(out[i]))) << i;
  for (int i = 0; i < n * 2 * f; ++i) EXPECT_NEAR(fdh[i], dh[i], 2e-5 * (1 + std::abs(dh[i]))) << i;
}

}  // namespace
