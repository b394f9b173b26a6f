// The vectorised float rows of the attention kernel (kernels/cpu/attention_rows.h)
// against the scalar rows built from attention_spec.h's attn:: functions, for
// every positivity × normalisation, with and without sharpening and ALiBi,
// at row lengths around the vector width, on every instruction set the
// processor supports.
#include "kernels/cpu/attention_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace gpt::cpu::attn_rows {
namespace {

std::vector<GemmKernel> available_isas() {
  std::vector<GemmKernel> v;
  for (GemmKernel k : {GemmKernel::Generic, GemmKernel::Avx2, GemmKernel::Avx512})
    if (gemm_kernel_available(k)) v.push_back(k);
  return v;
}

struct Case {
  AttentionSpec spec;
  std::string name;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  for (int pk = 0; pk < kPositivityCount; ++pk)
    for (int nk = 0; nk < kNormalizeCount; ++nk)
      for (double p : {0.0, 3.0, 15.0})
        for (bool alibi : {false, true}) {
          AttentionSpec s;
          s.positivity = static_cast<Positivity>(pk);
          s.normalize = static_cast<Normalize>(nk);
          s.p = p;
          s.norm_const = 16;
          s.bias = s.positivity == Positivity::Sigmoid ? -std::log(16.0) : 0.0;
          s.position_bias = alibi ? PositionBias::Alibi : PositionBias::None;
          if (attn::stick_breaking(s)) {  // sigmoid's break fractions, no bias, no re-weighting
            if (attn::refusal(s)) continue;
            s.bias = 0;
          }
          v.push_back({s, std::string(stage_name(s.positivity)) + "/" + stage_name(s.normalize) + "/p" +
                              std::to_string(static_cast<int>(p)) + (alibi ? "/alibi" : "")});
        }
  return v;
}

// Relative difference, with an absolute floor at `floor` times the scale.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b, int n, double floor_scale) {
  double worst = 0;
  for (int j = 0; j < n; ++j)
    worst = std::max(worst, std::abs(double(a[j]) - b[j]) / std::max(std::abs(double(b[j])), floor_scale));
  return worst;
}

TEST(AttentionRows, VectorRowsMatchScalarRowsOnEveryInstructionSet) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int compared = 0;
  for (const Case& c : cases()) {
    const AttentionSpec& s = c.spec;
    for (int n : {1, 2, 3, 15, 16, 17, 33, 100}) {
      const int cap = padded_keys(n);
      RowArgs<float> a{n, n, 0.8f + 0.1f * (n % 3), static_cast<float>(s.bias), s.alibi() ? 0.25f : 0.0f};
      std::vector<float> qk(cap), g0(cap);
      for (int j = 0; j < cap; ++j) qk[j] = 2.0f * normal(rng), g0[j] = normal(rng);
      // scalar reference
      std::vector<float> ws(qk), sts(4);
      forward_row_scalar(ws.data(), a, s, sts.data());
      const attn::Row<float> rs = attn::row_from_stats(s, n, sts.data());
      std::vector<float> us(cap), wbs(cap), gs(g0);
      backward_weights_row_scalar(qk.data(), us.data(), wbs.data(), a, s, rs);
      float D = 0;
      for (int j = 0; j < n; ++j) D += wbs[j] * g0[j];
      const double sds =
          backward_grad_row_scalar(qk.data(), us.data(), wbs.data(), gs.data(), a, s, rs, D, 0.7f, 0.5f, true);
      double w_scale = 0, g_scale = 0;
      for (int j = 0; j < n; ++j) w_scale = std::max(w_scale, double(std::abs(ws[j])));
      for (int j = 0; j < n; ++j) g_scale = std::max(g_scale, double(std::abs(gs[j])));
      std::vector<std::vector<float>> first;  // the first ISA's results
      for (GemmKernel isa : available_isas()) {
        const std::string what = c.name + " n=" + std::to_string(n) + " " + gemm_kernel_name(isa);
        std::vector<float> wv(qk), stv(4);
        forward_row_vec(isa, wv.data(), a, s, stv.data());
        EXPECT_LT(rel_diff(wv, ws, n, 1e-6 * w_scale + 1e-30), 2e-5) << what;
        for (int k = 0; k < 4; ++k)
          EXPECT_NEAR(stv[k], sts[k], 2e-5 * std::max(1.0f, std::abs(sts[k]))) << what << " stat " << k;
        const attn::Row<float> rv = attn::row_from_stats(s, n, stv.data());
        std::vector<float> uv(cap, NAN), wbv(cap, NAN), gv(g0);
        backward_weights_row_vec(isa, qk.data(), uv.data(), wbv.data(), a, s, rv);
        EXPECT_LT(rel_diff(wbv, wbs, n, 1e-6 * w_scale + 1e-30), 2e-5) << what;
        for (int j = n; j < cap; ++j) EXPECT_EQ(wbv[j], 0.0f) << what << " padding";
        const double sdv =
            backward_grad_row_vec(isa, qk.data(), uv.data(), wbv.data(), gv.data(), a, s, rv, D, 0.7f, 0.5f, true);
        EXPECT_LT(rel_diff(gv, gs, n, 1e-4 * g_scale + 1e-30), 1e-3) << what;
        for (int j = n; j < cap; ++j) EXPECT_EQ(gv[j], 0.0f) << what << " padding";
        EXPECT_NEAR(sdv, sds, 1e-3 * std::max(1.0, std::abs(sds))) << what;
        const std::vector<std::vector<float>> res = {std::vector<float>(wv.begin(), wv.begin() + n), stv,
                                                     std::vector<float>(gv.begin(), gv.begin() + n)};
        if (first.empty()) first = res;
        for (size_t t = 0; t < res.size(); ++t)  // the instruction sets agree up to float rounding
          for (size_t j = 0; j < res[t].size(); ++j)
            EXPECT_NEAR(res[t][j], first[t][j], 1e-5 * std::max(1.0f, std::abs(first[t][j]))) << what;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, (4 * 6 * 3 * 2 + 2) * 8);  // stick-breaking: sigmoid, p = 0 only
}

// Saturated sigmoid rows (every φ ≈ e^-87, Z ≈ 1e-38) under sharpening: the
// gradient stays finite (φ'/Z is formed before multiplying by h − S).
TEST(AttentionRows, SaturatedRowsGiveFiniteGradients) {
  AttentionSpec s;
  s.positivity = Positivity::Sigmoid;
  s.normalize = Normalize::L1;
  s.p = 15;
  for (int n : {2, 3, 20}) {
    const int cap = padded_keys(n);
    RowArgs<float> a{n, n, 1.0f, -3.0f, 0.0f};
    std::vector<float> qk(cap, -1e4f), w(qk), st(4), u(cap), wb(cap), g(cap, 3.0f);
    g[0] = -2.0f;
    for (GemmKernel isa : available_isas()) {
      forward_row_vec(isa, w.data(), a, s, st.data());
      const attn::Row<float> r = attn::row_from_stats(s, n, st.data());
      backward_weights_row_vec(isa, qk.data(), u.data(), wb.data(), a, s, r);
      backward_grad_row_vec(isa, qk.data(), u.data(), wb.data(), g.data(), a, s, r, 1.0f, 1.0f, 1.0f, false);
      for (int j = 0; j < n; ++j) ASSERT_TRUE(std::isfinite(g[j])) << n << " " << gemm_kernel_name(isa);
    }
  }
}

}  // namespace
}  // namespace gpt::cpu::attn_rows
