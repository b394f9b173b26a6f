// The activations of one forward pass (storage type T) and the gradient
// scratch of the backward pass, for B sequences of Tn tokens. Training keeps
// every layer's tensors; inference keeps one layer slot that all layers
// reuse (and no attention statistics), so memory does not grow with depth.
// No buffer ever holds a Tn x Tn matrix, except FIRE's bias table.
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "config/layer_plan.h"

namespace gpt {

// Per-layer activations (storage type T): X(name, width per token). Widths
// use C, A (the attention's width n_head·D, model.attn_width()), A3 = 3A,
// FI (the MLP's first projection: 2F for swiglu, else F) and F (its hidden
// width, model.mlp_width()).
#define GPT_LAYER_ACTS(X) X(ln1, C) X(atty, A) X(res2, C) X(ln2, C) X(fch, FI) X(fch_act, F) X(res3, C)
// Per-layer row statistics (float32 side, Acc): one value per token.
#define GPT_LAYER_STATS(X) X(ln1_mean) X(ln1_rstd) X(ln2_mean) X(ln2_rstd)
// Gradient scratch for the backward pass, shared by all layers.
#define GPT_GRAD_SCRATCH(X) X(dres, C) X(dln, C) X(dqkv, A3) X(datty, A) X(dfch, FI) X(dfch_act, F)

template <typename T>
struct LayerActs {
  using Acc = accum_t<T>;
#define GPT_FIELD(name, width) Buffer<T> name;
#define GPT_STAT_FIELD(name) Buffer<Acc> name;
  GPT_LAYER_ACTS(GPT_FIELD)
  GPT_LAYER_STATS(GPT_STAT_FIELD)
  Buffer<T> qkv;          // attention's input: the qkv projection, rotated by RoPE with rope positions
  Buffer<T> qkvf;         // qkv rotated at the far positions of a distance remapping (remap::on only)
  Buffer<Acc> att_stats;  // (B, NH, Tn, stats_per_row), training only
  Buffer<T> fgate;        // the forget gate's logits g (B, Tn, NH) (forget only)
  Buffer<Acc> fcum;       // its c (B, NH, Tn), c_t = Σ_{l<=t} ln σ(g_l): attention's input
  Buffer<T> ogate;        // the output gate's logits x·W_gᵀ + b_g (N, A) (output_gate only)
  Buffer<T> attg;         // the gated attention output atty·σ(ogate), the output projection's input
  Buffer<T> atty2;        // differential: the kernel heads' outputs (N, 2A), which atty combines
  Buffer<Acc> diff_rstd;  // differential: 1/rms of each head's combination (N, NH)
  Buffer<T> qkv_raw;      // QK-norm: the projection before it (N, 3A)
  Buffer<Acc> qk_rstd;    // and each q and k head's 1/rms (N, 2, NH)
};

template <typename T>
struct Activations {
  using Acc = accum_t<T>;
  int B = 0, Tn = 0;              // the pass running on them
  bool training = false;          // that pass: every layer's slot, attention statistics
  size_t scored = 0;              // that pass's targets other than kIgnoreTarget (the mean loss's count)
  // A regression pass (GPT::forward_regression): the head's outputs sit in
  // the first N·R values of `logits`, and reg_dout holds d(mean loss)/d(output)
  // on the host for backward().
  bool regression = false;
  std::vector<Acc> reg_dout;
  int alloc_B = 0, alloc_Tn = 0;  // the shape they were allocated for
  size_t capacity() const { return static_cast<size_t>(alloc_B) * alloc_Tn; }  // tokens each buffer holds
  std::vector<LayerActs<T>> layers;  // n_layer slots when allocated for training, 1 for inference
  Buffer<T> encoded, lnf, logits;
  Buffer<Acc> lnf_mean, lnf_rstd, losses, dlosses;
  TokenBuffer tokens, targets;
  // Training-time position ids (B, Tn) of the pass, and the pointer the ops
  // read: pos_ids.get() when the pass gave ids, null for 0..Tn-1.
  TokenBuffer pos_ids;
  const int32_t* pos = nullptr;
  // The document mask's (B, Tn) document starts (TokenLayout::doc_begin) and
  // the pointer the attention ops read (HeadParams::doc), null for none.
  TokenBuffer doc_ids;
  const int32_t* doc = nullptr;
  GPT_GRAD_SCRATCH(GPT_FIELD)
  Buffer<T> dqkvr, dqkvf;
  Buffer<T> dln2;           // parallel residual: the MLP norm's output gradient, kept apart from the attention's
  Buffer<T> dfgate;         // the forget gate's dL/dg (B, Tn, NH)
  Buffer<Acc> dfcum;        // and dL/dc (B, NH, Tn)
  Buffer<T> dattg, dogate;  // the output gate's dL/d(gated output), dL/d(logits)
  // FIRE's table b (NH, Tn, Tn) of the layer running (made again in the
  // backward) and its dL/db (B, NH, Tn, Tn); grown on first use (fire only).
  Buffer<Acc> fire_table, dfire;
  // Differential attention (attn::diff), shared by the layers: qkv split into
  // the kernel heads (N, 6A; the far copy's too), made again in the backward;
  // the forget gate's c and FIRE's table repeated over a head's kernel heads,
  // and the gradients of all of them (grown on first use where noted).
  Buffer<T> qkv2, qkvf2, datty2, dqkv2, dqkvf2;
  Buffer<Acc> fcum2, dfcum2, fire_table2, dfire2;
  // Forward scratch shared by the layers: values no backward reads. The two
  // output projections (the residual adds them) and, with rope positions,
  // the qkv projection before RoPE (RoPE's backward needs only its gradient).
  Buffer<T> attproj, fcproj, qkv_pre;
  // Grouped-query attention (model.n_kv_head < n_head): the projection's
  // grouped qkv before its key/value heads are repeated, and its gradient.
  Buffer<T> qkv_grouped, dqkv_grouped;
  Buffer<T> dqkv_raw;  // QK-norm: dL/d(the projection before it)
#undef GPT_FIELD
#undef GPT_STAT_FIELD
  LayerActs<T>& layer(int l) { return layers[training ? l : 0]; }
};

// Buffers for a pass over B x Tn tokens of a model whose layers run `layers`:
// each training slot holds what its own layer uses (the far copy of a
// distance remapping, the forget gate, the output gate, differential
// attention's combination), the one inference slot what any layer uses.
template <typename T>
std::unique_ptr<Activations<T>> allocate_activations(Backend<T>& be, const ModelConfig& cfg,
                                                     const std::vector<LayerAttention>& layers, int B, int Tn,
                                                     bool training);

}  // namespace gpt
