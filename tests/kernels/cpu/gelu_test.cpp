// GELU (tanh approximation): reference values, finite-difference gradient,
// accumulation into dinp.
#include <gtest/gtest.h>

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

}  // namespace
