// The context-extension rules on RoPE: distance remapping, frequency rules,
// YaRN's attention factor, SelfExtend's group and the spec per evaluated length.
// (Part of kernels/attention_spec.h, which includes it; GPT_HD functions that
// both backends compile.)
#pragma once
#include "kernels/attention_spec.h"

namespace gpt {

// ---- relative-distance remapping (docs/context_extension.md §2) --------------------------
namespace remap {

GPT_HD inline bool on(const RopeSpec& r) { return r.remap != RemapKind::None; }
// Dual chunk attention's chunk length s = (s + w) − w.
GPT_HD inline int dca_chunk(const RopeSpec& r) { return r.remap_window - r.remap_local; }
// The far keys of query m (0-based) are n < far_end(m), a prefix of the row
// that never shrinks from one query to the next (the kernels rely on both):
//   every rule but dual_chunk   n <= m − W (the distance reaches the window)
//   dual_chunk                  the chunks before the query's own, but for its
//                               first w + 1 queries the chunk just before too
//                               (An et al. 2024: those keep their true distance,
//                               at most s + w: intra- and successive-chunk)
GPT_HD inline int far_end(const RopeSpec& r, int m) {
  if (r.remap == RemapKind::None) return 0;
  if (r.remap != RemapKind::DualChunk) return m - r.remap_window + 1;
  const int s = dca_chunk(r), chunk = m / s;
  const int end = (m % s > r.remap_local ? chunk : chunk - 1) * s;
  return end > 0 ? end : 0;
}
// Whether key n (0-based) of query m is scored at the remapped distance.
GPT_HD inline bool far(const RopeSpec& r, int m, int n) { return r.remap != RemapKind::None && n < far_end(r, m); }
// The positions the far copies of q (query m) and k (key n) are rotated at:
// Δ′ = far_query_pos(m) − far_key_pos(n).
//   rerope       Δ′ = w (κ = 0), or w + (Δ − w)/κ: q at m/κ + w(1 − 1/κ), k at n/κ
//   self_extend  Δ′ = ⌊m/G⌋ − ⌊n/G⌋ + (w_n − ⌊w_n/G⌋)
//   cap          Δ′ = n_local (LM-Infinite's min(Δ, n_local) for Δ >= n_local)
//   cache_sinks  Δ′ = min(m, k_s + w − 1) − n (StreamingLLM's positions inside the cache)
//   string       Δ′ = Δ − S + W: q at m − S + W, k at n (STRING's shifted positions)
//   dual_chunk   Δ′ = s + w − (n mod s): q at s + w, k at its place in its chunk
//                (inter-chunk, and successive-chunk past the first w + 1 queries)
GPT_HD inline double far_query_pos(const RopeSpec& r, int m) {
  const int w = r.remap_window;
  switch (r.remap) {
    case RemapKind::Rerope:
      return r.rerope_kappa > 0 ? m / r.rerope_kappa + w * (1.0 - 1.0 / r.rerope_kappa) : w;
    case RemapKind::SelfExtend:
      return floor(static_cast<double>(m) / r.group) + (w - floor(static_cast<double>(w) / r.group));
    case RemapKind::Cap:
      return w;
    case RemapKind::CacheSinks: {
      const int top = r.remap_sinks + w - 1;
      return m < top ? m : top;
    }
    case RemapKind::String:
      return m - w + r.remap_local;
    case RemapKind::DualChunk:
      return w;
    default:
      return m;
  }
}
GPT_HD inline double far_key_pos(const RopeSpec& r, int n) {
  switch (r.remap) {
    case RemapKind::Rerope:
      return r.rerope_kappa > 0 ? n / r.rerope_kappa : 0.0;
    case RemapKind::SelfExtend:
      return floor(static_cast<double>(n) / r.group);
    case RemapKind::Cap:
      return 0.0;
    case RemapKind::DualChunk:
      return n % dca_chunk(r);
    default:
      return n;
  }
}

}  // namespace remap

// ---- RoPE frequencies (docs/context_extension.md §1) -----------------------------------
namespace rope {

// s for windows of L tokens: the fixed factor, else L/N.
GPT_HD inline double scale_factor(const RopeSpec& r, int L) {
  if (r.factor > 0) return r.factor;
  return r.trained_context > 0 ? static_cast<double>(L) / r.trained_context : 1.0;
}
// d_r of a head of head_dim channels.
GPT_HD inline int dims(const RopeSpec& r, int head_dim) { return r.rot_dims > 0 ? r.rot_dims : head_dim; }

// YaRN's c(r) = d_r·ln(N/(2πr)) / (2 ln b): the pair whose wavelength fits r times into N.
GPT_HD inline double yarn_pair(double rotations, int d_r, double base, double N) {
  return d_r * log(N / (rotations * 2.0 * 3.14159265358979323846)) / (2.0 * log(base));
}

// p-RoPE's pairs that turn: floor(p·d_r/2) (all of them at p = 1).
GPT_HD inline int kept_pairs(const RopeSpec& r, int d_r) { return static_cast<int>(r.keep * d_r / 2 + 1e-9); }

// θ'_k of pair k (0 <= k < d_r/2) for windows of L tokens, before p-RoPE.
GPT_HD inline double scaled_inv_freq(const RopeSpec& r, int k, int d_r, int L) {
  const double b = r.theta, e = -2.0 * k / d_r;
  const double theta_k = pow(b, e);
  const double N = r.trained_context;
  if (r.scaling == RopeScaling::None || N <= 0) return theta_k;
  if (r.scaling == RopeScaling::DynamicNtk) {
    if (L <= N) return theta_k;
    const double a = r.dynamic_alpha;
    return pow(b * pow(a * L / N - (a - 1.0), d_r / (d_r - 2.0)), e);
  }
  const double s = scale_factor(r, L);
  if (s <= 1.0) return theta_k;
  switch (r.scaling) {
    case RopeScaling::Pi:
      return theta_k / s;
    case RopeScaling::Ntk:
      return pow(b * pow(s, d_r / (d_r - 2.0)), e);
    case RopeScaling::Yarn: {
      double lo = yarn_pair(r.beta_fast, d_r, b, N), hi = yarn_pair(r.beta_slow, d_r, b, N);
      if (r.yarn_truncate) lo = floor(lo), hi = ceil(hi);
      lo = lo > 0 ? lo : 0;
      hi = hi < d_r - 1 ? hi : d_r - 1;
      if (hi == lo) hi += 0.001;
      double g = (k - lo) / (hi - lo);
      g = g < 0 ? 0 : (g > 1 ? 1 : g);
      return g * theta_k / s + (1.0 - g) * theta_k;
    }
    case RopeScaling::Llama3: {
      const double wavelen = 2.0 * 3.14159265358979323846 / theta_k;
      if (wavelen < N / r.high_freq) return theta_k;
      if (wavelen > N / r.low_freq) return theta_k / s;
      const double sm = (N / wavelen - r.low_freq) / (r.high_freq - r.low_freq);
      return (1.0 - sm) * theta_k / s + sm * theta_k;
    }
    default:
      return theta_k;
  }
}

// A frequency ω after the switches of a growing training window (r.grown of
// them; docs/training_for_length.md), YaRN's NTK-by-parts rule (Peng et al.
// 2023, arXiv 2309.00071, §3.2) at each: from window w to w' = s·w, the pair
// turns ρ = w·ω/(2π) times in the old window, γ = clamp((ρ − α)/(β − α), 0, 1)
// with α = beta_slow, β = beta_fast, and ω becomes (1 − γ)·ω/s + γ·ω: pairs
// that turn often keep their frequency, pairs that turn less than once are
// interpolated. The rule acts on the frequencies the previous switches left.
GPT_HD inline double grown(const RopeSpec& r, double omega) {
  for (int j = 0; j < r.grown; ++j) {
    const double w = r.grow[j], s = r.grow[j + 1] / w;
    const double rho = w * omega / (2.0 * 3.14159265358979323846);
    double g = (rho - r.beta_slow) / (r.beta_fast - r.beta_slow);
    g = g < 0 ? 0 : (g > 1 ? 1 : g);
    omega *= (1.0 - g) / s + g;
  }
  return omega;
}

// θ'_k with p-RoPE's truncation: the lowest frequencies (k >= kept_pairs) turn
// at 0; and the switches of a growing training window (grown, a factor per pair,
// so that an evaluation rule acts on the trained frequencies).
GPT_HD inline double inv_freq(const RopeSpec& r, int k, int d_r, int L) {
  return k < kept_pairs(r, d_r) ? grown(r, scaled_inv_freq(r, k, d_r, L)) : 0.0;
}

}  // namespace rope

// YaRN's attention factor t for windows of L tokens (logits × t²): the fixed
// attn_factor, else 0.1·ln s + 1 (1 for s <= 1), where YaRN's rope scaling
// or the "yarn" temperature is on; 1 otherwise.
inline double yarn_attention_factor(const AttentionSpec& s, int L) {
  if (s.rope.scaling != RopeScaling::Yarn && s.temperature != Temperature::Yarn) return 1.0;
  if (s.attn_factor > 0) return s.attn_factor;
  const double f = rope::scale_factor(s.rope, L);
  return f > 1.0 ? 0.1 * log(f) + 1.0 : 1.0;
}
// YaRN's attention factor over the switches of a growing training window:
// ∏_j (0.1·ln s_j + 1), s_j = w_{j+1}/w_j (logits × its square).
inline double grown_attention_factor(const RopeSpec& r) {
  double t = 1.0;
  for (int j = 0; j < r.grown; ++j) t *= 0.1 * log(static_cast<double>(r.grow[j + 1]) / r.grow[j]) + 1.0;
  return t;
}
// SelfExtend's automatic group size for windows of L tokens: the smallest G
// with (L − w_n)/G + w_n <= N, so that no remapped distance exceeds the
// trained context (the paper's rule); 1 when L <= N.
inline int self_extend_group(int w_n, int N, int L) {
  if (L <= N || N <= w_n) return 1;
  const int g = static_cast<int>(ceil(static_cast<double>(L - w_n) / (N - w_n) - 1e-9));
  return g > 1 ? g : 1;
}
// The spec the kernels take for windows of L tokens: YaRN's t² (with the
// growing training window's), and the
// SelfExtend group size where it is automatic (group <= 0: self_extend_group).
inline AttentionSpec for_length(AttentionSpec s, int L) {
  const double t = yarn_attention_factor(s, L) * grown_attention_factor(s.rope);
  s.logit_factor = s.logit_scale * t * t;
  if (s.rope.remap == RemapKind::SelfExtend && s.rope.group <= 0)
    s.rope.group = self_extend_group(s.rope.remap_window, s.trained_context, L);
  return s;
}

}  // namespace gpt
