// LayerNorm: normalisation statistics of the forward pass, finite-difference
// gradients of the backward pass, and accumulation into the gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "util/gradcheck.h"

namespace {

using gpt::test::numeric_gradient;
using gpt::test::random_vector;
using gpt::test::weighted_sum;

void expect_gradient(const char* name, const std::vector<double>& analytic, const std::vector<double>& numeric) {
  gpt::test::expect_gradient("layernorm", name, analytic, numeric);
}

constexpr int N = 5, C = 7;

TEST(LayerNorm, ForwardNormalisesEachRowWithBiasedVarianceAndEps) {
  // Offset rows so a one-pass E[x²]-E[x]² would lose digits.
  auto inp = random_vector(N * C, 1, 99.0, 101.0);
  std::vector<double> weight(C, 1.0), bias(C, 0.0), out(N * C), mean(N), rstd(N);
  gpt::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
  for (int n = 0; n < N; ++n) {
    double m = 0, var = 0, om = 0, ovar = 0;
    for (int c = 0; c < C; ++c) m += inp[n * C + c] / C;
    for (int c = 0; c < C; ++c) var += (inp[n * C + c] - m) * (inp[n * C + c] - m) / C;  // biased
    for (int c = 0; c < C; ++c) om += out[n * C + c] / C;
    for (int c = 0; c < C; ++c) ovar += out[n * C + c] * out[n * C + c] / C;
    EXPECT_NEAR(mean[n], m, 1e-12);
    EXPECT_NEAR(rstd[n], 1.0 / std::sqrt(var + 1e-5), 1e-12);
    EXPECT_NEAR(om, 0.0, 1e-12);
    // eps = 1e-5 shrinks the unit variance to var / (var + eps)
    EXPECT_NEAR(ovar, var / (var + 1e-5), 1e-12);
  }
}

TEST(LayerNorm, ForwardAppliesWeightAndBiasAndAllowsNullStats) {
  auto inp = random_vector(N * C, 2), weight = random_vector(C, 3), bias = random_vector(C, 4);
  std::vector<double> ones(C, 1.0), zeros(C, 0.0), plain(N * C), out(N * C);
  gpt::cpu::layernorm_forward<double>(plain.data(), nullptr, nullptr, inp.data(), ones.data(), zeros.data(), N, C);
  gpt::cpu::layernorm_forward<double>(out.data(), nullptr, nullptr, inp.data(), weight.data(), bias.data(), N, C);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) EXPECT_NEAR(out[n * C + c], plain[n * C + c] * weight[c] + bias[c], 1e-14);
}

struct LayerNormCase {
  // The finite-difference step is absolute while LayerNorm only sees x/std:
  // a spread of ±3 keeps the step small next to each row's std.
  std::vector<double> inp = random_vector(N * C, 5, -3.0, 3.0), weight = random_vector(C, 6),
                      bias = random_vector(C, 7);
  std::vector<double> w = random_vector(N * C, 8);  // dL/dout
  std::vector<double> out = std::vector<double>(N * C), mean = std::vector<double>(N), rstd = std::vector<double>(N);

  double loss() {
    gpt::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
    return weighted_sum(out, w);
  }
  void backward(std::vector<double>& dinp, std::vector<double>& dweight, std::vector<double>& dbias) {
    loss();  // refresh mean, rstd
    gpt::cpu::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(),
                                 mean.data(), rstd.data(), N, C);
  }
};

TEST(LayerNorm, GradientMatchesFiniteDifferences) {
  LayerNormCase k;
  std::vector<double> dinp(N * C, 0.0), dweight(C, 0.0), dbias(C, 0.0);
  k.backward(dinp, dweight, dbias);
  auto loss = [&] { return k.loss(); };
  expect_gradient("dinp", dinp, numeric_gradient(k.inp, loss));
  expect_gradient("dweight", dweight, numeric_gradient(k.weight, loss));
  expect_gradient("dbias", dbias, numeric_gradient(k.bias, loss));
}

TEST(LayerNorm, BackwardAccumulates) {
  LayerNormCase k;
  std::vector<double> dinp1(N * C, 0.0), dw1(C, 0.0), db1(C, 0.0);
  std::vector<double> dinp2(N * C, 0.0), dw2(C, 0.0), db2(C, 0.0);
  k.backward(dinp1, dw1, db1);
  k.backward(dinp2, dw2, db2);
  k.backward(dinp2, dw2, db2);
  for (int i = 0; i < N * C; ++i) EXPECT_DOUBLE_EQ(dinp2[i], 2 * dinp1[i]);
  for (int c = 0; c < C; ++c) {
    EXPECT_DOUBLE_EQ(dw2[c], 2 * dw1[c]);
    EXPECT_DOUBLE_EQ(db2[c], 2 * db1[c]);
  }
}

}  // namespace
