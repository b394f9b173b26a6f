// FIRE (docs/contenders.md; Li et al. 2023): the table b_h(i0, Δ) of
// cpu::fire_forward against the paper's formula written out here in double,
// and the gradient of every parameter of its block (the MLP, c and the
// threshold multiplier m) through the attention kernel by finite
// differences; ties of max(i0, L), thread-count independence.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "config/attention.h"
#include "kernels/cpu/cpu_kernels.h"
#include "util/gradcheck.h"

namespace gpt::cpu {
namespace {

using gpt::test::numeric_gradient;
using gpt::test::random_vector;
using gpt::test::weighted_sum;

constexpr int W = 32;  // the paper's MLP width

// The block's layout as the doc states it, written again here:
// [w1 (W) | b1 (W) | w2 (NH × W) | b2 (NH) | c | m].
struct Block {
  std::vector<double> w1, b1, w2, b2;
  double c = 0.1, m = 1;
  std::vector<double> flat() const {
    std::vector<double> p = w1;
    p.insert(p.end(), b1.begin(), b1.end());
    p.insert(p.end(), w2.begin(), w2.end());
    p.insert(p.end(), b2.begin(), b2.end());
    p.push_back(c);
    p.push_back(m);
    return p;
  }
};

// u = ln(|c|Δ + 1) / (ln(|c| max(i0, |m| L0) + 1) + 1e-6), 0-based positions.
double ref_u(double c, double m, double L0, int i0, int d) {
  const double norm = std::max(static_cast<double>(i0), std::abs(m * L0));
  return std::log(std::abs(c * d) + 1) / (std::log(std::abs(c * norm) + 1) + 1e-6);
}
double ref_bias(const Block& p, int NH, int h, double u) {
  (void)NH;
  double y = p.b2[h];
  for (int k = 0; k < W; ++k) y += p.w2[h * W + k] * std::max(0.0, p.w1[k] * u + p.b1[k]);
  return y;
}

// A block whose hidden units keep |w1 u + b1| >= margin for every u of a
// T-row table (so finite differences never cross a ReLU kink), with c < 0
// (FIRE uses |c|) and a threshold between rows.
Block make_block(int NH, int T, double L0, double c, double m, uint64_t seed) {
  Block p;
  p.w1 = random_vector(W, seed, -1, 1);
  p.b1 = random_vector(W, seed + 1, -1, 1);
  p.w2 = random_vector(static_cast<size_t>(NH) * W, seed + 2, -0.5, 0.5);
  p.b2 = random_vector(NH, seed + 3, -0.5, 0.5);
  p.c = c;
  p.m = m;
  for (int k = 0; k < W; ++k)
    for (int tries = 0; tries < 200; ++tries) {
      double closest = 1e9;
      for (int i0 = 0; i0 < T; ++i0)
        for (int d = 0; d <= i0; ++d) closest = std::min(closest, std::abs(p.w1[k] * ref_u(c, m, L0, i0, d) + p.b1[k]));
      if (closest >= 0.02) break;
      p.b1[k] += 0.013;
    }
  return p;
}

std::vector<double> table_of(const std::vector<double>& p, int NH, int T, double L0) {
  std::vector<double> t(static_cast<size_t>(NH) * T * T, -7.0);
  fire_forward(t.data(), p.data(), T, NH, L0);
  return t;
}

TEST(Fire, TableMatchesTheFormula) {
  const int NH = 3, T = 29;
  const double L0 = 6.25;
  ASSERT_EQ(attn::fire::count(NH), (2 + NH) * W + NH + 2);
  for (double c : {0.23, -0.4, 2.0})
    for (double m : {0.83, 1.7, 0.1}) {
      const Block p = make_block(NH, T, L0, c, m, 5);
      const std::vector<double> flat = p.flat();
      const std::vector<double> t = table_of(flat, NH, T, L0);
      std::vector<float> tf(t.size());
      const std::vector<float> pf(flat.begin(), flat.end());
      fire_forward(tf.data(), pf.data(), T, NH, L0);
      double err = 0, err_f = 0, scale = 0;
      for (int h = 0; h < NH; ++h)
        for (int i0 = 0; i0 < T; ++i0)
          for (int d = 0; d < T; ++d) {
            const size_t k = (static_cast<size_t>(h) * T + i0) * T + d;
            const double ref = d <= i0 ? ref_bias(p, NH, h, ref_u(c, m, L0, i0, d)) : 0.0;
            err = std::max(err, std::abs(t[k] - ref));
            err_f = std::max(err_f, std::abs(tf[k] - ref));
            scale = std::max(scale, std::abs(ref));
          }
      std::printf("[fire table] c=%5.2f m=%4.2f  double %.2e  float %.2e  (max |b| %.2f)\n", c, m, err, err_f, scale);
      EXPECT_LT(err, 1e-12 * std::max(1.0, scale));
      EXPECT_LT(err_f, 2e-6 * std::max(1.0, scale));
    }
  // Rows below the threshold share one normaliser: b depends on Δ alone there.
  const Block p = make_block(NH, T, L0, 0.3, 1.5, 9);  // L = 9.375
  const std::vector<double> t = table_of(p.flat(), NH, T, L0);
  EXPECT_EQ(t[static_cast<size_t>(3) * T + 2], t[static_cast<size_t>(9) * T + 2]);
  EXPECT_NE(t[static_cast<size_t>(9) * T + 2], t[static_cast<size_t>(20) * T + 2]);
}

// loss(p, qkv) = Σ w·attention(qkv, table(p)): the table's gradient from the
// attention kernel (per sequence), then fire_backward, against finite
// differences of every parameter of the block.
struct FireCase {
  int B = 2, T = 23, C = 16, NH = 2;
  double L0 = 4.6;
  AttentionSpec spec;
  std::vector<double> qkv, w;
  explicit FireCase(const char* preset) {
    AttentionConfig a;
    a.preset = preset;
    a.position_bias = "fire";
    ModelConfig mc;
    mc.context = 16;
    spec = resolve_attention(a, mc);
    qkv = random_vector(static_cast<size_t>(B) * T * 3 * C, 3, -1.5, 1.5);
    w = random_vector(static_cast<size_t>(B) * T * C, 4);
  }
  double loss(const std::vector<double>& p) const {
    const std::vector<double> t = table_of(p, NH, T, L0);
    std::vector<double> out(static_cast<size_t>(B) * T * C);
    HeadParams<double> hp;
    hp.fire = t.data();
    attention_forward<double>(out.data(), nullptr, qkv.data(), B, T, C, NH, spec, hp, nullptr);
    return weighted_sum(out, w);
  }
  std::vector<double> grad(const std::vector<double>& p) const {
    const std::vector<double> t = table_of(p, NH, T, L0);
    std::vector<double> out(static_cast<size_t>(B) * T * C), stats(static_cast<size_t>(B) * NH * T * 4);
    HeadParams<double> hp;
    hp.fire = t.data();
    attention_forward<double>(out.data(), stats.data(), qkv.data(), B, T, C, NH, spec, hp, nullptr);
    std::vector<double> dqkv(qkv.size(), 0.0), db(static_cast<size_t>(B) * NH * T * T, 0.0);
    HeadGrads<double> dh;
    dh.fire = db.data();
    attention_backward<double>(dqkv.data(), dh, w.data(), out.data(), stats.data(), qkv.data(), B, T, C, NH, spec, hp);
    std::vector<double> dp(p.size(), 0.25);  // accumulates
    fire_backward(dp.data(), db.data(), p.data(), B, T, NH, L0);
    for (double& g : dp) g -= 0.25;
    return dp;
  }
};

TEST(Fire, ParameterGradientsMatchFiniteDifferences) {
  for (const char* preset : {"softmax", "lssa"}) {
    FireCase s(preset);
    std::vector<double> p = make_block(s.NH, s.T, s.L0, -0.35, 1.3, 11).flat();  // L = 5.98
    const std::vector<double> analytic = s.grad(p);
    const std::vector<double> numeric = numeric_gradient(p, [&] { return s.loss(p); });
    const int NH = s.NH;
    auto part = [&](const std::vector<double>& g, int lo, int hi) {
      return std::vector<double>(g.begin() + lo, g.begin() + hi);
    };
    const struct {
      const char* name;
      int lo, hi;
    } parts[] = {{"w1", 0, W},
                 {"b1", W, 2 * W},
                 {"w2", 2 * W, (2 + NH) * W},
                 {"b2", (2 + NH) * W, (2 + NH) * W + NH},
                 {"c", attn::fire::c(NH), attn::fire::c(NH) + 1},
                 {"m", attn::fire::m(NH), attn::fire::m(NH) + 1}};
    // Entries far below the block's largest are compared absolutely (at 1e-11
    // of it, gradcheck.h): under softmax, b2 and the biases of hidden units
    // active at every pair shift a whole row and have gradient 0.
    double largest = 0;
    for (double x : numeric) largest = std::max(largest, std::abs(x));
    for (const auto& q : parts) {
      const double err =
          test::max_rel_error(part(analytic, q.lo, q.hi), part(numeric, q.lo, q.hi), std::max(1e-5 * largest, 1e-12));
      std::printf("[gradcheck] fire %s+fire %s max_rel_err=%.3g\n", preset, q.name, err);
      EXPECT_LT(err, 1e-6) << preset << " " << q.name;
    }
    if (std::string(preset) == "softmax") {  // a constant added to a row does not move softmax
      for (int h = 0; h < NH; ++h) EXPECT_LT(std::abs(analytic[attn::fire::b2(NH) + h]), 1e-12 * largest);
    }
    EXPECT_NE(analytic[attn::fire::c(NH)], 0.0);
    EXPECT_NE(analytic[attn::fire::m(NH)], 0.0);
  }
}

// At a tie max(i0, L) with L = i0 (here L = 8 = row 8) the gradient of m is
// the mean of its one-sided derivatives, as a central difference sees it.
TEST(Fire, ThresholdTieTakesHalfTheGradient) {
  FireCase s("softmax");
  s.L0 = 8.0;
  std::vector<double> p = make_block(s.NH, s.T, s.L0, 0.5, 1.0, 13).flat();
  const int km = attn::fire::m(s.NH);
  const double analytic = s.grad(p)[km];
  const double h = 1e-6;
  auto at = [&](double d) {
    std::vector<double> q = p;
    q[km] += d;
    return s.loss(q);
  };
  const double central = (at(h) - at(-h)) / (2 * h);
  const double right = (at(h) - at(0)) / h, left = (at(0) - at(-h)) / h;
  std::printf("[fire tie] dL/dm analytic %.9f  central %.9f  one-sided %.9f / %.9f\n", analytic, central, left, right);
  EXPECT_GT(std::abs(right - left), 1e-3 * std::abs(central)) << "the tie should be a kink";
  EXPECT_NEAR(analytic, central, 1e-5 * std::max(1.0, std::abs(central)));
}

TEST(Fire, BackwardDoesNotDependOnTheThreadCount) {
  FireCase s("softmax");
  s.T = 70;
  s.B = 3;
  s.qkv = random_vector(static_cast<size_t>(s.B) * s.T * 3 * s.C, 3, -1.5, 1.5);
  s.w = random_vector(static_cast<size_t>(s.B) * s.T * s.C, 4);
  const std::vector<double> p = make_block(s.NH, s.T, s.L0, 0.2, 1.1, 17).flat();
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<double> one = s.grad(p);
  omp_set_num_threads(2);
  const std::vector<double> two = s.grad(p);
  omp_set_num_threads(saved);
  ASSERT_EQ(one.size(), two.size());
  for (size_t k = 0; k < one.size(); ++k) EXPECT_EQ(one[k], two[k]) << "parameter " << k;
}

}  // namespace
}  // namespace gpt::cpu
