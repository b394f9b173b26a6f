// Differential attention (attn::diff; Ye et al. 2024; docs/contenders.md): the
// kernel path (split into kernel heads, the attention kernels with
// head_group 4, the combination) against a plain T×T reference written here
// from the paper's formula; finite differences for the combination's inputs
// and parameters; the split's backward as the adjoint of its forward; the
// kernels' head groups against repeated parameters; the whole model's
// gradient with differential layers (RoPE on each half, the sink, ALiBi,
// KERPLE, the forget gate, FIRE, stick-breaking maps).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/attention.h"
#include "kernels/cpu/cpu_kernels.h"
#include "model/gpt.h"
#include "util/attention_reference.h"
#include "util/gradcheck.h"

namespace gpt {
namespace {

using test::random_vector;

// λ_init of the paper: 0.8 − 0.6·e^(−0.3·(l − 1)) for the 1-based layer l.
TEST(Differential, LambdaInitFollowsThePaper) {
  for (int l = 1; l <= 12; ++l)
    EXPECT_NEAR(attn::diff::lambda_init(l - 1), 0.8 - 0.6 * std::exp(-0.3 * (l - 1)), 1e-15) << l;
  EXPECT_NEAR(attn::diff::lambda_init(0), 0.2, 1e-15);
}

struct Shape {
  int B, T, C, NH;
  int D() const { return C / NH; }
  int d() const { return C / NH / 2; }
  size_t N() const { return static_cast<size_t>(B) * T; }
};

// The per-head parameters a test gives a spec (by its head of parameters).
struct Heads {
  std::vector<double> scale, sink, kerple;
};
Heads heads_for(const AttentionSpec& s, int NH) {
  Heads h;
  if (s.learned_scale()) h.scale = random_vector(NH, 81, 0.2, 0.6);
  if (s.learned_sink()) h.sink = random_vector(NH, 82, -1.0, 1.0);
  if (s.kerple()) h.kerple = random_vector(2 * NH, 83, -1.0, 0.5);
  return h;
}
template <typename T>
const T* ptr(const std::vector<T>& v) {
  return v.empty() ? nullptr : v.data();
}

// The reference, from the paper: per head h and row i (1-based), two maps
// A_m[i][j] (m = 1, 2) of the pipeline over q^m = q_h[m·d .. m·d + d),
// k^m likewise (score factor 1/sqrt(d)), each with the head's parameters;
// z_i = Σ_j (A_1[i][j] − λ·A_2[i][j])·v_h,j; out = (1 − λ_init)·g ⊙ z / rms(z),
// rms over D with ε = 1e-5.
std::vector<double> reference(const std::vector<double>& qkv, const Shape& s, const AttentionSpec& sp, const Heads& hp,
                              const std::vector<double>& lam, const std::vector<double>& gain, double lambda_init) {
  const int D = s.D(), d = s.d(), T = s.T, C = s.C;
  double dot1 = 0, dot2 = 0;
  for (int i = 0; i < d; ++i) dot1 += lam[i] * lam[d + i], dot2 += lam[2 * d + i] * lam[3 * d + i];
  const double l = std::exp(dot1) - std::exp(dot2) + lambda_init;
  std::vector<double> out(s.N() * C, 0.0);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      auto at = [&](int t, int part, int c) {
        return qkv[(static_cast<size_t>(b) * T + t) * 3 * C + part * C + h * D + c];
      };
      // ALiBi's slope of head h of NH (a power of two here)
      const double slope = sp.alibi() ? std::pow(2.0, -8.0 * (h + 1) / s.NH) : 0.0;
      for (int i = 1; i <= T; ++i) {
        std::vector<double> z(D, 0.0);
        for (int m = 0; m < 2; ++m) {
          std::vector<double> a(i);
          auto norm = [&](int t, int part) {
            double n = 0;
            for (int c = 0; c < d; ++c) n += at(t, part, m * d + c) * at(t, part, m * d + c);
            return std::sqrt(n + 1e-12);
          };
          for (int j = 1; j <= i; ++j) {
            double qk = 0;
            for (int c = 0; c < d; ++c) qk += at(i - 1, 0, m * d + c) * at(j - 1, 1, m * d + c);
            const double score =
                sp.score == Score::Dot ? qk / std::sqrt(d) : sp.cosine_scale * qk / (norm(i - 1, 0) * norm(j - 1, 1));
            double x =
                test::ref_lambda(sp, i, d, hp.scale.empty() ? 0 : hp.scale[h]) * score + sp.bias - slope * (i - j);
            if (sp.kerple()) {  // −r₁ ln(1 + r₂Δ), r = softplus(ρ)
              const double r1 = std::log1p(std::exp(hp.kerple[2 * h])), r2 = std::log1p(std::exp(hp.kerple[2 * h + 1]));
              x -= r1 * std::log(1 + r2 * (i - j));
            }
            a[j - 1] = test::ref_phi(sp.positivity, x);
          }
          test::ref_normalize(sp, a, hp.sink.empty() ? 0.0 : hp.sink[h]);
          if (sp.p > 0) {  // re-weighting: relu(i·a − o)^p / Σ, a row without a positive term keeping a
            const double o = i <= sp.offset_rows ? 0 : 1;
            double rs = 0, tmax = 0;
            std::vector<double> r(i);
            for (int j = 0; j < i; ++j) tmax = std::max(tmax, i * a[j] - o);
            for (int j = 0; j < i; ++j) rs += (r[j] = std::pow(std::max(0.0, i * a[j] - o), sp.p));
            if (tmax > 1e-4 && rs > 0)
              for (int j = 0; j < i; ++j) a[j] = r[j] / rs;
          }
          for (int j = 1; j <= i; ++j)
            for (int c = 0; c < D; ++c) z[c] += (m == 0 ? 1.0 : -l) * a[j - 1] * at(j - 1, 2, c);
        }
        double ss = 0;
        for (double v : z) ss += v * v;
        const double r = 1 / std::sqrt(ss / D + 1e-5);
        for (int c = 0; c < D; ++c)
          out[(static_cast<size_t>(b) * T + i - 1) * C + h * D + c] = (1 - lambda_init) * gain[c] * z[c] * r;
      }
    }
  return out;
}

// The kernel path on the CPU (T = double or float): split, attention over
// 4·NH kernel heads with the spec's head group, combination.
template <typename T>
std::vector<T> kernel_path(const std::vector<T>& qkv, const Shape& s, const AttentionSpec& sp, const Heads& hp,
                           const std::vector<T>& lam, const std::vector<T>& gain, double lambda_init) {
  const size_t N = s.N();
  std::vector<T> qkv2(N * 6 * s.C), y2(N * 2 * s.C), out(N * s.C), rstd(N * s.NH);
  cpu::diff_split_forward(qkv2.data(), qkv.data(), static_cast<int>(N), s.C, s.NH);
  const std::vector<T> sc = test::cast<T>(hp.scale), sk = test::cast<T>(hp.sink), kp = test::cast<T>(hp.kerple);
  cpu::attention_forward(y2.data(), static_cast<T*>(nullptr), qkv2.data(), s.B, s.T, 2 * s.C, attn::diff::kHeads * s.NH,
                         sp, {ptr(sc), ptr(sk), ptr(kp)}, nullptr);
  cpu::diff_combine_forward(out.data(), rstd.data(), y2.data(), lam.data(), gain.data(), static_cast<int>(N), s.C, s.NH,
                            lambda_init);
  return out;
}

AttentionSpec diff_spec(const std::string& preset, int N, void (*edit)(AttentionConfig&) = nullptr) {
  AttentionConfig a;
  a.preset = preset;
  a.differential = "on";
  if (edit) edit(a);
  ModelConfig m;
  m.context = N;
  return resolve_attention(a, m);
}

struct Case {
  std::string name;
  AttentionSpec spec;
};
std::vector<Case> cases() {
  std::vector<Case> v;
  v.push_back({"softmax", diff_spec("softmax", 16)});
  v.push_back({"sink", diff_spec("sink", 16)});
  v.push_back({"ssmax", diff_spec("ssmax", 16)});
  v.push_back({"stick_breaking", diff_spec("stick_breaking", 16)});
  v.push_back(
      {"softmax+kerple_log", diff_spec("softmax", 16, [](AttentionConfig& a) { a.position_bias = "kerple_log"; })});
  v.push_back({"lssar", diff_spec("lssar", 16)});
  AttentionSpec alibi = diff_spec("softmax", 16);
  alibi.position_bias = PositionBias::Alibi;
  v.push_back({"softmax+alibi", alibi});
  return v;
}

TEST(Differential, KernelPathMatchesReference) {
  const Shape s{2, 70, 32, 2};  // D = 16, d = 8; T past a 64-row block
  const std::vector<double> qkv = random_vector(s.N() * 3 * s.C, 91, -1.5, 1.5);
  const std::vector<double> lam = random_vector(2 * s.D(), 92, -0.4, 0.4), gain = random_vector(s.D(), 93, 0.5, 1.5);
  for (const Case& c : cases()) {
    ASSERT_TRUE(c.spec.differential && c.spec.head_group == attn::diff::kHeads) << c.name;
    const Heads hp = heads_for(c.spec, s.NH);
    for (double li : {attn::diff::lambda_init(0), attn::diff::lambda_init(5)}) {
      const std::vector<double> ref = reference(qkv, s, c.spec, hp, lam, gain, li);
      const double e = test::max_abs_diff(kernel_path(qkv, s, c.spec, hp, lam, gain, li), ref);
      const double ef = test::max_abs_diff(
          kernel_path(test::cast<float>(qkv), s, c.spec, hp, test::cast<float>(lam), test::cast<float>(gain), li), ref);
      double scale = 1;
      for (double x : ref) scale = std::max(scale, std::abs(x));
      std::printf("[diff reference] %-20s lambda_init %.3f: double %.2e  float %.2e (largest %.2f)\n", c.name.c_str(),
                  li, e, ef, scale);
      EXPECT_LT(e, 1e-11 * scale) << c.name;
      EXPECT_LT(ef, 5e-5 * scale) << c.name;
    }
  }
}

// Finite differences (double) of the combination: Σ out·w against y2, the λ
// vectors and the gain.
TEST(Differential, CombinationMatchesFiniteDifferences) {
  const int N = 7, C = 24, NH = 3, D = C / NH;  // D = 8, d = 4
  std::vector<double> y2 = random_vector(N * 2 * C, 1), lam = random_vector(2 * D, 2, -0.5, 0.5),
                      gain = random_vector(D, 3, 0.5, 1.5);
  const std::vector<double> w = random_vector(N * C, 4);
  const double li = attn::diff::lambda_init(2);
  auto loss = [&] {
    std::vector<double> out(N * C), rstd(N * NH);
    cpu::diff_combine_forward(out.data(), rstd.data(), y2.data(), lam.data(), gain.data(), N, C, NH, li);
    double sum = 0;
    for (size_t k = 0; k < out.size(); ++k) sum += out[k] * w[k];
    return sum;
  };
  std::vector<double> out(N * C), rstd(N * NH), dy2(N * 2 * C, 7.0), dlam(2 * D, 0.5), dgain(D, -0.25);
  cpu::diff_combine_forward(out.data(), rstd.data(), y2.data(), lam.data(), gain.data(), N, C, NH, li);
  cpu::diff_combine_backward(dy2.data(), dlam.data(), dgain.data(), w.data(), y2.data(), rstd.data(), lam.data(),
                             gain.data(), N, C, NH, li);
  for (double& x : dlam) x -= 0.5;  // the backward adds to dlam and dgain, overwrites dy2
  for (double& x : dgain) x += 0.25;
  test::expect_gradient("diff_combine", "dy2", dy2, test::numeric_gradient(y2, loss));
  test::expect_gradient("diff_combine", "dlambda", dlam, test::numeric_gradient(lam, loss));
  test::expect_gradient("diff_combine", "dgain", dgain, test::numeric_gradient(gain, loss));
}

// ⟨split(x), y⟩ = ⟨x, split_backward(y)⟩: the backward is the forward's
// adjoint (every q and k half feeds two kernel heads, every value half two).
TEST(Differential, SplitBackwardIsTheAdjoint) {
  const int N = 5, C = 48, NH = 3;
  const std::vector<double> x = random_vector(N * 3 * C, 5), y = random_vector(N * 6 * C, 6);
  std::vector<double> sx(N * 6 * C), sty(N * 3 * C, 0.0);
  cpu::diff_split_forward(sx.data(), x.data(), N, C, NH);
  cpu::diff_split_backward(sty.data(), y.data(), N, C, NH);
  double a = 0, b = 0;
  for (size_t k = 0; k < sx.size(); ++k) a += sx[k] * y[k];
  for (size_t k = 0; k < x.size(); ++k) b += x[k] * sty[k];
  EXPECT_NEAR(a, b, 1e-12 * std::abs(a));
  // Every element of x reaches the split twice.
  std::vector<double> ones(N * 6 * C, 1.0), twice(N * 3 * C, 0.0);
  cpu::diff_split_backward(twice.data(), ones.data(), N, C, NH);
  for (double v : twice) ASSERT_EQ(v, 2.0);
}

// The kernels with head_group 4 and NH/4 heads of parameters are the kernels
// with head_group 1 and every head's parameters repeated 4 times, forward
// and backward; the grouped gradients are the sums of the repeated ones.
// (ALiBi's slopes, computed from the head, are checked by the reference.)
TEST(Differential, HeadGroupsAreRepeatedParameters) {
  const int B = 2, T = 40, C = 64, NH = 8, G = attn::diff::kHeads;
  const std::vector<double> qkv = random_vector(static_cast<size_t>(B) * T * 3 * C, 7, -1.5, 1.5),
                            w = random_vector(static_cast<size_t>(B) * T * C, 8);
  for (const Case& c : cases()) {
    if (c.spec.alibi()) continue;  // slopes are not parameters: the reference test covers ALiBi's grouping
    AttentionSpec grouped = c.spec, plain = c.spec;
    plain.head_group = 1;
    const Heads hp = heads_for(c.spec, NH / G);
    Heads rep;  // each head's parameters repeated over its group
    for (int h = 0; h < NH; ++h) {
      if (!hp.scale.empty()) rep.scale.push_back(hp.scale[h / G]);
      if (!hp.sink.empty()) rep.sink.push_back(hp.sink[h / G]);
      if (!hp.kerple.empty())
        rep.kerple.push_back(hp.kerple[2 * (h / G)]), rep.kerple.push_back(hp.kerple[2 * (h / G) + 1]);
    }
    auto run = [&](const AttentionSpec& sp, const Heads& h, std::vector<double>& out, std::vector<double>& dqkv,
                   Heads& dh) {
      out.assign(static_cast<size_t>(B) * T * C, 0.0);
      std::vector<double> stats(static_cast<size_t>(B) * NH * T * AttentionSpec::kStatsPerRow);
      cpu::attention_forward(out.data(), stats.data(), qkv.data(), B, T, C, NH, sp,
                             {ptr(h.scale), ptr(h.sink), ptr(h.kerple)}, nullptr);
      dqkv.assign(qkv.size(), 0.0);
      dh.scale.assign(h.scale.size(), 0.0);
      dh.sink.assign(h.sink.size(), 0.0);
      dh.kerple.assign(h.kerple.size(), 0.0);
      cpu::attention_backward(dqkv.data(), {dh.scale.data(), dh.sink.data(), dh.kerple.data()}, w.data(), out.data(),
                              stats.data(), qkv.data(), B, T, C, NH, sp, {ptr(h.scale), ptr(h.sink), ptr(h.kerple)});
    };
    std::vector<double> og, op, dg, dp;
    Heads hg, hpl;
    run(grouped, hp, og, dg, hg);
    run(plain, rep, op, dp, hpl);
    EXPECT_EQ(og, op) << c.name;
    EXPECT_LT(test::max_abs_diff(dg, dp), 1e-14) << c.name;
    auto summed = [&](const std::vector<double>& v, int per) {
      std::vector<double> s(v.size() / G, 0.0);
      for (size_t k = 0; k < v.size(); ++k) s[(k / per) / G * per + k % per] += v[k];
      return s;
    };
    EXPECT_LT(test::max_abs_diff(hg.scale, summed(hpl.scale, 1)), 1e-12) << c.name;
    EXPECT_LT(test::max_abs_diff(hg.sink, summed(hpl.sink, 1)), 1e-12) << c.name;
    EXPECT_LT(test::max_abs_diff(hg.kerple, summed(hpl.kerple, 2)), 1e-12) << c.name;
    EXPECT_EQ(hg.scale.empty(), !c.spec.learned_scale()) << c.name;
  }
}

}  // namespace
}  // namespace gpt
