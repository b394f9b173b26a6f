// The element-wise part of the CPU attention kernel (kernels/cpu/attention.cpp),
// one query row at a time: stages 2–5 of kernels/attention_spec.h forward,
// and their backward, between the two matrix products of a row block.
// Internal to the kernel; declared here so that tests can check the
// vectorised float rows against the scalar rows built from the attn::
// functions.
//
// Two implementations of each:
//   *_scalar  plain loops over the attn:: functions (float and double; the
//             double kernel, which serves gradient checks, always uses it);
//   *_vec     float only, branch-free over blocks of kRowLanes keys with the
//             exp/log of kernels/cpu/vec_math.h, compiled for AVX-512,
//             AVX2+FMA and baseline x86-64; `isa` picks one (the float kernel
//             passes the active GEMM kernel, so GPT_GEMM_KERNEL and
//             set_gemm_kernel choose both). Sums run in kRowLanes partial
//             sums added in a fixed order; the instruction sets agree up to
//             float rounding (the compiler vectorises each differently).
//             Rows must have room for n rounded up to kRowLanes (the entries
//             past n are read and overwritten, never used).
#pragma once
#include "kernels/attention_spec.h"
#include "kernels/cpu/gemm.h"

namespace gpt::cpu::attn_rows {

inline constexpr int kRowLanes = 16;
inline int padded_keys(int n) { return (n + kRowLanes - 1) / kRowLanes * kRowLanes; }

// Row i (1-based) over n columns: x_c = lf·σ_c + bias − slope·(i − 1 − key(c)) [+ kb[i − 1 − key(c)]],
// where σ_c = q_i·k_key(c) and lf = λ_i·f (stage 2). Without a mask column c
// is key c and n = i. With a context mask (attn::masked) the columns are the
// keys a row block can see: c < ns the sink keys c, c >= ns the keys c + off
// (n reaches the row's own key); column c is kept when its key is a sink
// (< sinks) or at least lo, the row's first window key, and the others get
// weight 0 (left out of Z, the maximum and every sum, as the causal mask does).
template <typename T>
struct RowArgs {
  int i = 1;
  int n = 1;
  T lf = 1, bias = 0, slope = 0;
  bool masked = false;
  int ns = 0, off = 0, lo = 0, sinks = 0;
  T zeta = 0;  // the sink key's logit (attn::sink_logit; normalisations off_by_one and sink)
  // The logit soft-cap c (attn::softcap; 0 = none): x_c ← c·tanh(x_c / c)
  // after every term above, and dx_c ×= 1 − (x_c/c)² in the backward. Such
  // rows run the vector kernels' mapped-column path, as learned biases do.
  T cap = 0;
  // A learned position bias (KERPLE): kb[Δ] = b(Δ) is added to x at distance
  // Δ = i − 1 − key(c), and the backward sums dx·kg1[Δ], dx·kg2[Δ] (∂b/∂r₁,
  // ∂b/∂r₂). Null without one. Such rows run the vector kernels' mapped-column
  // path (as masked rows do).
  const T* kb = nullptr;
  const T* kg1 = nullptr;
  const T* kg2 = nullptr;
  // The forget gate (attn::log_sigmoid): fc holds c_t of this row's sequence
  // and head (t < T); x gets c_{i−1} − c_key(c) (0-based positions). The
  // backward adds dL/dc to dfc (the row's Σ_c dx_c at i − 1, −dx_c at each key).
  const T* fc = nullptr;
  T* dfc = nullptr;
  // FIRE: kb is the row's own table row (b(i, Δ) depends on the row too),
  // read as KERPLE's, and the backward adds each column's dx to dkb[Δ].
  T* dkb = nullptr;
  T bias_at(int c) const { return (kb ? kb[i - 1 - key(c)] : T(0)) + (fc ? fc[i - 1] - fc[key(c)] : T(0)); }
  bool learned_bias() const { return kb || fc; }
  bool mapped() const { return learned_bias() || cap > T(0); }  // the vector rows' path with per-column terms
  // x_c of the row from σ_c (the scalar rows), capped.
  T logit(T sigma, int c) const {
    return attn::softcap(cap, lf * sigma + bias - slope * static_cast<T>(i - 1 - key(c)) + bias_at(c));
  }

  int key(int c) const { return c < ns ? c : c + off; }
  bool kept(int c) const { return c < n && (!masked || key(c) < sinks || key(c) >= lo); }
};

// Forward: row holds σ_j (j < n); leaves the weights w_j and writes the
// row's statistics (shift, Z, max a, Σr) to st[0..3]. Z includes the sink
// key's φ(ζ − shift) or softpick's ε (attn::norm_extra).
template <typename T>
void forward_row_scalar(T* row, const RowArgs<T>& a, const AttentionSpec& s, T* st);
void forward_row_vec(GemmKernel isa, float* row, const RowArgs<float>& a, const AttentionSpec& s, float* st);

// Backward, first half: from σ (qk) and the row's saved statistics (r),
// u_j = φ(x_j − shift) and the weights w_j (j < n; w_j = 0 for the padding
// up to padded_keys(n) in the vector version).
template <typename T>
void backward_weights_row_scalar(const T* qk, T* u, T* w, const RowArgs<T>& a, const AttentionSpec& s,
                                 const attn::Row<T>& r);
void backward_weights_row_vec(GemmKernel isa, const float* qk, float* u, float* w, const RowArgs<float>& a,
                              const AttentionSpec& s, const attn::Row<float>& r);

// Backward, second half: g holds dL/dw_j = dy_i·v_j; leaves dL/dσ_j =
// λ_i f dx_j in g (0 past n: up to n in the scalar version, to
// padded_keys(n) in the vector version). D = dy_i·y_i, lambda_f = λ_i·f.
// Returns Σ_j f·σ_j·dx_j when want_sigma_dx (the ssmax scale's gradient
// needs it), else 0; S_out (if not null) receives S = Σ_j a_j h_j (the sink
// logit's gradient needs it: attn::sink_grad); with a.kg1, kerple_out[0..1]
// receive Σ_j dx_j·kg1, Σ_j dx_j·kg2 (KERPLE's dL/dr₁, dL/dr₂ of the row).
template <typename T>
double backward_grad_row_scalar(const T* qk, const T* u, const T* w, T* g, const RowArgs<T>& a, const AttentionSpec& s,
                                const attn::Row<T>& r, T D, T lambda_f, T f, bool want_sigma_dx, T* S_out = nullptr,
                                double* kerple_out = nullptr);
double backward_grad_row_vec(GemmKernel isa, const float* qk, const float* u, const float* w, float* g,
                             const RowArgs<float>& a, const AttentionSpec& s, const attn::Row<float>& r, float D,
                             float lambda_f, float f, bool want_sigma_dx, float* S_out = nullptr,
                             double* kerple_out = nullptr);

}  // namespace gpt::cpu::attn_rows
