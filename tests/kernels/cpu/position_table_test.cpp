// The distance biases under position ids (attn::position_table;
// docs/training_for_length.md): cpu::position_table_forward against the
// papers' formulas written out here in double at distances between ids —
// ALiBi (Press et al. 2022, the bias −m·(i − j) with the geometric slopes
// 2^(−8h/n)), KERPLE (Chi et al. 2022, the logarithmic −r₁ ln(1 + r₂|m − n|)
// and power −r₁|m − n|^r₂ kernels) and FIRE (Li et al. 2023: the MLP of
// ψ(i − j)/ψ(max(i, L)), ψ(x) = ln(cx + 1)) —, ids 0..T−1 against the plain
// tables, the parameter gradients by finite differences in double, and the
// whole attention op with a per-sequence table against the plain op.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "config/attention.h"
#include "kernels/cpu/cpu_kernels.h"
#include "util/gradcheck.h"

namespace gpt::cpu {
namespace {

using gpt::test::numeric_gradient;
using gpt::test::random_vector;
using gpt::test::weighted_sum;

AttentionSpec with_bias(PositionBias b, int T) {
  AttentionConfig a;
  a.preset = "softmax";
  a.position_bias = stage_name(b);
  ModelConfig mc;
  mc.context = T;
  return resolve_attention(a, mc);
}

// ALiBi's slopes for n heads (n a power of two): 2^(−8(h+1)/n).
double ref_alibi(int h, int n, int dist) { return -std::pow(2.0, -8.0 * (h + 1) / n) * dist; }
double softplus(double x) { return std::log1p(std::exp(x)); }
// KERPLE with r₁ = softplus(ρ₁), r₂ = softplus(ρ₂) (log) or 2σ(ρ₂) (power).
double ref_kerple(PositionBias k, double rho1, double rho2, int dist) {
  const double r1 = softplus(rho1);
  if (k == PositionBias::KerplePower) {
    const double r2 = 2.0 / (1.0 + std::exp(-rho2));
    return dist == 0 ? 0.0 : -r1 * std::pow(static_cast<double>(dist), r2);
  }
  return -r1 * std::log(1.0 + softplus(rho2) * dist);
}
// FIRE's MLP (width 32, ReLU) of u = ψ(Δ)/(ψ(max(pi, |m|L0)) + 1e-6).
double ref_fire(const std::vector<double>& p, int NH, int h, double L0, int pi, int dist) {
  const int W = 32;
  const double c = std::abs(p[(2 + NH) * W + NH]), m = std::abs(p[(2 + NH) * W + NH + 1]);
  const double u = std::log(c * dist + 1) / (std::log(c * std::max(static_cast<double>(pi), m * L0) + 1) + 1e-6);
  double y = p[(2 + NH) * W + h];
  for (int k = 0; k < W; ++k) y += p[2 * W + h * W + k] * std::max(0.0, p[k] * u + p[W + k]);
  return y;
}

// PoSE-like ids: two chunks per row, the second skipped ahead.
std::vector<int32_t> jumping_ids(int B, int T) {
  std::vector<int32_t> ids(static_cast<size_t>(B) * T);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) ids[b * T + t] = t + (t >= T / 2 ? 7 + 13 * b : 0);
  return ids;
}

std::vector<double> params_for(const AttentionSpec& s, int NH, uint64_t seed) {
  const int np = attn::position_table::param_count(s, NH);
  std::vector<double> p = random_vector(np, seed, -1, 1);
  if (s.fire()) {
    p[attn::fire::c(NH)] = 0.4;
    p[attn::fire::m(NH)] = 0.8;
  }
  return p;
}

TEST(PositionTable, EntriesAreThePapersBiasesAtDistancesBetweenIds) {
  const int B = 2, T = 9, NH = 4;
  const auto ids = jumping_ids(B, T);
  for (PositionBias kind :
       {PositionBias::Alibi, PositionBias::KerpleLog, PositionBias::KerplePower, PositionBias::Fire}) {
    const AttentionSpec s = with_bias(kind, T);
    const auto p = params_for(s, NH, 3);
    std::vector<double> table(static_cast<size_t>(B) * NH * T * T, -9.0);
    position_table_forward(table.data(), p.empty() ? nullptr : p.data(), ids.data(), B, T, NH, s);
    const double L0 = attn::fire::threshold0(T);
    double worst = 0;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int i = 0; i < T; ++i)
          for (int d = 0; d < T; ++d) {
            const double got = table[((static_cast<size_t>(b) * NH + h) * T + i) * T + d];
            if (d > i) {
              ASSERT_EQ(got, 0.0) << stage_name(kind) << ": above the diagonal";
              continue;
            }
            const int pi = ids[b * T + i], dist = pi - ids[b * T + i - d];
            const double want = kind == PositionBias::Alibi  ? ref_alibi(h, NH, dist)
                                : kind == PositionBias::Fire ? ref_fire(p, NH, h, L0, pi, dist)
                                                             : ref_kerple(kind, p[2 * h], p[2 * h + 1], dist);
            worst = std::max(worst, std::abs(got - want));
          }
    EXPECT_LT(worst, 1e-12) << stage_name(kind);
  }
}

// Ids 0..T−1 give the plain kernels' entries: FIRE's table, bit for bit,
// in every sequence.
TEST(PositionTable, IdsOfTheIndexGiveFiresPlainTable) {
  const int B = 3, T = 11, NH = 2;
  const AttentionSpec s = with_bias(PositionBias::Fire, 4);
  const auto p = params_for(s, NH, 5);
  std::vector<int32_t> ids(static_cast<size_t>(B) * T);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % T);
  std::vector<double> table(static_cast<size_t>(B) * NH * T * T), plain(static_cast<size_t>(NH) * T * T);
  position_table_forward(table.data(), p.data(), ids.data(), B, T, NH, s);
  fire_forward(plain.data(), p.data(), T, NH, attn::fire::threshold0(4));
  for (int b = 0; b < B; ++b)
    EXPECT_TRUE(std::equal(plain.begin(), plain.end(), table.begin() + static_cast<size_t>(b) * plain.size())) << b;
}

// A key whose id exceeds its query's (ids restarted at a document: the mask
// hides it) takes distance 0, so every entry is finite.
TEST(PositionTable, FallingIdsTakeDistanceZero) {
  const int T = 4, NH = 2;
  const AttentionSpec s = with_bias(PositionBias::KerpleLog, T);
  const auto p = params_for(s, NH, 7);
  const std::vector<int32_t> ids = {0, 1, 0, 1};  // a document restarts at t = 2
  std::vector<double> table(static_cast<size_t>(NH) * T * T);
  position_table_forward(table.data(), p.data(), ids.data(), 1, T, NH, s);
  // Query 2 (id 0) against key 1 (id 1): distance 0, b = 0.
  EXPECT_EQ(table[2 * T + 1], 0.0);
  // Query 3 (id 1) against key 2 (id 0): distance 1.
  EXPECT_DOUBLE_EQ(table[3 * T + 1], ref_kerple(PositionBias::KerpleLog, p[0], p[1], 1));
}

// dL/dp of L = Σ w·table by finite differences in double (KERPLE's ρ and
// FIRE's MLP, c and m); ALiBi has no parameters.
TEST(PositionTable, ParameterGradientsMatchFiniteDifferences) {
  const int B = 2, T = 7, NH = 2;
  const auto ids = jumping_ids(B, T);
  const size_t n = static_cast<size_t>(B) * NH * T * T;
  const auto w = random_vector(n, 11);
  for (PositionBias kind : {PositionBias::KerpleLog, PositionBias::KerplePower, PositionBias::Fire}) {
    const AttentionSpec s = with_bias(kind, T);
    auto p = params_for(s, NH, 13);
    std::vector<double> dtable = w, analytic(p.size(), 0.0);
    // Entries above the diagonal are ignored: give them weight anyway.
    position_table_backward(analytic.data(), dtable.data(), p.data(), ids.data(), B, T, NH, s);
    auto loss = [&] {
      std::vector<double> t(n);
      position_table_forward(t.data(), p.data(), ids.data(), B, T, NH, s);
      return weighted_sum(t, w);
    };
    const auto numeric = numeric_gradient(p, loss, 1e-5);
    EXPECT_LT(test::max_rel_error(analytic, numeric, 1e-7), 1e-6) << stage_name(kind);
    double norm = 0;
    for (double g : analytic) norm += std::abs(g);
    EXPECT_GT(norm, 0.0) << stage_name(kind);
  }
  const AttentionSpec alibi = with_bias(PositionBias::Alibi, T);
  EXPECT_EQ(attn::position_table::param_count(alibi, NH), 0);
}

// The attention op reading a per-sequence table (HeadParams::fire_per_sequence)
// of plain ids equals the op with the bias computed by the kernels, for
// ALiBi and KERPLE; the kernel spec reads the table as FIRE's.
TEST(PositionTable, AttentionWithThePlainIdsTableIsThePlainOp) {
  const int B = 2, T = 13, NH = 4, C = 32;
  const auto qkv = random_vector(static_cast<size_t>(B) * T * 3 * C, 17);
  std::vector<int32_t> ids(static_cast<size_t>(B) * T);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % T);
  for (PositionBias kind : {PositionBias::Alibi, PositionBias::KerpleLog}) {
    const AttentionSpec s = with_bias(kind, T);
    const auto p = params_for(s, NH, 19);
    std::vector<double> out0(static_cast<size_t>(B) * T * C), out1(out0.size());
    HeadParams<double> hp;
    hp.kerple = p.empty() ? nullptr : p.data();
    attention_forward<double>(out0.data(), nullptr, qkv.data(), B, T, C, NH, s, hp, nullptr);
    std::vector<double> table(static_cast<size_t>(B) * NH * T * T);
    position_table_forward(table.data(), p.empty() ? nullptr : p.data(), ids.data(), B, T, NH, s);
    HeadParams<double> ht;
    ht.fire = table.data();
    ht.fire_per_sequence = true;
    attention_forward<double>(out1.data(), nullptr, qkv.data(), B, T, C, NH, attn::position_table::kernel_spec(s), ht,
                              nullptr);
    double worst = 0;
    for (size_t i = 0; i < out0.size(); ++i) worst = std::max(worst, std::abs(out0[i] - out1[i]));
    EXPECT_LT(worst, 1e-14) << stage_name(kind);
  }
}

// With ids that differ per sequence, each sequence's rows read their own
// table: the batched op equals the op run on each sequence alone with its
// slice of the table.
TEST(PositionTable, EachSequenceReadsItsOwnTable) {
  const int B = 3, T = 10, NH = 2, C = 16;
  const auto ids = jumping_ids(B, T);
  const AttentionSpec s = with_bias(PositionBias::KerpleLog, T);
  const auto p = params_for(s, NH, 23);
  const size_t TT = static_cast<size_t>(T) * T, row = static_cast<size_t>(T) * 3 * C;
  std::vector<double> table(B * NH * TT);
  position_table_forward(table.data(), p.data(), ids.data(), B, T, NH, s);
  const auto qkv = random_vector(B * row, 29);
  const AttentionSpec ks = attn::position_table::kernel_spec(s);
  HeadParams<double> ht;
  ht.fire = table.data();
  ht.fire_per_sequence = true;
  std::vector<double> out(static_cast<size_t>(B) * T * C);
  attention_forward<double>(out.data(), nullptr, qkv.data(), B, T, C, NH, ks, ht, nullptr);
  for (int b = 0; b < B; ++b) {
    HeadParams<double> one;
    one.fire = table.data() + b * NH * TT;
    std::vector<double> alone(static_cast<size_t>(T) * C);
    attention_forward<double>(alone.data(), nullptr, qkv.data() + b * row, 1, T, C, NH, ks, one, nullptr);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), out.begin() + static_cast<size_t>(b) * T * C)) << b;
  }
}

}  // namespace
}  // namespace gpt::cpu
