// The parts of a block around attention, by the model's block options
// (docs/blocks.md): the normalisation (LayerNorm or RMSNorm) and the MLP
// (GELU, SwiGLU or ReLU²). The layer loop in model/gpt.cpp calls these and
// reads like the architecture whatever the options.
#pragma once
#include "backend/backend.h"
#include "config/config.h"
#include "model/activations.h"
#include "model/params.h"

namespace gpt {

// The block's options (docs/blocks.md) for the results JSON and the sweep's
// run descriptions, and as one line for logs and errors.
nlohmann::json block_to_json(const ModelConfig& m);
std::string block_summary(const ModelConfig& m);

// out (N,C) = norm(inp) with gain w and (LayerNorm) bias b; mean (LayerNorm
// only) and rstd (N) kept for the backward.
template <typename T>
void norm_forward(Backend<T>& be, const ModelConfig& m, T* out, accum_t<T>* mean, accum_t<T>* rstd, const T* inp,
                  const T* w, const T* b, int N);
// dinp += dL/dinp from dout = dL/dout; dw (and LayerNorm's db) += theirs.
template <typename T>
void norm_backward(Backend<T>& be, const ModelConfig& m, T* dinp, accum_t<T>* dw, accum_t<T>* db, const T* dout,
                   const T* inp, const T* w, const accum_t<T>* mean, const accum_t<T>* rstd, int N);

// a.fcproj (N,C) = fcproj(act(fc(x.ln2))); keeps x.fch and x.fch_act.
template <typename T>
void mlp_forward(Backend<T>& be, const ModelConfig& m, Activations<T>& a, LayerActs<T>& x, const LayerViews<T>& w,
                 int N);
// From dout = dL/d(a.fcproj), adds the MLP's parameter gradients to g and
// writes dln = dL/d(x.ln2).
template <typename T>
void mlp_backward(Backend<T>& be, const ModelConfig& m, Activations<T>& a, LayerActs<T>& x, const LayerViews<T>& w,
                  const LayerViews<accum_t<T>>& g, const T* dout, T* dln, int N);

}  // namespace gpt
