// GELU (tanh approximation): reference values, finite-difference gradient,
// accumulation into dinp.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "util/gradcheck.h"

namespace {

using gpt::test::max_rel_error;
using gpt::test::numeric_gradient;
using gpt::test::random_vector;
using gpt::test::weighted_sum;

TEST(Gelu, ForwardMatchesTanhApproximation) {
  // Reference values of 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³)))
  // evaluated in Python's math module.
  const std::vector<double> x = {0.0, 1.0, -2.0, 0.5};
  const std::vector<double> expected = {0.0, 0.8411919906082768, -0.04540230591222494, 0.34571400982514394};
  std::vector<double> out(x.size());
  gpt::cpu::gelu_forward(out.data(), x.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(out[i], expected[i], 1e-15) << "x=" << x[i];

  std::vector<float> xf(x.begin(), x.end()), outf(x.size());
  gpt::cpu::gelu_forward(outf.data(), xf.data(), xf.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(outf[i], expected[i], 1e-6) << "x=" << x[i];
}

TEST(Gelu, GradientMatchesFiniteDifferences) {
  constexpr size_t n = 37;
  // Within ±3: further out gelu' -> 0 and finite-difference noise dominates
  // the relative error.
  auto inp = random_vector(n, 1, -3.0, 3.0);
  const auto w = random_vector(n, 2);
  std::vector<double> out(n), dinp(n, 0.0);
  auto loss = [&] {
    gpt::cpu::gelu_forward(out.data(), inp.data(), n);
    return weighted_sum(out, w);
  };
  gpt::cpu::gelu_backward(dinp.data(), inp.data(), w.data(), n);
  const double err = max_rel_error(dinp, numeric_gradient(inp, loss));
  std::cout << "[gradcheck] gelu dinp max_rel_err=" << err << "\n";
  EXPECT_LT(err, 1e-6);
}

TEST(Gelu, BackwardAccumulates) {
  constexpr size_t n = 11;
  const auto inp = random_vector(n, 3), dout = random_vector(n, 4), start = random_vector(n, 5);
  std::vector<double> fresh(n, 0.0), acc = start;
  gpt::cpu::gelu_backward(fresh.data(), inp.data(), dout.data(), n);
  gpt::cpu::gelu_backward(acc.data(), inp.data(), dout.data(), n);
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(acc[i], start[i] + fresh[i], 1e-15);
}

// The float path evaluates x·sigmoid(2u) with its own exp: within a few
// float ulps of the double formula everywhere, including the tails where
// the clamps of the exp act, and bit-identical for any thread count
// (element-wise).
TEST(Gelu, FloatFastPathMatchesDoubleOverTheWholeRange) {
  std::vector<double> x;
  for (double v = -100.0; v <= 100.0; v += 0.0137) x.push_back(v);
  for (double v : {-1e30, -1e5, -87.5, -10.0, -1e-30, 0.0, 1e-30, 10.0, 44.0, 1e5, 1e30}) x.push_back(v);
  const size_t n = x.size();
  const auto dout = random_vector(n, 6);
  std::vector<double> y(n), dx(n, 0.0);
  gpt::cpu::gelu_forward(y.data(), x.data(), n);
  gpt::cpu::gelu_backward(dx.data(), x.data(), dout.data(), n);
  std::vector<float> xf(x.begin(), x.end()), doutf(dout.begin(), dout.end()), yf(n), dxf(n, 0.0f);
  gpt::cpu::gelu_forward(yf.data(), xf.data(), n);
  gpt::cpu::gelu_backward(dxf.data(), xf.data(), doutf.data(), n);
  double worst_y = 0, worst_dx = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(yf[i]) && std::isfinite(dxf[i])) << "x=" << x[i];
    // Relative to max(1, |y|): the float input itself is rounded by ~6e-8.
    const double xi = xf[i];
    double yd = 0.5 * xi * (1.0 + std::tanh(0.79788456080286535588 * (xi + 0.044715 * xi * xi * xi)));
    worst_y = std::max(worst_y, std::abs(yf[i] - yd) / std::max(1.0, std::abs(yd)));
    worst_dx = std::max(worst_dx, std::abs(dxf[i] - dx[i]) / std::max(1.0, std::abs(dx[i])));
  }
  std::cout << "[float-vs-double] gelu forward max_err=" << worst_y << " backward max_err=" << worst_dx << "\n";
  EXPECT_LT(worst_y, 1e-6);
  EXPECT_LT(worst_dx, 1e-5);  // dout rounded to float, and the x³ term amplifies input rounding
  // Far tails: exactly x on the right, a negligible negative on the left.
  EXPECT_EQ(yf[n - 2], 1e5f);
  EXPECT_LE(std::abs(yf[n - 10]), 1e-30f);
}

TEST(Gelu, FloatIsBitIdenticalForAnyThreadCount) {
  constexpr size_t n = 100003;  // several parallel chunks and a ragged tail
  const auto xd = random_vector(n, 7, -6.0, 6.0), dd = random_vector(n, 8);
  const std::vector<float> x(xd.begin(), xd.end()), d(dd.begin(), dd.end());
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> y(n), dx(n, 0.5f);
    gpt::cpu::gelu_forward(y.data(), x.data(), n);
    gpt::cpu::gelu_backward(dx.data(), x.data(), d.data(), n);
    y.insert(y.end(), dx.begin(), dx.end());
    return y;
  };
  const int saved = omp_get_max_threads();
  const auto one = run(1), three = run(3);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, three);
}

}  // namespace
