// CPU kernels: one forward and one backward function per layer, templated on
// the scalar type (float for training, double for finite-difference gradient
// checks). Explicit instantiations for float and double live in each .cpp.
//
// Conventions (llm.c's):
//   * activations are row-major, (B,T,C) means index (b*T + t)*C + c;
//   * weights are stored (out, in): y = x·Wᵀ + b;
//   * every backward ACCUMULATES (+=) into the gradients it writes, so the
//     caller zeroes gradients once per step and residual branches just add;
//   * OpenMP parallel over independent rows; results do not depend on the
//     number of threads (no cross-thread reductions in float).
#pragma once
#include <cstddef>
#include <cstdint>

#include <type_traits>

#include "kernels/attention_spec.h"
#include "kernels/bf16_round.h"

namespace gpt::cpu {

// ---- embedding --------------------------------------------------------------
// out (B,T,C) = wte[tokens[b,t]] + (wpe ? wpe[t] : 0).  tokens (B,T); wpe may be
// null (positions other than learned). Token ids are checked by the model.
template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C);
// dwte[tokens] += dout; dwpe[t] += dout (if dwpe).
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C);
// encoder_forward of bf16 tables into float32 (run.storage "bf16"): only the
// rows the tokens pick are widened.
void encoder_forward_bf16(float* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B, int Tn, int C);

// ---- LayerNorm (eps 1e-5, biased variance) ----------------------------------
// inp/out (N,C); mean, rstd (N) saved for the backward pass (may be null when
// no backward follows).
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int N, int C);
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int N, int C);

// ---- RMSNorm (docs/blocks.md) ------------------------------------------------------
// out (N,C) = inp · rstd · weight, rstd (N) = 1/sqrt(mean(inp²) + eps), saved
// for the backward pass (may be null when none follows).
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, double eps);
// dinp += rstd·(g − x̂·mean(g·x̂)), g = dout·weight, x̂ = inp·rstd; dweight += Σ_n dout·x̂.
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int N, int C);

// ---- linear layer -------------------------------------------------------------
// out (N,OC) = inp (N,C) · weightᵀ (OC,C) + bias (OC, may be null).
template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC);
// dinp (N,C) += dout·W ; dweight (OC,C) += doutᵀ·inp ; dbias (OC) += Σ dout.
// dbias may be null (no bias); dinp may be null (input needs no gradient);
// dweight may be null (only dinp wanted).
template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C, int OC);
// The same with bf16 operands (run.storage "bf16") and float32 results: bit
// for bit the float32 functions on the operands widened, without widening
// them (the GEMM converts what it packs; kernels/cpu/gemm.h).
void matmul_forward_bf16(float* out, const bf16* inp, const bf16* weight, const float* bias, int N, int C, int OC);
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                          const bf16* weight, int N, int C, int OC);

// ---- GELU (tanh approximation) -------------------------------------------------
template <typename T>
void gelu_forward(T* out, const T* inp, size_t n);
// dinp += gelu'(inp) * dout
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n);

// ---- grouped-query attention (docs/blocks.md) ----------------------------------------
// qkv (N, 3C) from grouped (N, C + 2·NKV·D), C = NH·D: q copied, key/value head
// k repeated for the query heads h with h / (NH/NKV) = k. NKV divides NH.
template <typename T>
void gqa_expand(T* qkv, const T* grouped, int N, int NH, int NKV, int D);
// dgrouped += the adjoint: dq copied, each key/value head's gradient the sum
// of its group's.
template <typename T>
void gqa_reduce(T* dgrouped, const T* dqkv, int N, int NH, int NKV, int D);

// ---- QK-norm (docs/blocks.md) -----------------------------------------------------------
// out (N, 3C) = inp with each q and k head (D channels) times r·w, r =
// 1/sqrt(mean over the head of x² + eps), w = wq or wk (D values shared by
// the heads; null: 1), and query head h also times sq[h] (the learned logit
// scale, NH values; null: 1); v copied; rstd (N, 2, NH) saved (may be null).
template <typename T>
void qknorm_forward(T* out, T* rstd, const T* inp, const T* wq, const T* wk, const T* sq, int N, int NH, int D,
                    double eps);
// dinp (N, 3C) += through the norms and the copy; dwq, dwk, dsq (null: none) += theirs.
template <typename T>
void qknorm_backward(T* dinp, T* dwq, T* dwk, T* dsq, const T* dout, const T* inp, const T* wq, const T* wk,
                     const T* sq, const T* rstd, int N, int NH, int D);

// ---- the MLP activations of the modern blocks (docs/blocks.md) ---------------------
// SwiGLU: out (N,F) = silu(gate)·up, inp (N,2F) = [gate | up] per row.
template <typename T>
void swiglu_forward(T* out, const T* inp, int N, int F);
// dinp (N,2F) += [dout·up·silu'(gate) | dout·silu(gate)].
template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int N, int F);
// Exact GELU: out = 0.5·inp·(1 + erf(inp/√2)); dinp += (Φ + x·φ)(inp)·dout.
template <typename T>
void gelu_erf_forward(T* out, const T* inp, size_t n);
template <typename T>
void gelu_erf_backward(T* dinp, const T* inp, const T* dout, size_t n);
// ReLU²: out = relu(inp)²; dinp += 2·relu(inp)·dout.
template <typename T>
void relu2_forward(T* out, const T* inp, size_t n);
template <typename T>
void relu2_backward(T* dinp, const T* inp, const T* dout, size_t n);

// ---- the forget gate (the Forgetting Transformer; docs/contenders.md) -----------------
// c (B,NH,T) = the prefix sums over t of ln σ(g) for the gate logits g
// (B,T,NH): c[b,h,t] = Σ_{l<=t} ln σ(g[b,l,h]), summed in order (double).
template <typename T>
void forget_forward(T* c, const T* g, int B, int Tn, int NH);
// dg (B,T,NH) += σ(−g[b,t,h]) · Σ_{t'>=t} dc[b,h,t'].
template <typename T>
void forget_backward(T* dg, const T* dc, const T* g, int B, int Tn, int NH);

// ---- FIRE's bias table (docs/contenders.md; attn::fire) ---------------------------------
// table (NH,T,T) [(h·T + i0)·T + Δ] = b_h(i0, Δ) of the layer's parameter
// block p (attn::fire::count(NH) values) for Δ <= i0, 0 for Δ > i0; L0 the
// fixed threshold L₀ (attn::fire::threshold0).
template <typename T>
void fire_forward(T* table, const T* p, int Tn, int NH, double L0);
// dp (count(NH)) += the gradient of Σ_b Σ dtable[b]·table through the MLP,
// c and m, for dtable (B,NH,T,T) = dL/db of each sequence (entries Δ > i0
// ignored). Summed in double in a fixed order whatever the thread count.
template <typename T>
void fire_backward(T* dp, const T* dtable, const T* p, int B, int Tn, int NH, double L0);

// ---- The distance biases under position ids (attn::position_table) ---------------------
// table (B,NH,T,T) [((b·NH + h)·T + i0)·T + Δ] = b_h(p_i0, p_i0 − p_{i0−Δ})
// of the layer's bias s (ALiBi, KERPLE or FIRE) for Δ <= i0, 0 for Δ > i0;
// pos (B·T ids; a key whose id exceeds its query's takes distance 0:
// attn::position_table::distance), p the learned values
// (attn::position_table::param_count; null for ALiBi).
template <typename T>
void position_table_forward(T* table, const T* p, const int32_t* pos, int B, int Tn, int NH, const AttentionSpec& s);
// dp (param_count) += the gradient of Σ dtable·table (dtable laid out as the
// table; entries Δ > i0 ignored), summed in double per parameter over
// (b, i0, Δ) in order whatever the thread count.
template <typename T>
void position_table_backward(T* dp, const T* dtable, const T* p, const int32_t* pos, int B, int Tn, int NH,
                             const AttentionSpec& s);

// ---- PoPE (attn::pope; docs/context_extension.md) -------------------------------------
// qkv (N,3C) of NH heads of D (N = B·Tn rows, row n at position n mod Tn, or
// pos[n] when the position ids pos (N values) are given) into qkv2 (N,6C): the q, k and v blocks of NH kernel heads of 2D channels,
// q′ = √2·μ_q·[cos φ | sin φ], k′ = μ_k·[cos(φ + δ) | sin(φ + δ)], v′ = [v | 0],
// μ = softplus, φ_c = t·θ_c, θ_c = theta^(−c/D), δ (C values, head-major) clamped
// to [−2π, 0].
template <typename T>
void pope_forward(T* qkv2, const T* qkv, const T* delta, int B, int Tn, int C, int NH, double theta,
                  const int32_t* pos = nullptr);
// dqkv (N,3C) and ddelta (C) += the gradients from dqkv2 (N,6C); δ outside
// [−2π, 0] gets none (the clamp).
template <typename T>
void pope_backward(T* dqkv, T* ddelta, const T* dqkv2, const T* qkv, const T* delta, int B, int Tn, int C, int NH,
                   double theta, const int32_t* pos = nullptr);
// y (N,C) = the first D channels of each kernel head of y2 (N,2C); the
// backward writes dy2 (overwritten: dy there, 0 in the other D channels).
template <typename T>
void pope_output_forward(T* y, const T* y2, int N, int C, int NH);
template <typename T>
void pope_output_backward(T* dy2, const T* dy, int N, int C, int NH);

// ---- differential attention (attn::diff; docs/contenders.md) --------------------------
// qkv (N,3C) of NH heads (D = C/NH, d = D/2) into qkv2 (N,6C): the q, k and v
// blocks of 4·NH kernel heads of d channels (2C each), kernel head
// 4h + 2m + u holding q and k half m and v half u of head h.
template <typename T>
void diff_split_forward(T* qkv2, const T* qkv, int N, int C, int NH);
// dqkv (N,3C) += the gradient of the split from dqkv2 (N,6C).
template <typename T>
void diff_split_backward(T* dqkv, const T* dqkv2, int N, int C, int NH);
// out (N,C): head h = (1 − lambda_init)·gain ⊙ z/rms(z), z = [y_{4h} | y_{4h+1}]
// − λ·[y_{4h+2} | y_{4h+3}] of the kernel heads' outputs y2 (N,2C), λ from
// lam (attn::diff::lambda, 4d values), rms over the D channels with ε = 1e-5;
// rstd (N,NH) = 1/rms saved for the backward.
template <typename T>
void diff_combine_forward(T* out, T* rstd, const T* y2, const T* lam, const T* gain, int N, int C, int NH,
                          double lambda_init);
// dy2 (N,2C) = dL/dy2 (overwritten), dlam (4d) and dgain (D) += their
// gradients, from dout (N,C).
template <typename T>
void diff_combine_backward(T* dy2, T* dlam, T* dgain, const T* dout, const T* y2, const T* rstd, const T* lam,
                           const T* gain, int N, int C, int NH, double lambda_init);
// dst (outer, NH·group, inner) = each head's block of src (outer, NH, inner)
// repeated group times; head_reduce adds the group's blocks back (+=).
template <typename T>
void head_repeat(T* dst, const T* src, size_t outer, int NH, size_t inner, int group);
template <typename T>
void head_reduce(T* dst, const T* src, size_t outer, int NH, size_t inner, int group);

// ---- the sigmoid output gate (gated attention; docs/contenders.md) --------------------
// out = y · σ(g), element-wise over n values.
template <typename T>
void sigmoid_gate_forward(T* out, const T* y, const T* g, size_t n);
// dy += dout · σ(g), dg += dout · y · σ(g)(1 − σ(g)).
template <typename T>
void sigmoid_gate_backward(T* dy, T* dg, const T* dout, const T* y, const T* g, size_t n);

// ---- element-wise helpers -------------------------------------------------------
// out = a + b (residual forward; the backward is add_inplace into both inputs).
template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n);
// dst += src
template <typename T>
void add_inplace(T* dst, const T* src, size_t n);
// Σ x² accumulated in double (for the global gradient norm).
template <typename T>
double sum_squares(const T* x, size_t n);
// x *= s
template <typename T>
void scale_inplace(T* x, T s, size_t n);

// ---- rotary position embedding -------------------------------------------------
// qkv (B,T,3C) with heads of size D = C/NH. Rotates the q and k parts of out
// (v is copied unchanged). Pairs are (x[i], x[i + d_r/2]) for i < d_r/2 within
// a head ("half" layout over the first d_r = rope::dims(rs, D) channels; the
// rest pass through), angle = (pos0 + t) · rope::inv_freq(rs, i, d_r, pos0 + T).
// pos, when given: the position ids (B·T values, row-major) of the tokens,
// token t of sequence b rotated at pos0 + pos[b·T + t] instead of pos0 + t
// (training-time position ids: PoSE, randomised positions; docs/training_for_length.md).
// Not with the far copy of a distance remapping (rs.far_positions).
template <typename T>
void rope_forward(T* out, const T* inp, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0,
                  const int32_t* pos = nullptr);
// dinp += Rᵀ·dout for q and k; dinp += dout for v.
template <typename T>
void rope_backward(T* dinp, const T* dout, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0,
                   const int32_t* pos = nullptr);

// ---- causal self-attention -----------------------------------------------------
// Every stage combination of kernels/attention_spec.h. qkv (B,T,3C): q, k, v
// each C wide, head h at columns h*D..h*D+D-1. out (B,T,C). stats
// (B,NH,T, spec.stats_per_row()): per-row statistics the backward needs; may
// be null for inference. head: the layer's learned per-head parameters:
// head.scale the ssmax scales s_h (NH; required for scale ssmax), head.sink
// the sink logits ζ_h (NH; normalisation sink), head.kerple KERPLE's raw
// (ρ₁, ρ₂) (2·NH; position_bias kerple_*), head.fcum the forget gate's c
// (B, NH, T; position_bias forget), head.fire FIRE's bias table (NH, T, T;
// position_bias fire, from fire_forward; (B, NH, T, T) where
// head.fire_per_sequence, from position_table_forward), each ignored otherwise; a plain pointer
// converts to head.scale. With spec.head_group = g > 1 the scales, sink
// logits, KERPLE parameters (and ALiBi's slopes) are per group of g kernel
// heads (NH / g of them; AttentionSpec::param_head), fcum and fire per kernel head. diag (NH, kAttentionDiagStats)
// accumulates (+=) per-head diagnostics when non-null. No T×T buffer is kept:
// blocks of query rows are streamed through per-thread tiles of (row block ×
// T) scalars, so memory is linear in T.
// With a distance remapping (remap::on(spec.rope)) qkv_far is the far copy
// of qkv, q and k rotated at remap::far_query_pos / far_key_pos (v unused):
// a pair with m − n >= the remap window is scored with it. Null otherwise.
template <typename T>
void attention_forward(T* out, T* stats, const T* qkv, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                       const HeadParams<std::type_identity_t<T>>& head, double* diag, const T* qkv_far = nullptr);
// dqkv (B,T,3C) += gradient, dhead.scale (NH) += dL/ds_h (ssmax only),
// dhead.sink (NH) += dL/dζ_h (sink only), dhead.kerple (2·NH) += dL/dρ
// (KERPLE only), dhead.fcum (B, NH, T) += dL/dc (forget only) and dhead.fire
// (B, NH, T, T) += dL/db of FIRE's table per sequence (fire only; each may be
// null otherwise), given
// dout (B,T,C) and the forward's out, stats. Weights are recomputed row by
// row from qkv and stats.
// With a distance remapping, dqkv_far += the gradient of the far copy (its q
// and k parts; v gets none).
template <typename T>
void attention_backward(T* dqkv, const HeadGrads<std::type_identity_t<T>>& dhead, const T* dout, const T* out,
                        const T* stats, const T* qkv, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                        const HeadParams<std::type_identity_t<T>>& head, T* dqkv_far = nullptr,
                        const T* qkv_far = nullptr);

// ---- classifier -------------------------------------------------------------------
// logits (N,Vp) of which the first V columns are real (the rest is padding and
// is ignored). losses[n] = logsumexp(logits[n,:V]) - logits[n, targets[n]].
template <typename T>
void crossentropy_forward(T* losses, const T* logits, const int32_t* targets, int N, int V, int Vp);
// dlogits[n,:V] = (softmax(logits[n,:V]) - onehot(targets[n])) * dloss[n];
// padding columns are set to 0. Overwrites (does not accumulate): dlogits
// may alias logits.
template <typename T>
void crossentropy_backward(T* dlogits, const T* logits, const int32_t* targets, const T* dloss, int N, int V, int Vp);

// ---- optimizer ----------------------------------------------------------------------
// One AdamW step over n parameters (t is the 1-based step for bias correction).
// Decoupled weight decay: param -= lr * (mhat/(sqrt(vhat)+eps) + wd * param).
template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, size_t n, double lr, double beta1, double beta2, double eps,
                  double weight_decay, long t);

// Muon (kernels/muon_spec.h, docs/optimizers.md). muon_momentum: Nesterov
// momentum in place, m ← β·m + (1−β)·g, then grad ← (1−β)·g + β·m (the
// update to orthogonalise). newton_schulz: x (rows, cols, row-major) ← the
// quintic Newton–Schulz iteration of x/‖x‖_F, `steps` times; work holds
// muon::work_size(rows, cols) elements. muon_apply: param −= lr·(scale·update
// + weight_decay·param).
template <typename T>
void muon_momentum(T* grad, T* m, size_t n, double beta);
template <typename T>
void newton_schulz(T* x, int rows, int cols, int steps, T* work);
template <typename T>
void muon_apply(T* param, const T* update, size_t n, double lr, double scale, double weight_decay);

}  // namespace gpt::cpu
