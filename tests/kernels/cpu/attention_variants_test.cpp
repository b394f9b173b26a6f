// Every attention variant of kernels/attention_spec.h through the CPU kernel:
// the forward against a plain T×T reference written from the formulas of
// docs/attention.md, finite-difference gradients (q, k, v and the
// learned ssmax scales), the properties the docs promise (l1 rows sum to 1,
// logn/infoscale equal softmax up to N, the causal mask), the extreme inputs
// (lssar over 16,384 keys, dot scores of ±1e4, uniform rows under
// re-weighting) and the diagnostics.
#include <gtest/gtest.h>
#include <omp.h>

#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "config/attention.h"
#include "core/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include "util/attention_reference.h"
#include "util/gradcheck.h"

namespace gpt::cpu {
namespace {

using gpt::test::cast;
using gpt::test::max_abs_diff;
using gpt::test::max_rel_error;
using gpt::test::numeric_gradient;
using gpt::test::random_vector;
using gpt::test::ref_lambda;
using gpt::test::ref_normalize;
using gpt::test::ref_phi;
using gpt::test::weighted_sum;

constexpr int kStats = AttentionSpec::kStatsPerRow;

struct Shape {
  int B, T, C, NH;
  int D() const { return C / NH; }
  size_t qkv_size() const { return static_cast<size_t>(B) * T * 3 * C; }
  size_t out_size() const { return static_cast<size_t>(B) * T * C; }
  size_t stats_size() const { return static_cast<size_t>(B) * NH * T * kStats; }
};

struct Variant {
  std::string name;
  AttentionSpec spec;
};

// A preset as a config would resolve it, trained at context N, optionally
// with stage overrides applied to the AttentionConfig first.
Variant preset(const std::string& name, int N, void (*edit)(AttentionConfig&) = nullptr,
               const std::string& label = "") {
  AttentionConfig a;
  a.preset = name;
  if (edit) edit(a);
  ModelConfig m;
  m.context = N;
  return {label.empty() ? name : label, resolve_attention(a, m)};
}

// The presets and the ablation combinations of the LSSA paper (and a few
// more stage mixtures), all at trained context N.
std::vector<Variant> all_variants(int N) {
  std::vector<Variant> v;
  for (const auto& p : kAttentionPresets) v.push_back(preset(p.name, N));
  v.push_back(preset(
      "softmax", N, [](AttentionConfig& a) { a.p = 15; }, "softmax+reweight15"));
  v.push_back(preset(
      "sigmoid", N, [](AttentionConfig& a) { a.normalize = "l1", a.p = 15; }, "sigmoid+l1+reweight"));
  v.push_back(preset(
      "relu", N, [](AttentionConfig& a) { a.normalize = "l1"; }, "relu+l1"));
  v.push_back(preset(
      "lssa", N, [](AttentionConfig& a) { a.normalize = "none"; }, "lssa-no-l1"));
  v.push_back(preset(
      "lssar", N, [](AttentionConfig& a) { a.p = 3; }, "lssar-p3"));
  v.push_back(preset(
      "cosine", N, [](AttentionConfig& a) { a.scale = "infoscale"; }, "cosine+infoscale"));
  v.push_back(preset(
      "softmax", N, [](AttentionConfig& a) { a.scale = "fixed", a.scale_value = 0.7; }, "fixed-scale"));
  v.push_back(preset(
      "lssa", N, [](AttentionConfig& a) { a.positivity = "exp"; }, "cosine+lssa+exp"));
  v.push_back(preset(
      "ssmax", N, [](AttentionConfig& a) { a.positivity = "softplus", a.p = 4; }, "ssmax+softplus+reweight4"));
  // The sink normalisations and softpick (docs/contenders.md) with the other stages.
  v.push_back(preset(
      "sink", N, [](AttentionConfig& a) { a.positivity = "softplus"; }, "sink+softplus"));
  v.push_back(preset(
      "softpick", N, [](AttentionConfig& a) { a.scale = "logn"; }, "softpick+logn"));
  v.push_back(preset(
      "softpick", N, [](AttentionConfig& a) { a.positivity = "sigmoid", a.bias = 0.0; }, "softpick+sigmoid"));
  v.push_back(preset(
      "cosine", N, [](AttentionConfig& a) { a.normalize = "sink"; }, "cosine+sink"));
  v.push_back(preset(
      "ssmax", N, [](AttentionConfig& a) { a.normalize = "off_by_one"; }, "ssmax+off_by_one"));
  // KERPLE's learned position biases (docs/contenders.md), with NoPE-style dot scores.
  v.push_back(preset(
      "softmax", N, [](AttentionConfig& a) { a.position_bias = "kerple_log"; }, "softmax+kerple_log"));
  v.push_back(preset(
      "softmax", N, [](AttentionConfig& a) { a.position_bias = "kerple_power"; }, "softmax+kerple_power"));
  v.push_back(preset(
      "lssar", N, [](AttentionConfig& a) { a.position_bias = "kerple_log"; }, "lssar+kerple_log"));
  v.push_back(preset(
      "sink", N, [](AttentionConfig& a) { a.position_bias = "kerple_power"; }, "sink+kerple_power"));
  v.push_back(preset(
      "ssmax", N, [](AttentionConfig& a) { a.position_bias = "kerple_log"; }, "ssmax+kerple_log"));
  // The forget gate's bias c_i − c_j (its c given here; the gate itself is tested with the model).
  v.push_back(preset(
      "softmax", N, [](AttentionConfig& a) { a.position_bias = "forget"; }, "softmax+forget"));
  v.push_back(preset(
      "lssa", N, [](AttentionConfig& a) { a.position_bias = "forget"; }, "lssa+forget"));
  v.push_back(preset(
      "sigmoid", N, [](AttentionConfig& a) { a.position_bias = "forget"; }, "sigmoid+forget"));
  v.push_back(preset(
      "sink", N, [](AttentionConfig& a) { a.position_bias = "forget"; }, "sink+forget"));
  // FIRE's table b_h(i, Δ) (given here; its MLP is tested in fire_test.cpp).
  v.push_back(preset(
      "softmax", N, [](AttentionConfig& a) { a.position_bias = "fire"; }, "softmax+fire"));
  v.push_back(preset(
      "lssar", N, [](AttentionConfig& a) { a.position_bias = "fire"; }, "lssar+fire"));
  v.push_back(preset(
      "sink", N, [](AttentionConfig& a) { a.position_bias = "fire"; }, "sink+fire"));
  // Stick-breaking (its own normalisation) with the other stages.
  v.push_back(preset(
      "stick_breaking", N, [](AttentionConfig& a) { a.scale = "logn"; }, "stick_breaking+logn"));
  v.push_back(preset(
      "stick_breaking", N, [](AttentionConfig& a) { a.score = "cosine", a.cosine_scale = 8.0; },
      "stick_breaking+cosine"));
  v.push_back(preset(
      "stick_breaking", N, [](AttentionConfig& a) { a.bias = -1.0; }, "stick_breaking+bias"));
  v.push_back(preset(
      "stick_breaking", N, [](AttentionConfig& a) { a.position_bias = "kerple_log"; }, "stick_breaking+kerple_log"));
  v.push_back(preset(
      "stick_breaking", N, [](AttentionConfig& a) { a.position_bias = "forget"; }, "stick_breaking+forget"));
  v.push_back(preset(
      "stick_breaking", N, [](AttentionConfig& a) { a.position_bias = "fire"; }, "stick_breaking+fire"));
  v.push_back(preset(
      "stick_breaking", N, [](AttentionConfig& a) { a.scale = "ssmax"; }, "stick_breaking+ssmax"));
  // The logit soft-cap (Gemma 2) at c = 2, where it bends these scores, with every kind of stage: each
  // normalisation family, a learned scale, the position biases, re-weighting and stick-breaking.
  for (const char* p : {"softmax", "lssar", "softpick", "relu", "stick_breaking"})
    v.push_back(preset(
        p, N, [](AttentionConfig& a) { a.softcap = 2.0; }, std::string(p) + "+softcap"));
  v.push_back(preset(
      "ssmax", N, [](AttentionConfig& a) { a.softcap = 1.5, a.position_bias = "kerple_log"; },
      "ssmax+kerple_log+softcap"));
  v.push_back(preset(
      "sink", N, [](AttentionConfig& a) { a.softcap = 2.0, a.position_bias = "fire"; }, "sink+fire+softcap"));
  v.push_back(preset(
      "sigmoid", N, [](AttentionConfig& a) { a.softcap = 2.0, a.position_bias = "forget"; }, "sigmoid+forget+softcap"));
  Variant alibi_c = preset(
      "softmax", N, [](AttentionConfig& a) { a.softcap = 2.0; }, "softmax+alibi+softcap");
  alibi_c.spec.position_bias = PositionBias::Alibi;
  v.push_back(alibi_c);
  Variant alibi = preset("softmax", N);
  alibi.name = "softmax+alibi";
  alibi.spec.position_bias = PositionBias::Alibi;
  v.push_back(alibi);
  Variant alibi_r = preset("lssar", N);
  alibi_r.name = "lssar+alibi";
  alibi_r.spec.position_bias = PositionBias::Alibi;
  v.push_back(alibi_r);
  // HeadScale's τ_h (context.head_scale) on softmax, on a scale with
  // re-weighting, under stick-breaking and with cosine scores.
  for (const char* p : {"softmax", "lssar", "stick_breaking", "cosine"}) {
    Variant hs = preset(p, N);
    hs.name = std::string(p) + "+headscale";
    hs.spec.head_temperature = true;
    v.push_back(hs);
  }
  return v;
}

bool has_kink(const AttentionSpec& s) { return s.positivity == Positivity::Relu; }
// Softpick's kinks sit at logit 0 (relu(φ(x) − φ(0)), |φ(x) − φ(0)|).
bool kinks_at_zero(const AttentionSpec& s) { return s.normalize == Normalize::Softpick; }

// q and k whose every head's dot products are at least ~0.9 in magnitude,
// of either sign: channel 0 of each head ±1 (random signs), the others in
// [−0.1, 0.1], so that finite differences of softpick never cross its kinks
// while both of its sides are exercised.
void keep_scores_off_zero(std::vector<double>& qkv, int C, int NH, uint64_t seed) {
  const int D = C / NH;
  const std::vector<double> r = random_vector(qkv.size(), seed, -1, 1);
  for (size_t row = 0; row < qkv.size() / (3 * C); ++row)
    for (int c = 0; c < 2 * C; ++c) {
      const size_t k = row * 3 * C + c;
      qkv[k] = c % D == 0 ? (r[k] < 0 ? -1.0 : 1.0) : 0.1 * r[k];
    }
}

// The sink logits ζ_h the helpers below give a variant with a learned sink
// (one above and one below typical scores), none otherwise.
std::vector<double> sinks_for(const AttentionSpec& s, int NH) {
  if (!s.learned_sink()) return {};
  std::vector<double> z(NH);
  for (int h = 0; h < NH; ++h) z[h] = h % 2 ? -0.8 + 0.1 * h : 0.9 + 0.1 * h;
  return z;
}
// KERPLE's raw (ρ₁, ρ₂) per head the helpers give a variant with a KERPLE bias.
std::vector<double> kerple_for(const AttentionSpec& s, int NH) {
  if (!s.kerple()) return {};
  std::vector<double> k(2 * NH);
  for (int h = 0; h < NH; ++h) k[2 * h] = -0.4 + 0.5 * h, k[2 * h + 1] = -0.6 + 0.7 * h;
  return k;
}
// The reference's b_h(Δ), from docs/contenders.md's formulas with r₁ = softplus(ρ₁)
// and r₂ = softplus(ρ₂) (log) or 2σ(ρ₂) (power).
double ref_kerple(const AttentionSpec& s, const std::vector<double>& raw, int h, double dist) {
  if (!s.kerple()) return 0;
  const double r1 = std::log1p(std::exp(raw[2 * h]));
  if (s.position_bias == PositionBias::KerpleLog)
    return -r1 * std::log(1 + std::log1p(std::exp(raw[2 * h + 1])) * dist);
  const double r2 = 2 / (1 + std::exp(-raw[2 * h + 1]));
  return -r1 * std::pow(dist, r2);
}
// The forget gate's c (B, NH, T) the helpers give a variant with it: prefix
// sums of ln σ(g) over pseudo-random gate logits g in [−1, 4].
std::vector<double> fcum_for(const AttentionSpec& sp, int B, int NH, int T) {
  if (!sp.forget()) return {};
  const std::vector<double> g = random_vector(static_cast<size_t>(B) * NH * T, 77, -1.0, 4.0);
  std::vector<double> c(g.size());
  for (int bh = 0; bh < B * NH; ++bh) {
    double sum = 0;
    for (int t = 0; t < T; ++t) {
      const size_t k = static_cast<size_t>(bh) * T + t;
      sum += -std::log1p(std::exp(-g[k]));  // ln σ(g)
      c[k] = sum;
    }
  }
  return c;
}
// FIRE's table (NH, T, T) the helpers give a variant with it: pseudo-random
// b_h(i0, Δ) in [−2, 1] for Δ <= i0 (the kernels take it as an input; its
// MLP is tested in fire_test.cpp), 0 above the diagonal.
std::vector<double> fire_for(const AttentionSpec& sp, int NH, int T) {
  if (!sp.fire()) return {};
  std::vector<double> t = random_vector(static_cast<size_t>(NH) * T * T, 91, -2.0, 1.0);
  for (int h = 0; h < NH; ++h)
    for (int i0 = 0; i0 < T; ++i0)
      for (int d = i0 + 1; d < T; ++d) t[(static_cast<size_t>(h) * T + i0) * T + d] = 0;
  return t;
}
template <typename T>
const T* ptr(const std::vector<T>& v) {
  return v.empty() ? nullptr : v.data();
}

// The forward with the variant's ssmax scales (head_scale) and sink logits
// (sinks, default sinks_for).
template <typename T>
std::vector<T> forward(const std::vector<T>& qkv, const Shape& s, const AttentionSpec& spec,
                       const std::vector<T>& head_scale, std::type_identity_t<std::vector<T>>* stats = nullptr,
                       std::vector<double>* diag = nullptr, const std::type_identity_t<std::vector<T>>* sinks = nullptr,
                       const std::type_identity_t<std::vector<T>>* kerple = nullptr,
                       const std::type_identity_t<std::vector<T>>* fcum = nullptr,
                       const std::type_identity_t<std::vector<T>>* fire = nullptr) {
  std::vector<T> out(s.out_size());
  if (stats) stats->assign(s.stats_size(), T(0));
  if (diag) diag->assign(static_cast<size_t>(s.NH) * kAttentionDiagStats, 0.0);
  const std::vector<T> own = cast<T>(sinks_for(spec, s.NH)), own_k = cast<T>(kerple_for(spec, s.NH)),
                       own_f = cast<T>(fcum_for(spec, s.B, s.NH, s.T)), own_b = cast<T>(fire_for(spec, s.NH, s.T));
  attention_forward(out.data(), stats ? stats->data() : nullptr, qkv.data(), s.B, s.T, s.C, s.NH, spec,
                    {ptr(head_scale), ptr(sinks ? *sinks : own), ptr(kerple ? *kerple : own_k),
                     ptr(fcum ? *fcum : own_f), ptr(fire ? *fire : own_b)},
                    diag ? diag->data() : nullptr);
  return out;
}

// dqkv, dhead_scale and the sink logits' gradient (dsink) for the loss Σ out·w.
template <typename T>
std::vector<T> backward(const std::vector<T>& qkv, const std::vector<T>& w, const Shape& s, const AttentionSpec& spec,
                        const std::vector<T>& head_scale, std::type_identity_t<std::vector<T>>* dhead = nullptr,
                        const std::type_identity_t<std::vector<T>>* sinks = nullptr,
                        std::type_identity_t<std::vector<T>>* dsink = nullptr,
                        const std::type_identity_t<std::vector<T>>* kerple = nullptr,
                        std::type_identity_t<std::vector<T>>* dkerple = nullptr,
                        const std::type_identity_t<std::vector<T>>* fcum = nullptr,
                        std::type_identity_t<std::vector<T>>* dfcum = nullptr,
                        const std::type_identity_t<std::vector<T>>* fire = nullptr,
                        std::type_identity_t<std::vector<T>>* dfire = nullptr) {
  std::vector<T> stats;
  const std::vector<T> out = forward(qkv, s, spec, head_scale, &stats, nullptr, sinks, kerple, fcum, fire);
  std::vector<T> dqkv(s.qkv_size(), T(0));
  std::vector<T> dh(s.NH, T(0)), dz(s.NH, T(0)), dk(2 * s.NH, T(0)), dc(static_cast<size_t>(s.B) * s.NH * s.T, T(0)),
      db(static_cast<size_t>(s.B) * s.NH * s.T * s.T, T(0));
  const std::vector<T> own = cast<T>(sinks_for(spec, s.NH)), own_k = cast<T>(kerple_for(spec, s.NH)),
                       own_f = cast<T>(fcum_for(spec, s.B, s.NH, s.T)), own_b = cast<T>(fire_for(spec, s.NH, s.T));
  attention_backward(dqkv.data(), {dh.data(), dz.data(), dk.data(), dc.data(), db.data()}, w.data(), out.data(),
                     stats.data(), qkv.data(), s.B, s.T, s.C, s.NH, spec,
                     {ptr(head_scale), ptr(sinks ? *sinks : own), ptr(kerple ? *kerple : own_k),
                      ptr(fcum ? *fcum : own_f), ptr(fire ? *fire : own_b)});
  if (dhead) *dhead = dh;
  if (dsink) *dsink = dz;
  if (dkerple) *dkerple = dk;
  if (dfcum) *dfcum = dc;
  if (dfire) *dfire = db;
  return dqkv;
}

// ---- the reference: docs/attention.md's formulas, one full T×T matrix per head ----------

// Full weight matrix W (T×T, zero above the diagonal) of head (b,h).
std::vector<double> ref_weights(const std::vector<double>& qkv, const Shape& s, const AttentionSpec& sp,
                                const std::vector<double>& head_scale, int b, int h, const std::vector<double>& sinks) {
  const int T = s.T, d = s.D();
  auto at = [&](int t, int part, int c) {
    return qkv[(static_cast<size_t>(b) * T + t) * 3 * s.C + part * s.C + h * d + c];
  };
  auto norm = [&](int t, int part) {
    double n = 0;
    for (int c = 0; c < d; ++c) n += at(t, part, c) * at(t, part, c);
    return std::sqrt(n + 1e-12);
  };
  const double slope = sp.alibi() ? std::pow(2.0, -8.0 * (h + 1) / s.NH) : 0.0;  // NH a power of two here
  // the forget gate's Σ_{l=j+1..i} ln f_l = c_i − c_j
  const std::vector<double> fc = fcum_for(sp, s.B, s.NH, s.T);
  const std::vector<double> fb = fire_for(sp, s.NH, s.T);  // FIRE's b_h(i0, Δ) at [(h·T + i0)·T + Δ]
  std::vector<double> W(static_cast<size_t>(T) * T, 0.0);
  for (int i = 1; i <= T; ++i) {  // 1-based row, keys j = 1..i
    std::vector<double> a(i);
    for (int j = 1; j <= i; ++j) {
      double qk = 0;
      for (int c = 0; c < d; ++c) qk += at(i - 1, 0, c) * at(j - 1, 1, c);
      const double score =
          sp.score == Score::Dot ? qk / std::sqrt(d) : sp.cosine_scale * qk / (norm(i - 1, 0) * norm(j - 1, 1));
      const double x_raw = ref_lambda(sp, i, d, head_scale.empty() ? 0 : head_scale[h]) * score + sp.bias -
                           slope * (i - j) + ref_kerple(sp, kerple_for(sp, s.NH), h, i - j) +
                           (fc.empty() ? 0.0
                                       : fc[(static_cast<size_t>(b) * s.NH + h) * T + i - 1] -
                                             fc[(static_cast<size_t>(b) * s.NH + h) * T + j - 1]) +
                           (fb.empty() ? 0.0 : fb[(static_cast<size_t>(h) * T + i - 1) * T + (i - j)]);
      // Gemma 2's logit soft-cap (arXiv 2408.00118, §2): logits ← c·tanh(logits / c).
      const double x = sp.softcap > 0 ? sp.softcap * std::tanh(x_raw / sp.softcap) : x_raw;
      a[j - 1] = ref_phi(sp.positivity, x);
    }
    ref_normalize(sp, a, sinks.empty() ? 0.0 : sinks[h]);
    std::vector<double> w = a;
    if (sp.p > 0) {
      const double o = i <= sp.offset_rows ? 0 : 1;
      double rs = 0;
      std::vector<double> r(i);
      for (int j = 0; j < i; ++j) rs += (r[j] = std::pow(std::max(0.0, i * a[j] - o), sp.p));
      if (rs > 0)
        for (int j = 0; j < i; ++j) w[j] = r[j] / rs;
    }
    for (int j = 0; j < i; ++j) W[static_cast<size_t>(i - 1) * T + j] = w[j];
  }
  return W;
}

std::vector<double> reference(const std::vector<double>& qkv, const Shape& s, const AttentionSpec& sp,
                              const std::vector<double>& head_scale, const std::vector<double>* sinks = nullptr) {
  const int d = s.D();
  std::vector<double> out(s.out_size(), 0.0);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      const std::vector<double> W = ref_weights(qkv, s, sp, head_scale, b, h, sinks ? *sinks : sinks_for(sp, s.NH));
      for (int i = 0; i < s.T; ++i)
        for (int c = 0; c < d; ++c) {
          double acc = 0;
          for (int j = 0; j <= i; ++j)
            acc += W[static_cast<size_t>(i) * s.T + j] *
                   qkv[(static_cast<size_t>(b) * s.T + j) * 3 * s.C + 2 * s.C + h * d + c];
          out[(static_cast<size_t>(b) * s.T + i) * s.C + h * d + c] = acc;
        }
    }
  return out;
}

std::vector<double> scales_for(const AttentionSpec& s, int NH, uint64_t seed) {
  if (!s.learned_scale()) return {};
  if (s.head_temperature) return random_vector(NH, seed, 0.8, 2.0);  // HeadScale's τ_h around 1
  return random_vector(NH, seed, 0.2, 0.6);                          // ssmax's s_h around 1/ln N, away from 0
}

// ---- forward against the reference ------------------------------------------------------

TEST(AttentionVariants, ForwardMatchesReference) {
  const Shape s{2, 300, 32, 4};  // T = 300: ten row blocks, past N = 64
  const std::vector<double> qkv = random_vector(s.qkv_size(), 21, -1.5, 1.5);
  for (const Variant& v : all_variants(64)) {
    const std::vector<double> hs = scales_for(v.spec, s.NH, 5);
    const std::vector<double> ref = reference(qkv, s, v.spec, hs);
    const double err = max_abs_diff(forward(qkv, s, v.spec, hs), ref);
    const double err_f = max_abs_diff(forward(cast<float>(qkv), s, v.spec, cast<float>(hs)), ref);
    std::printf("[reference] %-26s double %.2e  float %.2e\n", v.name.c_str(), err, err_f);
    double scale = 1;  // unnormalised variants (no l1) reach outputs far above 1
    for (double x : ref) scale = std::max(scale, std::abs(x));
    EXPECT_LT(err, 1e-11 * scale) << v.name;
    EXPECT_LT(err_f, 2e-5 * scale) << v.name;
  }
}

// ---- gradients ------------------------------------------------------------------------------

// One test per variant (ctest runs them in parallel).
class AttentionGradcheck : public ::testing::TestWithParam<int> {};

TEST_P(AttentionGradcheck, MatchesFiniteDifferences) {
  // T = 40 crosses the 32-row block boundary and N = 16, so every scale runs
  // past its training length.
  const Shape s{1, 40, 16, 2};
  {
    Variant v = all_variants(16)[GetParam()];
    std::vector<double> qkv = random_vector(s.qkv_size(), 31, -1.5, 1.5);
    if (has_kink(v.spec)) {
      // relu's kink at x = 0 would put finite differences across it: keep
      // every x in the linear part (small q·k plus a bias of 0.6). The
      // zero side (x < 0: zero weight, zero gradient) is tested below.
      for (size_t r = 0; r < qkv.size() / (3 * s.C); ++r)
        for (int c = 0; c < 2 * s.C; ++c) qkv[r * 3 * s.C + c] *= 0.25;
      v.spec.bias = 0.6;
    }
    if (kinks_at_zero(v.spec)) keep_scores_off_zero(qkv, s.C, s.NH, 33);
    std::vector<double> hs = scales_for(v.spec, s.NH, 6);
    const std::vector<double> w = random_vector(s.out_size(), 32);
    std::vector<double> dhead;
    const std::vector<double> analytic = backward(qkv, w, s, v.spec, hs, &dhead);
    auto loss = [&] { return weighted_sum(forward(qkv, s, v.spec, hs), w); };
    const std::vector<double> numeric = numeric_gradient(qkv, loss);
    test::expect_gradient_scaled("attention", (v.name + " dqkv").c_str(), analytic, numeric);
    if (v.spec.learned_scale()) {
      const std::vector<double> numeric_h = numeric_gradient(hs, loss);
      test::expect_gradient_scaled("attention", (v.name + " ds_h").c_str(), dhead, numeric_h);
    } else {
      for (double g : dhead) EXPECT_EQ(g, 0.0) << v.name << ": no learned scale, no gradient";
    }
    // The sink logits ζ_h (normalisation sink), at values above and below the scores.
    std::vector<double> z = sinks_for(v.spec, s.NH), dz;
    backward(qkv, w, s, v.spec, hs, nullptr, &z, &dz);
    if (v.spec.learned_sink()) {
      auto loss_z = [&] { return weighted_sum(forward(qkv, s, v.spec, hs, nullptr, nullptr, &z), w); };
      const std::vector<double> numeric_z = numeric_gradient(z, loss_z);
      test::expect_gradient("attention", (v.name + " dzeta_h").c_str(), dz, numeric_z);
      for (double g : dz) EXPECT_NE(g, 0.0) << v.name;
    } else {
      for (double g : dz) EXPECT_EQ(g, 0.0) << v.name << ": no learned sink, no gradient";
    }
    // KERPLE's raw (ρ₁, ρ₂) per head.
    std::vector<double> kr = kerple_for(v.spec, s.NH), dk;
    backward(qkv, w, s, v.spec, hs, nullptr, nullptr, nullptr, &kr, &dk);
    if (v.spec.kerple()) {
      auto loss_k = [&] { return weighted_sum(forward(qkv, s, v.spec, hs, nullptr, nullptr, nullptr, &kr), w); };
      const std::vector<double> numeric_k = numeric_gradient(kr, loss_k);
      test::expect_gradient("attention", (v.name + " drho").c_str(), dk, numeric_k);
      for (double g : dk) EXPECT_NE(g, 0.0) << v.name;
    } else {
      for (double g : dk) EXPECT_EQ(g, 0.0) << v.name << ": no KERPLE bias, no gradient";
    }
    // The forget gate's input c.
    std::vector<double> fc = fcum_for(v.spec, s.B, s.NH, s.T), dc;
    backward(qkv, w, s, v.spec, hs, nullptr, nullptr, nullptr, nullptr, nullptr, &fc, &dc);
    if (v.spec.forget()) {
      auto loss_c = [&] {
        return weighted_sum(forward(qkv, s, v.spec, hs, nullptr, nullptr, nullptr, nullptr, &fc), w);
      };
      const std::vector<double> numeric_c = numeric_gradient(fc, loss_c);
      test::expect_gradient_scaled("attention", (v.name + " dc").c_str(), dc, numeric_c);
    } else {
      for (double g : dc) EXPECT_EQ(g, 0.0) << v.name << ": no forget gate, no gradient";
    }
    // FIRE's table b_h(i0, Δ): every entry on or below the diagonal.
    std::vector<double> fb = fire_for(v.spec, s.NH, s.T), db;
    backward(qkv, w, s, v.spec, hs, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, &fb, &db);
    if (v.spec.fire()) {
      auto loss_b = [&] {
        return weighted_sum(forward(qkv, s, v.spec, hs, nullptr, nullptr, nullptr, nullptr, nullptr, &fb), w);
      };
      const std::vector<double> numeric_b = numeric_gradient(fb, loss_b);
      test::expect_gradient_scaled("attention", (v.name + " db").c_str(), db, numeric_b);
      for (int h = 0; h < s.NH; ++h)  // above the diagonal: no pair, no gradient
        for (int i0 = 0; i0 < s.T; ++i0)
          for (int d = i0 + 1; d < s.T; ++d) EXPECT_EQ(db[(static_cast<size_t>(h) * s.T + i0) * s.T + d], 0.0);
    } else {
      for (double g : db) EXPECT_EQ(g, 0.0) << v.name << ": no FIRE table, no gradient";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AttentionVariants, AttentionGradcheck,
                         ::testing::Range(0, static_cast<int>(all_variants(16).size())),
                         [](const ::testing::TestParamInfo<int>& info) {
                           std::string name = all_variants(16)[info.param].name;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

TEST(AttentionVariants, BackwardAccumulates) {
  const Shape s{2, 9, 8, 2};
  const Variant v = preset("ssmax", 4);
  const std::vector<double> qkv = random_vector(s.qkv_size(), 3);
  const std::vector<double> hs = scales_for(v.spec, s.NH, 4);
  const std::vector<double> w = random_vector(s.out_size(), 4);
  std::vector<double> dh_once;
  const std::vector<double> once = backward(qkv, w, s, v.spec, hs, &dh_once);
  std::vector<double> stats;
  const std::vector<double> out = forward(qkv, s, v.spec, hs, &stats);
  std::vector<double> dqkv = random_vector(s.qkv_size(), 5), dh = {0.25, -0.5};
  const std::vector<double> prior = dqkv;
  attention_backward(dqkv.data(), dh.data(), w.data(), out.data(), stats.data(), qkv.data(), s.B, s.T, s.C, s.NH,
                     v.spec, hs.data());
  for (size_t i = 0; i < dqkv.size(); ++i) ASSERT_NEAR(dqkv[i], prior[i] + once[i], 1e-12);
  EXPECT_NEAR(dh[0], 0.25 + dh_once[0], 1e-12);
  EXPECT_NEAR(dh[1], -0.5 + dh_once[1], 1e-12);
}

// The float kernel (GEMM panels and vectorised rows) against the double
// kernel (scalar attn:: rows), forward and backward, for every variant and
// every float GEMM kernel the processor supports (the vector rows follow the
// GEMM kernel's instruction set). T = 77 spans three row blocks, the last
// one partial, and keys past whole vector blocks.
TEST(AttentionVariants, FloatKernelMatchesDoubleKernelForEveryInstructionSet) {
  const Shape s{2, 77, 32, 2};
  const std::vector<double> qkv = random_vector(s.qkv_size(), 51, -1.5, 1.5);
  const std::vector<double> w = random_vector(s.out_size(), 52);
  const GemmKernel saved = gemm_kernel();
  int tested = 0;
  for (GemmKernel k : {GemmKernel::Generic, GemmKernel::Avx2, GemmKernel::Avx512}) {
    if (!gemm_kernel_available(k)) continue;
    ++tested;
    set_gemm_kernel(k);
    for (const Variant& v : all_variants(16)) {
      const std::vector<double> hs = scales_for(v.spec, s.NH, 11);
      std::vector<double> dh;
      const std::vector<double> out = forward(qkv, s, v.spec, hs);
      const std::vector<double> g = backward(qkv, w, s, v.spec, hs, &dh);
      std::vector<float> dhf;
      const std::vector<float> outf = forward(cast<float>(qkv), s, v.spec, cast<float>(hs));
      const std::vector<float> gf = backward(cast<float>(qkv), cast<float>(w), s, v.spec, cast<float>(hs), &dhf);
      double out_scale = 0, g_scale = 0;
      for (double x : out) out_scale = std::max(out_scale, std::abs(x));
      for (double x : g) g_scale = std::max(g_scale, std::abs(x));
      const std::string name = v.name + " / " + gemm_kernel_name(k);
      EXPECT_LT(max_abs_diff(outf, out), 2e-5 * std::max(1.0, out_scale)) << name;
      EXPECT_LT(max_abs_diff(gf, g), 1e-4 * std::max(1.0, g_scale)) << name;
      for (size_t h = 0; h < dh.size(); ++h) EXPECT_NEAR(dhf[h], dh[h], 1e-4 * std::max(1.0, std::abs(dh[h]))) << name;
    }
  }
  set_gemm_kernel(saved);
  EXPECT_GE(tested, 1);
}

// ---- properties -------------------------------------------------------------------------------

// With every v_j = 1, each output is the row's total weight Σ_j w_ij.
TEST(AttentionVariants, L1RowsSumToOne) {
  const Shape s{2, 70, 16, 2};
  std::vector<double> qkv = random_vector(s.qkv_size(), 41, -2, 2);
  for (size_t r = 0; r < qkv.size() / (3 * s.C); ++r)
    for (int c = 0; c < s.C; ++c) qkv[r * 3 * s.C + 2 * s.C + c] = 1.0;
  int checked = 0;
  for (const Variant& v : all_variants(16)) {
    if (v.spec.normalize != Normalize::L1) continue;
    ++checked;
    const std::vector<double> out = forward(qkv, s, v.spec, scales_for(v.spec, s.NH, 7));
    // relu + l1: a row without a positive score has Z = 0 and weights 0
    // (attention_spec.h's inv_norm), not 0/0; all other rows sum to 1.
    int ones = 0;
    for (double x : out) {
      if (has_kink(v.spec) && x == 0.0) continue;
      ASSERT_NEAR(x, 1.0, 1e-12) << v.name;
      ++ones;
    }
    EXPECT_GT(ones, static_cast<int>(out.size()) / 2) << v.name;
  }
  EXPECT_GE(checked, 12);
}

// With every v_j = 1, each output is the row's total weight: below 1 under
// off_by_one and sink (the sink key takes the rest), at most 1 under
// softpick, and equal to the reference's total.
TEST(AttentionVariants, SinkAndSoftpickRowsSumToLessThanOne) {
  const Shape s{2, 70, 16, 2};
  std::vector<double> qkv = random_vector(s.qkv_size(), 41, -2, 2);
  for (size_t r = 0; r < qkv.size() / (3 * s.C); ++r)
    for (int c = 0; c < s.C; ++c) qkv[r * 3 * s.C + 2 * s.C + c] = 1.0;
  for (const char* name : {"softmax1", "sink", "softpick"}) {
    const AttentionSpec spec = preset(name, 16).spec;
    const std::vector<double> out = forward(qkv, s, spec, {});
    const std::vector<double> ref = reference(qkv, s, spec, {});
    double lo = 1, hi = 0;
    for (size_t k = 0; k < out.size(); ++k) {
      ASSERT_NEAR(out[k], ref[k], 1e-12) << name;
      lo = std::min(lo, out[k]);
      hi = std::max(hi, out[k]);
    }
    EXPECT_LT(hi, 1.0) << name;
    EXPECT_GT(hi, 0.5) << name << ": some row should put most of its weight on its keys";
    EXPECT_LT(lo, 0.9) << name << ": some row should leave a visible share to the sink";
  }
}

// Stick-breaking with every logit equal to x (q = 0, so x is the bias):
// β = σ(x) and, counting keys back from the own key, A_ij = β(1 − β)^(i−1−j)
// for j < i and A_ii = (1 − β)^(i−1): with v_j = j + 1 in every channel,
// y_i = Σ_{j<i} β(1 − β)^(i−1−j)(j + 1) + (1 − β)^(i−1)·i, written out here.
// The keys j < i take 1 − (1 − β)^(i−1) <= 1 between them, and the forward's
// first statistic is −ln A_ii = (i − 1)·softplus(x).
TEST(AttentionVariants, StickBreakingClosedFormWithEqualLogits) {
  const Shape s{1, 90, 16, 2};
  std::vector<double> qkv(s.qkv_size(), 0.0);
  for (int t = 0; t < s.T; ++t)
    for (int c = 0; c < s.C; ++c) qkv[static_cast<size_t>(t) * 3 * s.C + 2 * s.C + c] = t + 1;
  for (double x : {-3.0, 0.0, 1.5}) {
    AttentionSpec spec = preset("stick_breaking", 16).spec;
    spec.bias = x;
    std::vector<double> stats;
    const std::vector<double> out = forward(qkv, s, spec, {}, &stats);
    const double beta = 1 / (1 + std::exp(-x));
    for (int i = 1; i <= s.T; ++i) {
      double y = std::pow(1 - beta, i - 1) * i, taken = 0;
      for (int j = 1; j < i; ++j) {
        const double a = beta * std::pow(1 - beta, i - 1 - j);
        y += a * j;
        taken += a;
      }
      ASSERT_LE(taken, 1.0) << x;
      EXPECT_NEAR(taken, 1 - std::pow(1 - beta, i - 1), 1e-12) << x;
      for (int c = 0; c < s.C; ++c)
        ASSERT_NEAR(out[static_cast<size_t>(i - 1) * s.C + c], y, 1e-10 * i) << x << " row " << i;
      EXPECT_NEAR(stats[static_cast<size_t>(i - 1) * kStats], (i - 1) * std::log1p(std::exp(x)), 1e-10 * i) << x;
    }
  }
}

// Every stick-breaking row sums to 1 (the own key takes what the others
// leave), under a window and sinks too; with the own key's value zeroed the
// rest sums to at most 1. v_j = 1 everywhere: out = 1.
TEST(AttentionVariants, StickBreakingRowsSumToOne) {
  const Shape s{2, 130, 16, 2};
  std::vector<double> qkv = random_vector(s.qkv_size(), 63, -2, 2);
  for (size_t r = 0; r < qkv.size() / (3 * s.C); ++r)
    for (int c = 0; c < s.C; ++c) qkv[r * 3 * s.C + 2 * s.C + c] = 1.0;
  AttentionSpec sb = preset("stick_breaking", 16).spec, masked = sb;
  masked.window = 20, masked.sinks = 3;
  for (const AttentionSpec& spec : {sb, masked}) {
    std::vector<double> stats;
    const std::vector<double> out = forward(qkv, s, spec, {}, &stats);
    double least_own = 1;
    for (size_t r = 0; r < out.size() / s.C; ++r) {
      for (int c = 0; c < s.C; ++c) ASSERT_NEAR(out[r * s.C + c], 1.0, 1e-12);
      least_own = std::min(least_own, std::exp(-stats[(r % s.T + (r / s.T) * s.NH * s.T) * kStats]));
    }
    EXPECT_GE(least_own, 0.0);
    EXPECT_LT(least_own, 0.5) << "some row should give most of its weight to other keys";
  }
}

// off_by_one is the sink with ζ = 0, bit for bit; a sink far below every
// score is softmax (its share e^(ζ − m) vanishes in double); a sink far above
// takes almost everything.
TEST(AttentionVariants, SinkLimits) {
  const Shape s{1, 50, 16, 2};
  const std::vector<double> qkv = random_vector(s.qkv_size(), 48, -1.5, 1.5);
  const AttentionSpec sink = preset("sink", 16).spec;
  const std::vector<double> zero(s.NH, 0.0), below(s.NH, -400.0), above(s.NH, 60.0);
  EXPECT_EQ(forward(qkv, s, sink, {}, nullptr, nullptr, &zero), forward(qkv, s, preset("softmax1", 16).spec, {}));
  const std::vector<double> soft = forward(qkv, s, preset("softmax", 16).spec, {});
  EXPECT_LT(max_abs_diff(forward(qkv, s, sink, {}, nullptr, nullptr, &below), soft), 1e-15);
  EXPECT_GT(max_abs_diff(forward(qkv, s, sink, {}, nullptr, nullptr, &zero), soft), 1e-3);
  double big = 0;
  for (double x : forward(qkv, s, sink, {}, nullptr, nullptr, &above)) big = std::max(big, std::abs(x));
  EXPECT_LT(big, 1e-20);
}

// KERPLE with r₁ = 0 (ρ₁ = −800: softplus underflows to 0 in double) adds
// −0 to every logit: the plain kernel, bit for bit in double, and within
// float rounding in float (the vector rows take another path); a moderate
// r₁ changes the rows.
TEST(AttentionVariants, KerpleWithZeroR1IsThePlainStage) {
  const Shape s{1, 70, 32, 2};
  const std::vector<double> qkv = random_vector(s.qkv_size(), 61, -1.5, 1.5);
  for (const char* kind : {"kerple_log", "kerple_power"}) {
    for (const char* name : {"softmax", "lssar"}) {
      Variant plain = preset(name, 16), k = plain;
      k.spec.position_bias = std::string(kind) == "kerple_log" ? PositionBias::KerpleLog : PositionBias::KerplePower;
      const std::vector<double> zero = {-800, 0.3, -800, -0.2}, some = {0.5, 0.3, -1.0, -0.2};
      EXPECT_EQ(forward(qkv, s, k.spec, {}, nullptr, nullptr, nullptr, &zero), forward(qkv, s, plain.spec, {}))
          << kind << " " << name;
      const std::vector<float> qf = cast<float>(qkv), zf = cast<float>(zero);
      EXPECT_LT(
          max_abs_diff(forward(qf, s, k.spec, {}, nullptr, nullptr, nullptr, &zf), forward(qkv, s, plain.spec, {})),
          1e-5)
          << kind << " " << name;
      EXPECT_GT(
          max_abs_diff(forward(qkv, s, k.spec, {}, nullptr, nullptr, nullptr, &some), forward(qkv, s, plain.spec, {})),
          1e-3)
          << kind << " " << name;
    }
  }
}

// The forget gate with every gate at 1 (c = 0) is the plain stage, bit for
// bit in double (within float rounding in float); with gates below 1 the
// rows change.
TEST(AttentionVariants, ForgetWithEveryGateOneIsThePlainStage) {
  const Shape s{2, 70, 32, 2};
  const std::vector<double> qkv = random_vector(s.qkv_size(), 62, -1.5, 1.5);
  const std::vector<double> zeros(static_cast<size_t>(s.B) * s.NH * s.T, 0.0);
  for (const char* name : {"softmax", "lssar", "sigmoid"}) {
    Variant plain = preset(name, 16), f = plain;
    f.spec.position_bias = PositionBias::Forget;
    EXPECT_EQ(forward(qkv, s, f.spec, {}, nullptr, nullptr, nullptr, nullptr, &zeros), forward(qkv, s, plain.spec, {}))
        << name;
    const std::vector<float> qf = cast<float>(qkv), zf = cast<float>(zeros);
    EXPECT_LT(max_abs_diff(forward(qf, s, f.spec, {}, nullptr, nullptr, nullptr, nullptr, &zf),
                           forward(qkv, s, plain.spec, {})),
              1e-5)
        << name;
    EXPECT_GT(max_abs_diff(forward(qkv, s, f.spec, {}), forward(qkv, s, plain.spec, {})), 1e-3) << name;
  }
}

// Softpick: a row whose scores are all <= 0 has weight 0 everywhere, so its
// output and the gradient of its query are exactly 0; the other rows are not.
TEST(AttentionVariants, SoftpickRowsWithoutPositiveScoresAreZero) {
  const Shape s{1, 30, 16, 2};
  std::vector<double> qkv = random_vector(s.qkv_size(), 49, -1, 1);
  for (int t = 0; t < s.T; ++t)
    for (int c = 0; c < s.C; ++c) {
      double* row = &qkv[static_cast<size_t>(t) * 3 * s.C];
      row[s.C + c] = std::abs(row[s.C + c]) + 0.05;       // k > 0
      if (t % 2 == 0) row[c] = -std::abs(row[c]) - 0.05;  // q < 0: every score of the row < 0
    }
  const AttentionSpec spec = preset("softpick", 16).spec;
  const std::vector<double> out = forward(qkv, s, spec, {});
  const std::vector<double> g = backward(qkv, random_vector(s.out_size(), 50), s, spec, {});
  double other = 0, other_g = 0;
  for (int t = 0; t < s.T; ++t)
    for (int c = 0; c < s.C; ++c) {
      const double y = out[static_cast<size_t>(t) * s.C + c], dq = g[static_cast<size_t>(t) * 3 * s.C + c];
      if (t % 2 == 0) {
        ASSERT_EQ(y, 0.0) << "row " << t;
        ASSERT_EQ(dq, 0.0) << "row " << t;
      } else {
        other = std::max(other, std::abs(y));
        other_g = std::max(other_g, std::abs(dq));
      }
    }
  EXPECT_GT(other, 1e-3);
  EXPECT_GT(other_g, 1e-6);
}

// λ_i = 1 for i <= N under logn and infoscale: identical rows, bit for bit;
// past N the rows differ (otherwise the test would prove nothing).
TEST(AttentionVariants, LognAndInfoscaleEqualSoftmaxUpToN) {
  const int N = 24;
  const Shape s{1, 64, 16, 2};
  const std::vector<double> qkv = random_vector(s.qkv_size(), 42, -2, 2);
  const std::vector<double> soft = forward(qkv, s, preset("softmax", N).spec, {});
  for (const char* name : {"logn", "infoscale"}) {
    const std::vector<double> out = forward(qkv, s, preset(name, N).spec, {});
    double past = 0;
    for (int t = 0; t < s.T; ++t)
      for (int c = 0; c < s.C; ++c) {
        const size_t k = static_cast<size_t>(t) * s.C + c;
        if (t < N)
          ASSERT_EQ(out[k], soft[k]) << name << " row " << t + 1;
        else
          past = std::max(past, std::abs(out[k] - soft[k]));
      }
    EXPECT_GT(past, 1e-6) << name << " must differ from softmax past N";
  }
}

TEST(AttentionVariants, LssaFirstRowHasWeightOne) {
  const Shape s{2, 5, 16, 2};
  const std::vector<double> qkv = random_vector(s.qkv_size(), 43, -2, 2);
  for (const char* name : {"lssa", "lssar"}) {
    std::vector<double> stats;
    const std::vector<double> out = forward(qkv, s, preset(name, 4).spec, {}, &stats);
    for (int b = 0; b < s.B; ++b)
      for (int c = 0; c < s.C; ++c)
        EXPECT_NEAR(out[static_cast<size_t>(b) * s.T * s.C + c],
                    qkv[static_cast<size_t>(b) * s.T * 3 * s.C + 2 * s.C + c], 1e-15)
            << name;
  }
}

// Keys after the query (j > i) get exactly zero weight (moving them changes
// nothing before them) and exactly zero gradient from earlier rows' losses.
TEST(AttentionVariants, MaskedKeysGetZeroWeightAndGradient) {
  const Shape s{1, 40, 16, 2};
  const int last = 20;  // losses on rows 0..last only
  const std::vector<double> qkv = random_vector(s.qkv_size(), 44, -1.5, 1.5);
  std::vector<double> w = random_vector(s.out_size(), 45);
  for (int t = last + 1; t < s.T; ++t)
    for (int c = 0; c < s.C; ++c) w[static_cast<size_t>(t) * s.C + c] = 0;
  for (const Variant& v : all_variants(8)) {
    const std::vector<double> hs = scales_for(v.spec, s.NH, 8);
    const std::vector<double> base = forward(qkv, s, v.spec, hs);
    std::vector<double> moved = qkv;
    for (int t = last + 1; t < s.T; ++t)
      for (int c = 0; c < 3 * s.C; ++c) moved[static_cast<size_t>(t) * 3 * s.C + c] += 0.37;
    const std::vector<double> out = forward(moved, s, v.spec, hs);
    for (int t = 0; t <= last; ++t)
      for (int c = 0; c < s.C; ++c)
        ASSERT_EQ(out[static_cast<size_t>(t) * s.C + c], base[static_cast<size_t>(t) * s.C + c]) << v.name;
    const std::vector<double> g = backward(qkv, w, s, v.spec, hs);
    double before = 0;
    for (int t = 0; t < s.T; ++t)
      for (int c = 0; c < 3 * s.C; ++c) {
        const double x = g[static_cast<size_t>(t) * 3 * s.C + c];
        if (t > last)
          ASSERT_EQ(x, 0.0) << v.name << " row " << t;
        else
          before = std::max(before, std::abs(x));
      }
    EXPECT_GT(before, 1e-6) << v.name;
  }
}

TEST(AttentionVariants, ThreadCountDoesNotChangeResults) {
  const Shape s{2, 70, 32, 4};
  const std::vector<float> qkv = cast<float>(random_vector(s.qkv_size(), 46));
  const std::vector<float> w = cast<float>(random_vector(s.out_size(), 47));
  const int saved = omp_get_max_threads();
  for (const char* name : {"lssar", "ssmax", "cosine", "sigmoid", "stick_breaking"}) {
    const AttentionSpec spec = preset(name, 16).spec;
    const std::vector<float> hs = cast<float>(scales_for(spec, s.NH, 9));
    std::vector<float> dh1, dh2;
    omp_set_num_threads(1);
    const std::vector<float> out1 = forward(qkv, s, spec, hs);
    const std::vector<float> g1 = backward(qkv, w, s, spec, hs, &dh1);
    omp_set_num_threads(2);
    const std::vector<float> out2 = forward(qkv, s, spec, hs);
    const std::vector<float> g2 = backward(qkv, w, s, spec, hs, &dh2);
    EXPECT_EQ(out1, out2) << name;
    EXPECT_EQ(g1, g2) << name;
    EXPECT_EQ(dh1, dh2) << name;
  }
  omp_set_num_threads(saved);
}

// ---- extreme inputs ----------------------------------------------------------------------------

// lssar over 16,384 keys where key 1 takes nearly all the weight: t_max =
// i·a_max − 1 ≈ 16383 and relu(t)^15 ≈ 1.6e63 would overflow float; the
// row-maximum rescaling keeps every weight finite and the row on key 1.
TEST(AttentionVariants, LssarSixteenThousandKeysDoNotOverflow) {
  const int T = 16384;
  const Shape s{1, T, 8, 1};
  std::vector<float> qkv(s.qkv_size());
  for (int t = 0; t < T; ++t) {
    float* row = &qkv[static_cast<size_t>(t) * 3 * s.C];
    for (int c = 0; c < s.C; ++c) {
      row[c] = c == 0 ? 1.0f : 0.0f;                        // q: the first axis
      row[s.C + c] = c == 0 ? (t == 0 ? 1.0f : -1.0f) : 0;  // k: key 1 aligned, the rest opposite
      row[2 * s.C + c] = t == 0 ? 2.0f : -1.0f;             // v: key 1 stands out
    }
  }
  const AttentionSpec spec = preset("lssar", 1024).spec;
  std::vector<float> stats;
  const std::vector<float> out = forward(qkv, s, spec, {}, &stats);
  for (float x : out) ASSERT_TRUE(std::isfinite(x));
  for (float x : stats) ASSERT_TRUE(std::isfinite(x));
  // The last row: a_1 ≈ 1, so w_1 = 1 and y = v_1.
  const float* last = &out[static_cast<size_t>(T - 1) * s.C];
  for (int c = 0; c < s.C; ++c) EXPECT_NEAR(last[c], 2.0f, 1e-5f);
  const float* st = &stats[static_cast<size_t>(T - 1) * kStats];
  const float t_max = T * st[2] - 1;
  EXPECT_GT(t_max, 16000.0f);
  EXPECT_TRUE(std::isinf(std::pow(t_max, 15.0f))) << "the unscaled form would overflow here";
  // The backward at the same magnitude (a shorter sequence keeps the test fast).
  const Shape sb{1, 2048, 8, 1};
  std::vector<float> qb(qkv.begin(), qkv.begin() + sb.qkv_size());
  const std::vector<float> g = backward(qb, cast<float>(random_vector(sb.out_size(), 48)), sb, spec, {});
  for (float x : g) ASSERT_TRUE(std::isfinite(x));
}

// Dot scores of ±1e4 in every dot-product preset: finite forward and backward.
TEST(AttentionVariants, DotVariantsFiniteAtScoresOf1e4) {
  const Shape s{1, 64, 32, 2};
  std::vector<double> base = random_vector(s.qkv_size(), 49);
  // q·k/sqrt(16) with |q|,|k| entries ~ 100: |scores| up to ~1e4.
  for (int t = 0; t < s.T; ++t)
    for (int c = 0; c < 2 * s.C; ++c) base[static_cast<size_t>(t) * 3 * s.C + c] *= 200.0;
  const std::vector<float> qkv = cast<float>(base);
  const std::vector<float> w = cast<float>(random_vector(s.out_size(), 50));
  int checked = 0;
  for (const Variant& v : all_variants(16)) {
    if (v.spec.score != Score::Dot) continue;
    ++checked;
    const std::vector<float> hs = cast<float>(scales_for(v.spec, s.NH, 10));
    for (float x : forward(qkv, s, v.spec, hs)) ASSERT_TRUE(std::isfinite(x)) << v.name;
    std::vector<float> dh;
    for (float x : backward(qkv, w, s, v.spec, hs, &dh)) ASSERT_TRUE(std::isfinite(x)) << v.name;
    for (float x : dh) ASSERT_TRUE(std::isfinite(x)) << v.name;
  }
  EXPECT_GE(checked, 8);
  // and the scores really were that large
  double max_score = 0;
  for (int i = 0; i < s.T; ++i)
    for (int j = 0; j <= i; ++j) {
      double qk = 0;
      for (int c = 0; c < 16; ++c) qk += base[i * 3 * s.C + c] * base[j * 3 * s.C + s.C + c];
      max_score = std::max(max_score, std::abs(qk) / 4);
    }
  EXPECT_GT(max_score, 5e3);
}

// Identical keys make every row exactly uniform. At rows i = 4 and 8 (i·(1/i)
// is exact) t_ij = i·a_ij − 1 = 0 for all j: no key is above its uniform
// share, Σr = 0, and docs/attention.md's rule keeps the stage-4 weights.
TEST(AttentionVariants, UniformRowUnderReweightKeepsStage4Weights) {
  const Shape s{1, 8, 4, 1};
  std::vector<double> qkv(s.qkv_size());
  const std::vector<double> vals = random_vector(s.T * s.C, 51);
  for (int t = 0; t < s.T; ++t)
    for (int c = 0; c < s.C; ++c) {
      qkv[t * 3 * s.C + c] = 0.3 * (c + 1);
      qkv[t * 3 * s.C + s.C + c] = 0.5;
      qkv[t * 3 * s.C + 2 * s.C + c] = vals[t * s.C + c];
    }
  for (const char* name : {"softmax", "lssar"}) {
    AttentionSpec spec = preset(name, 4).spec;
    spec.p = 15;
    std::vector<double> stats;
    const std::vector<double> out = forward(qkv, s, spec, {}, &stats);
    for (int i : {4, 8}) {
      if (std::string(name) == "softmax") {
        // exp(0) = 1 and 1/i are exact: the row is uniform to the last bit.
        EXPECT_EQ(i * stats[(i - 1) * kStats + 2] - 1, 0.0) << "row " << i << " is exactly uniform";
        EXPECT_EQ(stats[(i - 1) * kStats + 3], 0.0) << "row " << i << ": Σr = 0, the fallback is taken";
      }
      // Either way (fallback, or all t equal and tiny) the weights stay uniform.
      for (int c = 0; c < s.C; ++c) {
        double mean = 0;
        for (int j = 0; j < i; ++j) mean += vals[j * s.C + c] / i;
        EXPECT_NEAR(out[(i - 1) * s.C + c], mean, 1e-14) << name << " row " << i;
      }
    }
    const std::vector<double> g = backward(qkv, random_vector(s.out_size(), 52), s, spec, {});
    for (double x : g) ASSERT_TRUE(std::isfinite(x));
  }
  // relu + l1 with every score negative: Z = 0, a = 0, t = −1 everywhere:
  // zero weights (no 0/0) and zero gradient into q and k.
  AttentionSpec relu = preset("relu", 4, [](AttentionConfig& a) { a.normalize = "l1", a.p = 15; }).spec;
  for (int t = 0; t < s.T; ++t)
    for (int c = 0; c < s.C; ++c) qkv[t * 3 * s.C + s.C + c] = -0.5;
  for (double x : forward(qkv, s, relu, {})) EXPECT_EQ(x, 0.0);
  const std::vector<double> g = backward(qkv, random_vector(s.out_size(), 53), s, relu, {});
  for (double x : g) EXPECT_EQ(x, 0.0);
}

// ---- diagnostics --------------------------------------------------------------------------------

// Uniform rows (identical keys): entropy ln i, sink share 1/i, recent-N share
// min(N, i)/i, total weight 1, summed over rows; the largest |score| against
// its T×T reference.
TEST(AttentionVariants, DiagnosticsOfUniformRows) {
  const int N = 3;
  const Shape s{2, 10, 4, 2};
  std::vector<double> qkv = random_vector(s.qkv_size(), 54);
  for (size_t r = 0; r < qkv.size() / (3 * s.C); ++r)
    for (int c = 0; c < s.C; ++c) qkv[r * 3 * s.C + s.C + c] = 0.25;
  std::vector<double> diag;
  forward(qkv, s, preset("softmax", N).spec, std::vector<double>{}, static_cast<std::vector<double>*>(nullptr), &diag);
  double entropy = 0, sink = 0, recent = 0;
  for (int i = 1; i <= s.T; ++i) {
    entropy += std::log(i);
    sink += 1.0 / i;
    recent += std::min(N, i) / static_cast<double>(i);
  }
  for (int h = 0; h < s.NH; ++h) {
    const double* d = &diag[h * kAttentionDiagStats];
    EXPECT_NEAR(d[0], s.B * entropy, 1e-12);
    EXPECT_NEAR(d[1], s.B * sink, 1e-12);
    EXPECT_NEAR(d[2], s.B * recent, 1e-12);
    EXPECT_NEAR(d[3], s.B * s.T, 1e-12);
    EXPECT_EQ(d[4], s.B * s.T);
    // The largest |σ_ij| = |q_i·k_j|/sqrt(D) over the sequences, rows and keys j <= i (docs/attention.md, stage 1).
    const int D = s.C / s.NH;
    double most = 0;
    for (int b = 0; b < s.B; ++b)
      for (int i = 0; i < s.T; ++i)
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int c = 0; c < D; ++c)
            dot += qkv[(b * s.T + i) * 3 * s.C + h * D + c] * qkv[(b * s.T + j) * 3 * s.C + s.C + h * D + c];
          most = std::max(most, std::abs(dot) / std::sqrt(static_cast<double>(D)));
        }
    EXPECT_NEAR(d[kDiagMaxScore], most, 1e-14) << "head " << h;
    EXPECT_GT(most, 0.0);
  }
}

TEST(AttentionVariants, AlibiSlopes) {
  // Power of two: 2^(-8k/n); otherwise the next power's odd slopes fill in.
  for (int h = 0; h < 4; ++h) EXPECT_DOUBLE_EQ(attn::alibi_slope(h, 4), std::pow(2.0, -2.0 * (h + 1)));
  const double six[] = {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125};
  for (int h = 0; h < 6; ++h) EXPECT_DOUBLE_EQ(attn::alibi_slope(h, 6), six[h]) << h;
}

TEST(AttentionVariants, RejectsBadArguments) {
  const Shape s{1, 4, 8, 2};
  std::vector<float> qkv(s.qkv_size()), out(s.out_size());
  AttentionSpec ssmax = preset("ssmax", 4).spec;
  EXPECT_THROW(attention_forward(out.data(), static_cast<float*>(nullptr), qkv.data(), 1, 4, 8, 2, ssmax,
                                 static_cast<const float*>(nullptr), nullptr),
               gpt::Error);
  AttentionSpec neg = preset("lssar", 4).spec;
  neg.p = -1;
  EXPECT_THROW(attention_forward(out.data(), static_cast<float*>(nullptr), qkv.data(), 1, 4, 8, 2, neg,
                                 static_cast<const float*>(nullptr), nullptr),
               gpt::Error);
}

}  // namespace
}  // namespace gpt::cpu
