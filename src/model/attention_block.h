// The attention branch of one block, forward and backward, with everything
// that wraps the attention op: the qkv projection, RoPE (and the far copy of
// a distance remapping), the forget gate's prefix sums, FIRE's bias table,
// differential attention's split into kernel heads and their combination,
// the sigmoid output gate, and the output projection. The layer loop in
// model/gpt.cpp calls these two and reads like the architecture.
#pragma once
#include "backend/backend.h"
#include "config/layer_plan.h"
#include "model/activations.h"
#include "model/params.h"

namespace gpt {

// a.attproj (N,C) = attproj(attention(qkv(x.ln1))) of layer `layer` (the
// index sets differential attention's λ_init), which runs `la`, in a model
// m (its heads, key/value heads and QK-norm). Keeps what
// the backward reads in x (and x.att_stats when a.training); diag, when not
// null, accumulates the layer's (NH, kAttentionDiagStats) diagnostics.
template <typename T>
void attention_block_forward(Backend<T>& be, Activations<T>& a, LayerActs<T>& x, const LayerViews<T>& w,
                             const LayerAttention& la, int layer, const ModelConfig& m, double* diag);

// From a.dres = dL/d(the branch's output a.attproj), adds the branch's
// parameter gradients to g and writes a.dln = dL/d(x.ln1).
template <typename T>
void attention_block_backward(Backend<T>& be, Activations<T>& a, LayerActs<T>& x, const LayerViews<T>& w,
                              const LayerViews<accum_t<T>>& g, const LayerAttention& la, int layer,
                              const ModelConfig& m);

}  // namespace gpt
