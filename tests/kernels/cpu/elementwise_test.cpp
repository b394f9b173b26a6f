// Element-wise helpers: residual add and its gradient, in-place add and
// scale, the deterministic double-accumulated sum of squares, and the forget
// gate's prefix sums of ln σ(g) with their backward.
#include <gtest/gtest.h>
#include <omp.h>

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

TEST(Elementwise, ResidualForwardAddsAndItsBackwardIsAddInplace) {
  constexpr size_t n = 13;
  auto a = random_vector(n, 1), b = random_vector(n, 2);
  const auto w = random_vector(n, 3);
  std::vector<double> out(n);
  gpt::cpu::residual_forward(out.data(), a.data(), b.data(), n);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], a[i] + b[i]);

  auto loss = [&] {
    gpt::cpu::residual_forward(out.data(), a.data(), b.data(), n);
    return weighted_sum(out, w);
  };
  // The residual's backward: both branches receive dout, accumulated.
  std::vector<double> da(n, 0.0), db(n, 0.0);
  gpt::cpu::add_inplace(da.data(), w.data(), n);
  gpt::cpu::add_inplace(db.data(), w.data(), n);
  for (auto [name, grad, x] : {std::tuple{"da", &da, &a}, std::tuple{"db", &db, &b}}) {
    const double err = max_rel_error(*grad, numeric_gradient(*x, loss));
    std::cout << "[gradcheck] residual " << name << " max_rel_err=" << err << "\n";
    EXPECT_LT(err, 1e-6) << name;
  }
}

TEST(Elementwise, AddInplaceAndScaleInplace) {
  std::vector<float> x = {1.0f, -2.0f, 3.5f}, y = {0.5f, 0.25f, -1.0f};
  gpt::cpu::add_inplace(x.data(), y.data(), x.size());
  EXPECT_EQ(x, (std::vector<float>{1.5f, -1.75f, 2.5f}));
  gpt::cpu::scale_inplace(x.data(), 2.0f, x.size());
  EXPECT_EQ(x, (std::vector<float>{3.0f, -3.5f, 5.0f}));
}

TEST(Elementwise, SumSquaresAccumulatesInDoubleAcrossChunks) {
  // 100000 floats span several fixed-size chunks. 0.1f is not exact; its
  // square summed in float would drift in the 3rd-4th digit at this count.
  constexpr size_t n = 100000;
  std::vector<float> x(n, 0.1f);
  const double sq = double(0.1f) * double(0.1f);
  // Double rounding over 1e5 additions stays below 1e5 * 1e-16 * 1000 = 1e-8;
  // float accumulation would be off by ~1e-4 relative, i.e. ~0.1.
  EXPECT_NEAR(gpt::cpu::sum_squares(x.data(), n), n * sq, 1e-7);
  EXPECT_EQ(gpt::cpu::sum_squares(x.data(), 0), 0.0);

  const auto d = random_vector(12345, 4);
  double expected = 0;
  for (double v : d) expected += v * v;
  EXPECT_NEAR(gpt::cpu::sum_squares(d.data(), d.size()), expected, 1e-10);
}

TEST(Elementwise, SumSquaresIsBitIdenticalForAnyThreadCount) {
  const auto d = random_vector(70001, 5);
  const std::vector<float> x(d.begin(), d.end());
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = gpt::cpu::sum_squares(x.data(), x.size());
  omp_set_num_threads(2);
  const double two = gpt::cpu::sum_squares(x.data(), x.size());
  omp_set_num_threads(3);
  const double three = gpt::cpu::sum_squares(x.data(), x.size());
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, three);
}

}  // namespace

// ---- the forget gate (Lin et al. 2025; docs/contenders.md) ----------------------------------

namespace gpt::cpu {
namespace {

// c[b,h,t] = Σ_{l<=t} ln f_l with f = 1/(1 + e^{−g}), written from the paper's
// formula (log of the sigmoid, not log_sigmoid), for moderate g.
TEST(ForgetGate, PrefixSumsOfLogGatesMatchTheFormula) {
  const int B = 2, T = 9, NH = 3;
  const std::vector<double> g = gpt::test::random_vector(static_cast<size_t>(B) * T * NH, 5, -4, 6);
  std::vector<double> c(g.size());
  forget_forward(c.data(), g.data(), B, T, NH);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        double ref = 0;
        for (int l = 0; l <= t; ++l)
          ref += std::log(1.0 / (1.0 + std::exp(-g[(static_cast<size_t>(b) * T + l) * NH + h])));
        EXPECT_NEAR(c[(static_cast<size_t>(b) * NH + h) * T + t], ref, 1e-13) << b << " " << h << " " << t;
      }
  // Far positive logits: gates of 1, c = 0 up to e^{−g}; far negative: ln f = g.
  const std::vector<double> big = {50, -50};
  std::vector<double> cb(2);
  forget_forward(cb.data(), big.data(), 1, 2, 1);
  EXPECT_NEAR(cb[0], 0.0, 1e-21);
  EXPECT_NEAR(cb[1], -50.0, 1e-12);
}

// The backward against finite differences of Σ c·w, accumulating into dg.
TEST(ForgetGate, BackwardMatchesFiniteDifferences) {
  const int B = 2, T = 11, NH = 2;
  std::vector<double> g = gpt::test::random_vector(static_cast<size_t>(B) * T * NH, 6, -3, 5);
  const std::vector<double> w = gpt::test::random_vector(g.size(), 7);
  std::vector<double> dg(g.size(), 0.25), c(g.size());
  forget_backward(dg.data(), w.data(), g.data(), B, T, NH);
  for (double& x : dg) x -= 0.25;
  auto loss = [&] {
    forget_forward(c.data(), g.data(), B, T, NH);
    return gpt::test::weighted_sum(c, w);
  };
  gpt::test::expect_gradient("forget_gate", "dg", dg, gpt::test::numeric_gradient(g, loss));
}

// The output gate y·σ(g): the formula, and the backward against finite
// differences of Σ out·w, accumulating into dy and dg.
TEST(OutputGate, ForwardIsTheFormulaAndBackwardMatchesFiniteDifferences) {
  const size_t n = 57;
  std::vector<double> y = gpt::test::random_vector(n, 8, -2, 2), g = gpt::test::random_vector(n, 9, -6, 6);
  g[0] = 40;
  g[1] = -40;
  std::vector<double> out(n);
  sigmoid_gate_forward(out.data(), y.data(), g.data(), n);
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], y[i] / (1 + std::exp(-g[i])), 1e-15) << i;
  const std::vector<double> w = gpt::test::random_vector(n, 10);
  std::vector<double> dy(n, 0.5), dg(n, -0.5);
  sigmoid_gate_backward(dy.data(), dg.data(), w.data(), y.data(), g.data(), n);
  for (size_t i = 0; i < n; ++i) dy[i] -= 0.5, dg[i] += 0.5;
  auto loss = [&] {
    sigmoid_gate_forward(out.data(), y.data(), g.data(), n);
    return gpt::test::weighted_sum(out, w);
  };
  gpt::test::expect_gradient("output_gate", "dy", dy, gpt::test::numeric_gradient(y, loss));
  gpt::test::expect_gradient("output_gate", "dg", dg, gpt::test::numeric_gradient(g, loss));
}

}  // namespace
}  // namespace gpt::cpu
