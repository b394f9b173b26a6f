// The distance biases of stage 2 under position ids, as a table per
// sequence. (Part of kernels/attention_spec.h, which includes it; GPT_HD
// functions that both backends compile.)
#pragma once
#include "kernels/attention_spec.h"

namespace gpt {
namespace attn {

// Training-time position ids (PoSE, randomised positions, ids restarted per
// document: docs/training_for_length.md) move a token's position p_i away
// from its index i. ALiBi, KERPLE and FIRE read the distance between query
// and key, and FIRE the query's position too; their kernels take both from
// the indices. Under ids the model instead writes the biases of every pair
// of every sequence into a table (B, NH, T, T) laid out as FIRE's, entry
// [((b·NH + h)·T + i0)·T + Δ] holding b_h(p_i0, p_i0 − p_{i0−Δ}) for
// Δ <= i0 (0 above the diagonal), and the kernels read it as FIRE's table
// (kernel_spec: position_bias = fire, HeadParams::fire_per_sequence). The
// id rules here never fall along a sequence but where ids restart at a
// document (train.document_positions), whose earlier keys the document mask
// hides; such pairs take distance 0 (distance()), so that no entry is
// undefined.
//   ALiBi (Press et al. 2022):  b_h = −m_h·(p_i − p_j)
//   KERPLE (Chi et al. 2022):   b_h = −r₁ ln(1 + r₂(p_i − p_j)) (log), −r₁ (p_i − p_j)^r₂ (power)
//   FIRE (Li et al. 2023):      b_h = f(ψ(p_i − p_j) / ψ(max(p_i, L)))_h (attn::fire)
// Ids 0..T−1 give the entries the plain kernels use (FIRE's and KERPLE's in
// the same double arithmetic; ALiBi's −m_h·Δ).
namespace position_table {

// The distance of a key with id pj from a query with id pi.
GPT_HD inline int distance(int pi, int pj) { return pi > pj ? pi - pj : 0; }
// Whether the layer's stage-2 bias reads distances the ids change.
GPT_HD inline bool applies(const AttentionSpec& s) { return s.alibi() || s.kerple() || s.fire(); }
// The spec the attention kernels run with a table: its bias read from it.
GPT_HD inline AttentionSpec kernel_spec(AttentionSpec s) {
  s.position_bias = PositionBias::Fire;
  return s;
}
// The learned values the table reads: KERPLE's raw (ρ₁, ρ₂) per head, FIRE's
// block (fire::count), none for ALiBi.
GPT_HD inline int param_count(const AttentionSpec& s, int NH) {
  return s.kerple() ? 2 * NH : s.fire() ? fire::count(NH) : 0;
}
// FIRE's L₀ of the layer.
GPT_HD inline double threshold0(const AttentionSpec& s) { return fire::threshold0(s.trained_context); }

// ALiBi's slope or KERPLE's r of one head (h of the layer's NH), computed
// once per call rather than per pair.
struct HeadBias {
  double slope = 0;
  KerpleR r;
};
template <typename P>
GPT_HD inline HeadBias head_bias(const AttentionSpec& s, const P* p, int NH, int h) {
  HeadBias c;
  if (s.alibi()) c.slope = alibi_slope(h, NH);
  if (s.kerple()) c.r = kerple_r(s.position_bias, static_cast<double>(p[2 * h]), static_cast<double>(p[2 * h + 1]));
  return c;
}
// ALiBi's or KERPLE's bias at distance dist >= 0.
GPT_HD inline double distance_bias(const AttentionSpec& s, const HeadBias& c, int dist) {
  if (s.alibi()) return -c.slope * static_cast<double>(dist);
  return kerple_bias(s.position_bias, c.r.r1, c.r.r2, static_cast<double>(dist));
}

// The biases b_h of every head h < NH (the layer's heads) of a pair with
// query position pi and distance dist >= 0, at out[h·os].
template <typename P, typename O>
GPT_HD inline void biases(const AttentionSpec& s, const P* p, int NH, int pi, int dist, O* out, long os) {
  if (s.fire()) {
    fire::biases(p, NH, fire::input_of(p, NH, threshold0(s), pi, dist).u, out, os);
    return;
  }
  for (int h = 0; h < NH; ++h) out[h * os] = static_cast<O>(distance_bias(s, head_bias(s, p, NH, h), dist));
}

// What the backward needs of a pair once: FIRE's input u and its
// derivatives (fire::Input), and the distance.
struct Pair {
  fire::Input in;
  int dist = 0;
};
template <typename P>
GPT_HD inline Pair pair(const AttentionSpec& s, const P* p, int NH, int pi, int dist) {
  Pair r;
  r.dist = dist;
  if (s.fire()) r.in = fire::input_of(p, NH, threshold0(s), pi, dist);
  return r;
}
// The pair's contribution to dL/dp[k] (k < param_count), given dL/db_h =
// g[h·gs] at the pair; hb: head_bias of head k/2 (KERPLE; unused for FIRE).
template <typename P, typename G>
GPT_HD inline double param_grad(const AttentionSpec& s, const P* p, int NH, int k, const Pair& q, const HeadBias& hb,
                                const G* g, long gs) {
  if (s.fire()) return fire::param_grad(p, NH, k, q.in, g, gs);
  double d1, d2;  // KERPLE: (ρ₁, ρ₂) of head k/2
  kerple_bias_grad(s.position_bias, hb.r.r1, hb.r.r2, static_cast<double>(q.dist), &d1, &d2);
  return static_cast<double>(g[(k / 2) * gs]) * (k % 2 == 0 ? d1 * hb.r.dr1 : d2 * hb.r.dr2);
}

}  // namespace position_table
}  // namespace attn
}  // namespace gpt
