// The stage math of kernels/attention_spec.h on its own: each stage's
// derivative against finite differences (double precision), the safe forms
// at extreme inputs, and the scales' defining properties.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "kernels/attention_spec.h"
#include "util/gradcheck.h"

namespace gpt {
namespace {

using test::numeric_gradient;
using test::random_vector;

// φ'(x) from positivity_grad against the five-point derivative of φ.
TEST(AttentionStages, PositivityDerivatives) {
  for (int k = 0; k < kPositivityCount; ++k) {
    const auto phi = static_cast<Positivity>(k);
    std::vector<double> xs = random_vector(200, 60 + k, -6, 6);
    std::vector<double> analytic, numeric;
    for (double& x : xs) {
      if (phi == Positivity::Relu && std::abs(x) < 1e-2) x += 0.1;  // off the kink
      analytic.push_back(attn::positivity_grad(phi, x, attn::positivity(phi, x)));
      std::vector<double> one{x};
      numeric.push_back(numeric_gradient(one, [&] { return attn::positivity(phi, one[0]); })[0]);
    }
    test::expect_gradient("stage3", stage_name(phi), analytic, numeric);
  }
}

TEST(AttentionStages, SafeFormsAtExtremes) {
  EXPECT_EQ(attn::softplus(1000.0), 1000.0);
  EXPECT_EQ(attn::softplus(-1000.0), 0.0);
  EXPECT_EQ(attn::softplus(1000.0f), 1000.0f);
  EXPECT_NEAR(attn::softplus(0.0), std::log(2.0), 1e-16);
  EXPECT_EQ(attn::sigmoid(-1000.0f), 0.0f);
  EXPECT_EQ(attn::sigmoid(1000.0f), 1.0f);
  EXPECT_TRUE(std::isfinite(attn::positivity_grad(Positivity::Softplus, 1e4f, attn::softplus(1e4f))));
  // r = (t / t_max)^p stays in [0, 1] whatever t reaches.
  EXPECT_EQ(attn::sharpen_value(16383.0f, 16383.0f, 15.0f), 1.0f);
  EXPECT_EQ(attn::sharpen_value(-3.0f, 16383.0f, 15.0f), 0.0f);
}

// λ_i's definitions: logn and infoscale are 1 up to N and grow past it; lssa
// is 0 at row 1; ssmax starts at s_h = 1/ln N, i.e. λ_N = 1.
TEST(AttentionStages, RowScales) {
  AttentionSpec s;
  s.trained_context = 64;
  const int d = 32;
  for (Scale k : {Scale::Logn, Scale::Infoscale}) {
    s.scale = k;
    for (int i = 1; i <= 64; ++i) EXPECT_EQ(attn::row_scale(s, i, d, 0), 1.0) << stage_name(k) << " i=" << i;
    EXPECT_GT(attn::row_scale(s, 65, d, 0), 1.0) << stage_name(k);
    EXPECT_GT(attn::row_scale(s, 1024, d, 0), attn::row_scale(s, 128, d, 0)) << stage_name(k);
  }
  s.scale = Scale::Logn;
  EXPECT_NEAR(attn::row_scale(s, 64 * 16, d, 0), std::log(1024.0) / std::log(64.0), 1e-15);
  s.scale = Scale::Lssa;
  EXPECT_EQ(attn::row_scale(s, 1, d, 0), 0.0);
  EXPECT_NEAR(attn::row_scale(s, 100, d, 0), std::log(32.0) * std::log(100.0), 1e-13);
  s.scale = Scale::Ssmax;
  EXPECT_NEAR(attn::row_scale(s, 64, d, attn::ssmax_init(64)), 1.0, 1e-15);
  // dλ/ds_h against finite differences.
  std::vector<double> analytic, numeric;
  for (int i : {1, 2, 17, 64, 1000}) {
    analytic.push_back(attn::row_scale_grad(s, i, d));
    std::vector<double> sh{0.3};
    numeric.push_back(numeric_gradient(sh, [&] { return attn::row_scale(s, i, d, sh[0]); })[0]);
  }
  test::expect_gradient("stage2", "ssmax dλ/ds", analytic, numeric);
  // HeadScale (Wang et al. 2024, arXiv 2404.12224, the head-based scale: q scaled by λ_h/√d
  // before q·k, so the head's logits × λ_h): λ_i = τ_h·λ′_i on top of any
  // scale and temperature, and dλ_i/dτ_h = λ′_i.
  s.head_temperature = true;
  s.temperature = Temperature::Llama4;
  s.trained_context = 64;
  for (Scale sc : {Scale::None, Scale::Logn, Scale::Lssa}) {
    s.scale = sc;
    analytic.clear(), numeric.clear();
    for (int i : {2, 17, 64, 1000}) {
      AttentionSpec plain = s;
      plain.head_temperature = false;
      EXPECT_NEAR(attn::row_scale(s, i, d, 1.7), 1.7 * attn::row_scale(plain, i, d, 0.3), 1e-12);
      analytic.push_back(attn::row_scale_grad(s, i, d));
      std::vector<double> tau{1.3};
      numeric.push_back(numeric_gradient(tau, [&] { return attn::row_scale(s, i, d, tau[0]); })[0]);
    }
    test::expect_gradient("stage2", "HeadScale dλ/dτ", analytic, numeric);
  }
}

// Stages 4 and 5 of one row as a function of its φ values u: the chain
// grad_a (re-weighting) then grad_x (l1, with φ = identity via relu on
// positive x) against finite differences of L = Σ_j g_j w_j.
TEST(AttentionStages, NormalisationAndReweightingDerivatives) {
  for (double p : {0.0, 3.0, 15.0}) {
    AttentionSpec s;
    s.positivity = Positivity::Relu;
    s.normalize = Normalize::L1;
    s.p = p;
    const int n = 12, i = n;
    std::vector<double> x = random_vector(n, 70, 0.1, 2.0);  // u = relu(x) = x > 0
    x[3] = 9.0;                                              // one key well above its share
    const std::vector<double> g = random_vector(n, 71);
    auto weights = [&](const std::vector<double>& xs) {
      double z = 0;
      for (double v : xs) z += v;
      double st[4] = {0, z, 0, 0};
      for (double v : xs) st[2] = std::max(st[2], v / z);
      attn::Row<double> r = attn::row_from_stats(s, i, st);
      double rs = 0;
      std::vector<double> w(n);
      for (int j = 0; j < n; ++j)
        rs += (w[j] = r.sharpen ? attn::sharpen_value(i * xs[j] / z - r.offset, r.t_max, r.p) : xs[j] / z);
      if (r.sharpen)
        for (double& v : w) v /= rs;
      return std::make_pair(w, std::make_pair(r, rs));
    };
    auto loss = [&] {
      const auto w = weights(x).first;
      double l = 0;
      for (int j = 0; j < n; ++j) l += g[j] * w[j];
      return l;
    };
    auto [w, rr] = weights(x);
    attn::Row<double> r = rr.first;
    if (r.sharpen) r.inv_r = 1 / rr.second;
    double D = 0;
    for (int j = 0; j < n; ++j) D += w[j] * g[j];
    std::vector<double> h(n);
    double S = 0;
    for (int j = 0; j < n; ++j) {
      const double a = r.a(s, x[j]);
      h[j] = attn::grad_a(r, a, w[j], g[j], D);
      S += a * h[j];
    }
    std::vector<double> analytic(n);
    for (int j = 0; j < n; ++j) analytic[j] = attn::grad_x(s, r, x[j], h[j], S);
    const std::vector<double> numeric = numeric_gradient(x, loss, 1e-4);
    const std::string name = "l1+reweight p=" + std::to_string(static_cast<int>(p));
    test::expect_gradient("stage4+5", name.c_str(), analytic, numeric);
  }
}

// Sharpening needs the row's largest t = i·max a − o above kSharpenMinTMax:
// below it (rounding level) the row keeps its stage-4 weights, in float and
// double alike; a row just above it is sharpened.
TEST(AttentionStages, SharpeningNeedsTMaxAboveRounding) {
  AttentionSpec s;
  s.p = 15;
  const int i = 100;
  auto row = [&](auto zero, double t_max) {
    using T = decltype(zero);
    const T st[4] = {T(0), T(1), static_cast<T>((1.0 + t_max) / i), T(1)};
    return attn::row_from_stats(s, i, st);
  };
  for (double t_max : {-1e-3, 0.0, 1e-8, 5e-5}) {
    EXPECT_FALSE(row(0.0, t_max).sharpen) << t_max;
    EXPECT_FALSE(row(0.0f, t_max).sharpen) << t_max;
  }
  for (double t_max : {3e-4, 0.5, 99.0}) {
    EXPECT_TRUE(row(0.0, t_max).sharpen) << t_max;
    EXPECT_TRUE(row(0.0f, t_max).sharpen) << t_max;
  }
  // Unsharpened rows pass weights and gradients through: w = a, dL/da = g.
  const attn::Row<double> flat = row(0.0, 1e-8);
  EXPECT_EQ(flat.w_from_a(0.01), 0.01);
  EXPECT_EQ(attn::grad_a(flat, 0.01, 0.01, 0.7, 0.3), 0.7);
  // Rows 1..offset_rows have o = 0, so t_max = i·max a >= 1: always sharpened.
  s.offset_rows = 3;
  const double st[4] = {0, 1, 1.0 / 3, 1};
  EXPECT_TRUE(attn::row_from_stats(s, 3, st).sharpen);
}

TEST(AttentionStages, PresetTableIsConsistent) {
  for (const auto& p : kAttentionPresets) {
    EXPECT_GE(p.p, 0.0) << p.name;
    EXPECT_GT(p.cosine_scale, 0.0) << p.name;
  }
  EXPECT_EQ(kAttentionPresetCount, 13);
  EXPECT_STREQ(stage_name(Scale::Infoscale), "infoscale");
  EXPECT_STREQ(stage_name(Normalize::Fixed), "fixed");
  EXPECT_STREQ(stage_name(Normalize::Softpick), "softpick");
  EXPECT_STREQ(stage_name(Normalize::StickBreaking), "stick_breaking");
}

}  // namespace
}  // namespace gpt
