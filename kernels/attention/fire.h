// FIRE's bias table: the MLP of the normalised log distance, its gradient.
// (Part of kernels/attention_spec.h, which includes it; GPT_HD functions that
// both backends compile.)
#pragma once
#include "kernels/attention_spec.h"

namespace gpt {
namespace attn {

// FIRE (Li et al. 2023, "Functional Interpolation for Relative Positions
// Improves Long Context Transformers", arXiv 2310.04418; docs/contenders.md): per
// layer a small MLP f: 1 → kWidth → NH (ReLU between) of the progressively
// normalised log distance
//   u(i0, Δ) = ψ(Δ) / (ψ(max(i0, L)) + ε),   ψ(x) = ln(|c|·x + 1),   L = |m|·L₀,
// with i0 the 0-based query position, Δ = i0 − j, c and the multiplier m
// learned, b_h(i0, Δ) = f(u)_h. Initial c = 0.1, m = 1, ε = 1e-6 and the
// fixed L₀ follow the paper's code (L₀ = 512 at N = 2048); this project takes
// L₀ = N/4 at every N. The MLP's layers start as a linear layer's default
// draw: U(±1/sqrt(fan_in)) for weights and biases. max(i0, L) passes half
// the gradient to each side where they tie, as a finite difference sees it.
// One layer's parameters are one block (count(NH) values):
//   [w1 (kWidth) | b1 (kWidth) | w2 (NH × kWidth, row h) | b2 (NH) | c | m].
namespace fire {
inline constexpr int kWidth = 32;
inline constexpr double kEps = 1e-6;
inline constexpr double kInitC = 0.1;
inline constexpr double kInitMultiplier = 1.0;
GPT_HD constexpr int w1() { return 0; }
GPT_HD constexpr int b1() { return kWidth; }
GPT_HD constexpr int w2() { return 2 * kWidth; }
GPT_HD constexpr int b2(int NH) { return (2 + NH) * kWidth; }
GPT_HD constexpr int c(int NH) { return (2 + NH) * kWidth + NH; }
GPT_HD constexpr int m(int NH) { return (2 + NH) * kWidth + NH + 1; }
GPT_HD constexpr int count(int NH) { return (2 + NH) * kWidth + NH + 2; }
// L₀ of a model trained at context N.
GPT_HD inline double threshold0(int trained_context) { return trained_context >= 4 ? trained_context / 4.0 : 1.0; }
GPT_HD inline double sign(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }

// u and its derivatives by c and by m at (i0, Δ), Δ >= 0.
struct Input {
  double u = 0, du_dc = 0, du_dm = 0;
};
GPT_HD inline Input input(double c, double mult, double L0, int i0, int dist) {
  const double ac = fabs(c), L = fabs(mult) * L0, d = dist;
  const double n = L > i0 ? L : static_cast<double>(i0);
  const double share = L > i0 ? 1.0 : (L == i0 ? 0.5 : 0.0);  // ∂max(i0, L)/∂L
  const double psi_d = log1p(ac * d), psi_n = log1p(ac * n), den = psi_n + kEps;
  Input r;
  r.u = psi_d / den;
  const double dpsi_d_dc = sign(c) * d / (1.0 + ac * d);
  const double dpsi_n_dc = sign(c) * n / (1.0 + ac * n);
  const double dpsi_n_dm = share * ac / (1.0 + ac * n) * sign(mult) * L0;
  r.du_dc = dpsi_d_dc / den - psi_d * dpsi_n_dc / (den * den);
  r.du_dm = -psi_d * dpsi_n_dm / (den * den);
  return r;
}
// The input of a layer's block p at (i0, Δ).
template <typename P>
GPT_HD inline Input input_of(const P* p, int NH, double L0, int i0, int dist) {
  return input(static_cast<double>(p[c(NH)]), static_cast<double>(p[m(NH)]), L0, i0, dist);
}
// b_h = f(u)_h of every head: out[h·os].
template <typename P, typename O>
GPT_HD inline void biases(const P* p, int NH, double u, O* out, long os) {
  double hid[kWidth];
  for (int k = 0; k < kWidth; ++k) {
    const double pre = static_cast<double>(p[w1() + k]) * u + static_cast<double>(p[b1() + k]);
    hid[k] = pre > 0 ? pre : 0.0;
  }
  for (int h = 0; h < NH; ++h) {
    double y = static_cast<double>(p[b2(NH) + h]);
    for (int k = 0; k < kWidth; ++k) y += static_cast<double>(p[w2() + h * kWidth + k]) * hid[k];
    out[h * os] = static_cast<O>(y);
  }
}
// dL/dh_k before the ReLU's gate: Σ_h g_h·w2[h][k] (g: dL/db_h at the pair,
// NH values g[h·gs]).
template <typename P, typename G>
GPT_HD inline double hidden_grad(const P* p, int NH, int k, const G* g, long gs) {
  double s = 0;
  for (int h = 0; h < NH; ++h) s += static_cast<double>(g[h * gs]) * static_cast<double>(p[w2() + h * kWidth + k]);
  return s;
}
// The pair's contribution to dL/dp[k] for parameter k of the block, given
// dL/db_h = g[h·gs] at the pair and its input in.
template <typename P, typename G>
GPT_HD inline double param_grad(const P* p, int NH, int k, const Input& in, const G* g, long gs) {
  if (k < b1() + kWidth) {  // w1, b1: through hidden unit k mod kWidth
    const int j = k < b1() ? k : k - b1();
    const double pre = static_cast<double>(p[w1() + j]) * in.u + static_cast<double>(p[b1() + j]);
    if (!(pre > 0)) return 0.0;
    const double dh = hidden_grad(p, NH, j, g, gs);
    return k < b1() ? dh * in.u : dh;
  }
  if (k < b2(NH)) {  // w2[h][j]
    const int h = (k - w2()) / kWidth, j = (k - w2()) % kWidth;
    const double pre = static_cast<double>(p[w1() + j]) * in.u + static_cast<double>(p[b1() + j]);
    return pre > 0 ? static_cast<double>(g[h * gs]) * pre : 0.0;
  }
  if (k < c(NH)) return static_cast<double>(g[(k - b2(NH)) * gs]);
  double du = 0;  // c, m: through u
  for (int j = 0; j < kWidth; ++j) {
    const double w = static_cast<double>(p[w1() + j]);
    if (w * in.u + static_cast<double>(p[b1() + j]) > 0) du += hidden_grad(p, NH, j, g, gs) * w;
  }
  return du * (k == c(NH) ? in.du_dc : in.du_dm);
}
}  // namespace fire

}  // namespace attn
}  // namespace gpt
