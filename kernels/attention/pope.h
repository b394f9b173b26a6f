// PoPE, polar coordinate positions: the transform of q and k into the
// kernels' heads, its derivative and its constants. (Part of
// kernels/attention_spec.h, which includes it; GPT_HD functions that both
// backends compile.)
#pragma once
#include "kernels/attention_spec.h"

namespace gpt {
namespace attn {

// PoPE (Gopalakrishnan, Csordás, Schmidhuber, Mozer 2025, "Decoupling the
// 'What' and 'Where' With Polar Coordinate Positional Embeddings", arXiv
// 2509.10534, §3 Eqs. 3–10; docs/context_extension.md). Each of a head's D
// channels c becomes a complex number of magnitude softplus(x_c) (Eq. 3)
// and phase t·θ_c (Eq. 4), θ_c = b^(−c/D) for c = 0..D−1 (D frequencies,
// not RoPE's D/2; b = model.rope_theta), and the key's phase is shifted by
// a learned δ_{h,c} clamped to [−2π, 0]. The score of query t and key s is
// Re Σ_c q̃_c conj(k̃_c) / sqrt(D) = Σ_c μ_q μ_k cos((t − s)θ_c − δ_c) / sqrt(D)
// (Eq. 6 with the 1/sqrt(D) of the reference code). The kernels compute it
// as the dot product of real heads of 2D channels: q′ = √2·μ_q·[cos φ_t |
// sin φ_t], k′ = μ_k·[cos(φ_s + δ) | sin(φ_s + δ)] (Eqs. 7–10; the √2
// turns the kernels' 1/sqrt(2D) into 1/sqrt(D)); the value head is
// [v | 0] and the output keeps its first D channels.
namespace pope {
inline constexpr double kTwoPi = 6.283185307179586476925;
inline constexpr double kQueryGain = 1.4142135623730950488;  // √2
// θ_c of channel c of a head of D.
GPT_HD inline double freq(double base, int c, int D) { return pow(base, -static_cast<double>(c) / D); }
// δ as the transform uses it: the learned value clamped to [−2π, 0], and
// whether the learned value gets the gradient (inside the range, ends included).
GPT_HD inline double phase_bias(double raw) { return raw < -kTwoPi ? -kTwoPi : (raw > 0.0 ? 0.0 : raw); }
GPT_HD inline bool bias_passes(double raw) { return raw >= -kTwoPi && raw <= 0.0; }
// The position of row n of a (B, Tn) batch: its position id where ids are
// given (training-time ids, docs/training_for_length.md), else its index in
// the sequence.
GPT_HD inline double row_position(const int32_t* pos, size_t n, int Tn) {
  return pos ? static_cast<double>(pos[n]) : static_cast<double>(n % static_cast<size_t>(Tn));
}
// softplus and its derivative σ, in double.
GPT_HD inline double magnitude(double x) { return (x > 0 ? x : 0.0) + log1p(exp(-fabs(x))); }
GPT_HD inline double magnitude_grad(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }
// Channel c of a head at position t, as both backends' kernels transform it:
// the query's phase φ = t·θ_c, the key's ψ = φ + δ (δ clamped), the kernel
// head's entries of a query or key value x (its cos and sin halves) and the
// derivatives of the transform given the gradients of those entries.
struct Channel {
  double phi, psi;
  GPT_HD Channel(double base, double t, int c, int D, double delta_raw)
      : phi(t * freq(base, c, D)), psi(t * freq(base, c, D) + phase_bias(delta_raw)) {}
  GPT_HD void query(double x, double* cos_part, double* sin_part) const {
    const double m = kQueryGain * magnitude(x);
    *cos_part = m * cos(phi), *sin_part = m * sin(phi);
  }
  GPT_HD void key(double x, double* cos_part, double* sin_part) const {
    const double m = magnitude(x);
    *cos_part = m * cos(psi), *sin_part = m * sin(psi);
  }
  // dL/dx of a query (key) value from dL/d its cos and sin entries.
  GPT_HD double query_grad(double x, double g_cos, double g_sin) const {
    return kQueryGain * magnitude_grad(x) * (g_cos * cos(phi) + g_sin * sin(phi));
  }
  GPT_HD double key_grad(double x, double g_cos, double g_sin) const {
    return magnitude_grad(x) * (g_cos * cos(psi) + g_sin * sin(psi));
  }
  // dL/dδ of key value x (before the clamp's mask, bias_passes).
  GPT_HD double bias_grad(double x, double g_cos, double g_sin) const {
    return magnitude(x) * (-g_cos * sin(psi) + g_sin * cos(psi));
  }
};
}  // namespace pope

}  // namespace attn
}  // namespace gpt
