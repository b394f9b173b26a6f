// The parameter tensors of the GPT, declared once. Sizes, offsets into the
// flat buffer, named views, initialisation, weight-decay membership and
// checkpoint I/O are all derived from the two X-macro lists below; nothing
// else in the project lists the tensors again.
#pragma once
#include <functional>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "kernels/attention_spec.h"
#include "kernels/bf16_round.h"

namespace gpt {

enum class InitKind {
  Normal,          // N(0, init_std)
  NormalResidual,  // N(0, init_std / sqrt(2L)): projections into the residual stream
  Ones,
  Zeros,
  AttnScale,    // ssmax's s_h = 1/ln N (attn::ssmax_init)
  KerpleLog,    // (ρ₁, ρ₂) per head for r₁ ~ U(0, 2), r₂ ~ U(0, 1), at least 0.01 (attn::kerple_r)
  KerplePower,  // (ρ₁, ρ₂) per head for r₁ ~ U(0, 1), r₂ ~ U(0, 2) (exponent), 0.01 <= r <= 1.99
  Fire,         // FIRE's block (attn::fire): MLP weights and biases U(±1/sqrt(fan_in)), c = 0.1, m = 1
  DiffLambda,   // differential attention's λ_q1, λ_k1, λ_q2, λ_k2: N(0, 0.1) (attn::diff::kInitStd)
};

// X(name, shape, init, decay, present, what). Shapes use C (channels), Vp
// (padded vocabulary), P (position rows), H (heads), D (a head's width,
// model.head_size()), A (the attention's width H·D; C unless model.head_dim
// says otherwise), F (the MLP's hidden width), FI (its first projection's
// width: 2F for swiglu's gate and up, else F), QKV (the qkv projection's:
// A + 2·n_kv_head·D, rows q, k, v) and QN (QK-norm's group: a head's D
// channels, or A for the whole projection). Weights are (out, in). The block's options
// (docs/blocks.md) decide norm_bias (LayerNorm's biases; RMSNorm has none), qkv_bias and all_bias (model.bias) and
// untied_head (model.head), qk_norm_gain (model.qk_norm rms), qk_norm_scale (model.qk_norm_scale learned). Order =
// buffer order. `what` names the tensor for people (errors that say which tensors a
// change of attention would add or drop). `present` may use learned_positions, learned_attn_scale and learned_attn_sink
// (the sink logits ζ_h of normalisation "sink", starting at 0: the sink begins as softmax1's implicit zero logit) and
// learned_attn_scale (ssmax's s_h from attn::ssmax_init, or HeadScale's τ_h from 1: `attnscale_init`) and
// learned_kerple (KERPLE's raw (ρ₁, ρ₂) per head; `kerple_init` is its variant's InitKind) and learned_fire (FIRE's
// MLP, c and multiplier m of attn::fire, one block per layer, no weight decay) and learned_forget (the forget gate's
// projection C → H and bias: f_t = σ(fgatew·x_t + fgateb), x_t the layer's normalised input; N(0, init_std) and zeros,
// as the Forgetting Transformer's reference initialises them) and output_gate (gated attention's W_g, b_g: N(0,
// init_std) and zeros, so every gate starts near σ(0) = 1/2) and differential (differential attention's λ vectors, 4 ×
// D/2 values, and the gain of its per-head RMSNorm, D values, starting at 1; attn::diff; no weight decay) and pope
// (PoPE's phase biases δ_{h,c}, model.position "pope", starting at 0 as the paper's language models; attn::pope; no
// weight decay) and regression_head (model.regression_outputs R > 0: a linear map of the final norm's output to R
// values, N(0, init_std) and zeros as the probe of Vafa et al. initialises its new head).
#define GPT_GLOBAL_HEAD_PARAMS(X)                                             \
  X(wte, (Shape{Vp, C}), InitKind::Normal, true, true, "the token embedding") \
  X(wpe, (Shape{P, C}), InitKind::Normal, true, learned_positions, "the learned position table")

// Per-layer tensors, stacked layer-major: (L, shape...).
#define GPT_LAYER_PARAMS(X)                                                                                         \
  X(ln1w, (Shape{C}), InitKind::Ones, false, true, "the attention norm's gain")                                     \
  X(ln1b, (Shape{C}), InitKind::Zeros, false, norm_bias, "the attention LayerNorm's bias")                          \
  X(qkvw, (Shape{QKV, C}), InitKind::Normal, true, true, "the qkv projection")                                      \
  X(qkvb, (Shape{QKV}), InitKind::Zeros, false, qkv_bias, "the qkv projection's bias")                              \
  X(attprojw, (Shape{C, A}), InitKind::NormalResidual, true, true, "the attention output projection")               \
  X(attprojb, (Shape{C}), InitKind::Zeros, false, all_bias, "the attention output projection's bias")               \
  X(ln2w, (Shape{C}), InitKind::Ones, false, true, "the MLP norm's gain")                                           \
  X(ln2b, (Shape{C}), InitKind::Zeros, false, norm_bias, "the MLP LayerNorm's bias")                                \
  X(fcw, (Shape{FI, C}), InitKind::Normal, true, true, "the MLP's first layer")                                     \
  X(fcb, (Shape{FI}), InitKind::Zeros, false, all_bias, "the MLP's first bias")                                     \
  X(fcprojw, (Shape{C, F}), InitKind::NormalResidual, true, true, "the MLP's output projection")                    \
  X(fcprojb, (Shape{C}), InitKind::Zeros, false, all_bias, "the MLP's output bias")                                 \
  X(qnormw, (Shape{QN}), InitKind::Ones, false, qk_norm_gain, "QK-norm's query gain")                               \
  X(knormw, (Shape{QN}), InitKind::Ones, false, qk_norm_gain, "QK-norm's key gain")                                 \
  X(qkscale, (Shape{H}), InitKind::Ones, false, qk_norm_scale, "QK-norm's learned logit scale per query head")      \
  X(attnscale, (Shape{H}), attnscale_init, false, learned_attn_scale, "the learned per-head scales (ssmax s_h, HeadScale tau_h)") \
  X(attnsink, (Shape{H}), InitKind::Zeros, false, learned_attn_sink, "the learned sink logits ζ_h")                 \
  X(attnkerple, (Shape{H, 2}), kerple_init, false, learned_kerple, "KERPLE's learned bias parameters r1, r2")       \
  X(attnfire, (Shape{attn::fire::count(H)}), InitKind::Fire, false, learned_fire, "FIRE's MLP, c and L")            \
  X(fgatew, (Shape{H, C}), InitKind::Normal, true, learned_forget, "the forget gate's projection")                  \
  X(fgateb, (Shape{H}), InitKind::Zeros, false, learned_forget, "the forget gate's bias")                           \
  X(ogatew, (Shape{A, C}), InitKind::Normal, true, output_gate, "the output gate's projection W_g")                 \
  X(ogateb, (Shape{A}), InitKind::Zeros, false, output_gate, "the output gate's bias b_g")                          \
  X(attnlambda, (Shape{2 * D}), InitKind::DiffLambda, false, differential, "differential attention's lambda") \
  X(attnsubln, (Shape{D}), InitKind::Ones, false, differential, "differential attention's head-norm gain")      \
  X(attnpope, (Shape{A}), InitKind::Zeros, false, pope, "PoPE's key phase biases δ (per head and frequency)")

#define GPT_GLOBAL_TAIL_PARAMS(X)                                                      \
  X(lnfw, (Shape{C}), InitKind::Ones, false, true, "the final norm's gain")            \
  X(lnfb, (Shape{C}), InitKind::Zeros, false, norm_bias, "the final LayerNorm's bias") \
  X(lmhead, (Shape{Vp, C}), InitKind::Normal, true, untied_head, "the untied output head") \
  X(regw, (Shape{R, C}), InitKind::Normal, true, regression_head, "the regression head's weights") \
  X(regb, (Shape{R}), InitKind::Zeros, false, regression_head, "the regression head's bias")

using Shape = std::vector<int64_t>;

struct ParamSpec {
  std::string name;
  Shape shape;  // full shape; per-layer tensors have L as first dimension
  InitKind init;
  bool decay;  // AdamW weight decay applies (weight matrices only)
  bool per_layer;
  size_t offset = 0;  // into the flat buffer
  std::string what;   // for people: "the learned ssmax scales s_h"
  // The hidden weight matrices: per-layer and decaying, shape (L, rows, cols).
  // Muon (docs/optimizers.md) updates them; AdamW the rest.
  bool hidden_matrix() const { return per_layer && decay; }
  // Hidden matrices: the rows of each separate matrix a layer's slice stacks
  // (summing to rows): q, k and v in qkvw, swiglu's gate and up in fcw, one
  // block elsewhere. Empty for the other tensors.
  std::vector<int64_t> row_blocks;
  size_t numel() const;
};

// The parameter table of a model: every present tensor with its offset.
struct ParamLayout {
  std::vector<ParamSpec> specs;
  size_t total = 0;
  // The attention variant decides the learned attention parameters (ssmax,
  // sink, KERPLE, forget gate, output gate): with a per-layer plan
  // (m.layer_plan ...), those that some layer's attention uses.
  explicit ParamLayout(const ModelConfig& m, const AttentionSpec& attn = AttentionSpec{});
  const ParamSpec& find(const std::string& name) const;  // throws if absent
  bool has(const std::string& name) const;
  // The parts (offset, count) of the flat buffer that hold layer `layer`'s
  // slices of the per-layer tensors, in buffer order, adjacent parts merged;
  // layer -1: the global tensors (embeddings, final LayerNorm). Layers
  // 0..L-1 and -1 together cover the buffer once. The backward pass finishes a layer's gradients
  // in one go, so these are the units of the overlapped gradient reduction.
  std::vector<std::pair<size_t, size_t>> ranges_of_layer(int layer) const;
};

// Named views of one flat buffer (parameters or their gradients).
template <typename T>
struct LayerViews {
#define GPT_VIEW_FIELD(name, shape, init, decay, present, what) T* name = nullptr;
  GPT_LAYER_PARAMS(GPT_VIEW_FIELD)
};

template <typename T>
struct ParamViews {
  GPT_GLOBAL_HEAD_PARAMS(GPT_VIEW_FIELD)
  GPT_GLOBAL_TAIL_PARAMS(GPT_VIEW_FIELD)
#undef GPT_VIEW_FIELD
  std::vector<LayerViews<T>> layers;
};

// The parameter tensors `to` has that `from` lacks (added), the reverse
// (dropped), and those both have with another shape or initialisation
// (changed: KERPLE's log and power variants share a shape). Whether a
// checkpoint can run another attention variant follows from it.
struct ParamDifference {
  std::vector<ParamSpec> added, dropped, changed;
  bool empty() const { return added.empty() && dropped.empty() && changed.empty(); }
};
ParamDifference param_difference(const ParamLayout& from, const ParamLayout& to);
// "the learned sink logits ζ_h (attnsink)" / "A (a) and B (b)".
std::string describe_tensors(const std::vector<ParamSpec>& specs);

// Throws gpt::Error with the reason when a model (m) trained with attention
// `trained` cannot run attention `wanted`: another score type (cosine and dot
// scores train different q and k), or another set of parameter tensors
// (param_difference: a learned scale, sink, bias, gate or differential
// attention added, dropped or exchanged), named with what they are.
// Tensors that `identity_tensors_added` names are the exception: they may be
// added, since they start where the model runs unchanged.
void check_attention_compatible(const ModelConfig& m, const AttentionSpec& trained, const AttentionSpec& wanted,
                                const std::string& trained_name, const std::string& wanted_name);
// The tensors attention `wanted` adds to a model trained with `trained` whose
// initial value leaves the model as it was, so that a checkpoint may gain
// them at evaluation (and a calibration fit them): HeadScale's τ_h
// (attnscale, from 1) on a model without a learned per-head scale. Empty
// otherwise.
std::vector<std::string> identity_tensors_added(const ModelConfig& m, const AttentionSpec& trained,
                                                const AttentionSpec& wanted);

template <typename T>
ParamViews<T> make_views(const ParamLayout& layout, T* base, int n_layer);

// Fills a host buffer of layout.total values with the GPT-2 initialisation,
// drawing from a deterministic RNG seeded with `seed`.
template <typename T>
void init_params(const ParamLayout& layout, const ModelConfig& m, uint64_t seed, T* host);
// The same values, handed out in order in pieces of at most `piece` values:
// put(offset in the flat layout, n, values). Bit-identical to init_params
// whatever the piece size (the draws are taken in the same order).
template <typename T>
void init_params_in_pieces(const ParamLayout& layout, const ModelConfig& m, uint64_t seed, size_t piece,
                           const std::function<void(size_t offset, size_t n, const T* values)>& put);

}  // namespace gpt
