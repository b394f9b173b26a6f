// Grouped-query attention's repeat of the key/value heads (docs/blocks.md;
// Ainslie et al. 2023, §2.2: "each group shares a single key head and value
// head"; query head h reads key/value head ⌊h / (NH/NKV)⌋, as Hugging Face's
// repeat_kv lays them out): the expansion against that index rule written
// out in loops, and the reduction as its adjoint (<expand x, y> = <x,
// reduce y>) and against finite differences.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "util/gradcheck.h"

namespace {

using gpt::test::random_vector;

TEST(Gqa, ExpandRepeatsEachKeyValueHeadOverItsGroup) {
  for (auto [NH, NKV] : {std::pair{4, 2}, std::pair{6, 1}, std::pair{3, 3}}) {
    const int N = 5, D = 3, C = NH * D, W = C + 2 * NKV * D;
    const auto g = random_vector(N * W, 1);
    std::vector<double> qkv(N * 3 * C, -1.0);
    gpt::cpu::gqa_expand(qkv.data(), g.data(), N, NH, NKV, D);
    for (int n = 0; n < N; ++n)
      for (int h = 0; h < NH; ++h)
        for (int d = 0; d < D; ++d) {
          const int kv = h / (NH / NKV);
          EXPECT_EQ(qkv[n * 3 * C + h * D + d], g[n * W + h * D + d]);                         // q
          EXPECT_EQ(qkv[n * 3 * C + C + h * D + d], g[n * W + C + kv * D + d]);                // k
          EXPECT_EQ(qkv[n * 3 * C + 2 * C + h * D + d], g[n * W + C + NKV * D + kv * D + d]);  // v
        }
  }
}

TEST(Gqa, ReduceIsTheAdjointOfExpandAndAccumulates) {
  const int N = 4, NH = 6, NKV = 2, D = 2, C = NH * D, W = C + 2 * NKV * D;
  auto x = random_vector(N * W, 2);
  const auto y = random_vector(N * 3 * C, 3);
  std::vector<double> ex(N * 3 * C), rx(N * W, 0.0);
  gpt::cpu::gqa_expand(ex.data(), x.data(), N, NH, NKV, D);
  gpt::cpu::gqa_reduce(rx.data(), y.data(), N, NH, NKV, D);
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < ex.size(); ++i) lhs += ex[i] * y[i];
  for (size_t i = 0; i < rx.size(); ++i) rhs += x[i] * rx[i];
  EXPECT_NEAR(lhs, rhs, 1e-12);
  // As a gradient: d<expand x, y>/dx by finite differences.
  auto loss = [&] {
    gpt::cpu::gqa_expand(ex.data(), x.data(), N, NH, NKV, D);
    return gpt::test::weighted_sum(ex, y);
  };
  gpt::test::expect_gradient("gqa", "dgrouped", rx, gpt::test::numeric_gradient(x, loss));
  std::vector<double> twice = rx;
  gpt::cpu::gqa_reduce(twice.data(), y.data(), N, NH, NKV, D);
  for (size_t i = 0; i < rx.size(); ++i) EXPECT_DOUBLE_EQ(twice[i], 2 * rx[i]);
}

}  // namespace
