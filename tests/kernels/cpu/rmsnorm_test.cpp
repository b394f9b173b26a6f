// RMSNorm (docs/blocks.md; Zhang & Sennrich 2019, eq. 4: ā_i = a_i / RMS(a)
// · g_i, RMS(a) = sqrt(1/n Σ a_i²), with eps inside the root as Llama's
// LlamaRMSNorm): the forward against that formula in double, the backward
// against finite differences, accumulation, and float against double.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "util/gradcheck.h"

namespace {

using gpt::test::numeric_gradient;
using gpt::test::random_vector;
using gpt::test::weighted_sum;

constexpr int N = 5, C = 7;

TEST(RmsNorm, ForwardIsThePapersFormulaWithEpsInsideTheRoot) {
  for (double eps : {1e-5, 1e-6, 0.5}) {
    const auto inp = random_vector(N * C, 1, -2.0, 3.0), weight = random_vector(C, 2);
    std::vector<double> out(N * C), rstd(N);
    gpt::cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, eps);
    for (int n = 0; n < N; ++n) {
      double ms = 0;
      for (int c = 0; c < C; ++c) ms += inp[n * C + c] * inp[n * C + c];
      const double rms = std::sqrt(ms / C + eps);
      EXPECT_NEAR(rstd[n], 1.0 / rms, 1e-13) << eps;
      for (int c = 0; c < C; ++c) EXPECT_NEAR(out[n * C + c], inp[n * C + c] / rms * weight[c], 1e-13) << eps;
    }
  }
  // No mean is subtracted: a constant row keeps its sign.
  std::vector<double> row(C, 3.0), ones(C, 1.0), out(C);
  gpt::cpu::rmsnorm_forward<double>(out.data(), nullptr, row.data(), ones.data(), 1, C, 0.0);
  for (double v : out) EXPECT_NEAR(v, 1.0, 1e-15);
}

struct RmsCase {
  std::vector<double> inp = random_vector(N * C, 5, -3.0, 3.0), weight = random_vector(C, 6);
  std::vector<double> w = random_vector(N * C, 8);  // dL/dout
  std::vector<double> out = std::vector<double>(N * C), rstd = std::vector<double>(N);
  double loss() {
    gpt::cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, 1e-5);
    return weighted_sum(out, w);
  }
};

TEST(RmsNorm, GradientMatchesFiniteDifferencesAndAccumulates) {
  RmsCase k;
  k.loss();
  std::vector<double> dinp(N * C, 0.0), dweight(C, 0.0);
  gpt::cpu::rmsnorm_backward(dinp.data(), dweight.data(), k.w.data(), k.inp.data(), k.weight.data(), k.rstd.data(), N,
                             C);
  auto loss = [&] { return k.loss(); };
  gpt::test::expect_gradient("rmsnorm", "dinp", dinp, numeric_gradient(k.inp, loss));
  gpt::test::expect_gradient("rmsnorm", "dweight", dweight, numeric_gradient(k.weight, loss));
  // A second call adds the same again.
  std::vector<double> dinp2 = dinp, dweight2 = dweight;
  k.loss();
  gpt::cpu::rmsnorm_backward(dinp2.data(), dweight2.data(), k.w.data(), k.inp.data(), k.weight.data(), k.rstd.data(), N,
                             C);
  for (int i = 0; i < N * C; ++i) EXPECT_NEAR(dinp2[i], 2 * dinp[i], 1e-12);
  for (int c = 0; c < C; ++c) EXPECT_NEAR(dweight2[c], 2 * dweight[c], 1e-12);
}

TEST(RmsNorm, FloatMatchesDouble) {
  const int n = 33, c = 96;  // several channel blocks
  const auto inp = random_vector(n * c, 11, -4.0, 4.0), weight = random_vector(c, 12), dy = random_vector(n * c, 13);
  std::vector<double> out(n * c), rstd(n), dinp(n * c, 0.0), dw(c, 0.0);
  gpt::cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), n, c, 1e-6);
  gpt::cpu::rmsnorm_backward(dinp.data(), dw.data(), dy.data(), inp.data(), weight.data(), rstd.data(), n, c);
  std::vector<float> fi(inp.begin(), inp.end()), fw(weight.begin(), weight.end()), fdy(dy.begin(), dy.end());
  std::vector<float> fo(n * c), fr(n), fdi(n * c, 0.f), fdw(c, 0.f);
  gpt::cpu::rmsnorm_forward(fo.data(), fr.data(), fi.data(), fw.data(), n, c, 1e-6);
  gpt::cpu::rmsnorm_backward(fdi.data(), fdw.data(), fdy.data(), fi.data(), fw.data(), fr.data(), n, c);
  for (int i = 0; i < n * c; ++i) {
    EXPECT_NEAR(fo[i], out[i], 1e-5 * (1 + std::abs(out[i])));
    EXPECT_NEAR(fdi[i], dinp[i], 1e-4 * (1 + std::abs(dinp[i])));
  }
  for (int j = 0; j < c; ++j) EXPECT_NEAR(fdw[j], dw[j], 1e-4 * (1 + std::abs(dw[j])));
}

}  // namespace
