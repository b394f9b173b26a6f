// Token + position embedding: forward against the direct gather, backward
// against finite differences, and the scatter-add of repeated tokens.
#include <gtest/gtest.h>

#include <iostream>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "util/gradcheck.h"

namespace {

using gpt::test::numeric_gradient;
using gpt::test::random_vector;
using gpt::test::weighted_sum;

void expect_gradient(const char* name, const std::vector<double>& analytic, const std::vector<double>& numeric) {
  gpt::test::expect_gradient("encoder", name, analytic, numeric);
}

constexpr int B = 2, Tn = 3, C = 5, V = 7;
// Token 4 appears three times so dwte[4] must sum three rows of dout.
const std::vector<int32_t> kTokens = {4, 1, 4, 0, 4, 6};  // (B,T)

TEST(Encoder, ForwardIsTokenPlusPositionRow) {
  auto wte = random_vector(V * C, 1), wpe = random_vector(Tn * C, 2);
  std::vector<double> out(B * Tn * C);
  gpt::cpu::encoder_forward(out.data(), kTokens.data(), wte.data(), wpe.data(), B, Tn, C);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t)
      for (int c = 0; c < C; ++c)
        EXPECT_EQ(out[(b * Tn + t) * C + c], wte[kTokens[b * Tn + t] * C + c] + wpe[t * C + c]);
}

TEST(Encoder, ForwardWithoutPositionTableCopiesTokenRow) {
  auto wte = random_vector(V * C, 3);
  std::vector<double> out(B * Tn * C);
  gpt::cpu::encoder_forward<double>(out.data(), kTokens.data(), wte.data(), nullptr, B, Tn, C);
  for (int bt = 0; bt < B * Tn; ++bt)
    for (int c = 0; c < C; ++c) EXPECT_EQ(out[bt * C + c], wte[kTokens[bt] * C + c]);
}

TEST(Encoder, GradientMatchesFiniteDifferences) {
  auto wte = random_vector(V * C, 4), wpe = random_vector(Tn * C, 5);
  const auto w = random_vector(B * Tn * C, 6);
  std::vector<double> out(B * Tn * C);
  auto loss = [&] {
    gpt::cpu::encoder_forward(out.data(), kTokens.data(), wte.data(), wpe.data(), B, Tn, C);
    return weighted_sum(out, w);
  };
  std::vector<double> dwte(V * C, 0.0), dwpe(Tn * C, 0.0);
  gpt::cpu::encoder_backward(dwte.data(), dwpe.data(), w.data(), kTokens.data(), B, Tn, C);
  expect_gradient("dwte", dwte, numeric_gradient(wte, loss));
  expect_gradient("dwpe", dwpe, numeric_gradient(wpe, loss));
}

TEST(Encoder, BackwardAccumulatesAndSkipsMissingPositionTable) {
  const auto dout = random_vector(B * Tn * C, 7);
  std::vector<double> once(V * C, 0.0), twice(V * C, 0.0);
  gpt::cpu::encoder_backward<double>(once.data(), nullptr, dout.data(), kTokens.data(), B, Tn, C);
  gpt::cpu::encoder_backward<double>(twice.data(), nullptr, dout.data(), kTokens.data(), B, Tn, C);
  gpt::cpu::encoder_backward<double>(twice.data(), nullptr, dout.data(), kTokens.data(), B, Tn, C);
  for (int i = 0; i < V * C; ++i) EXPECT_DOUBLE_EQ(twice[i], 2 * once[i]);
  // Token 4 at rows 0, 2, 4; token 3 never appears.
  for (int c = 0; c < C; ++c) {
    EXPECT_DOUBLE_EQ(once[4 * C + c], dout[0 * C + c] + dout[2 * C + c] + dout[4 * C + c]);
    EXPECT_EQ(once[3 * C + c], 0.0);
  }
}

}  // namespace
