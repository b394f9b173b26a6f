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
  AttnScale,       // ssmax's s_h = 1/ln N (attn::ssmax_init)
  KerpleLog,       // (ρ₁, ρ₂) per head for r₁ ~ U(0, 2), r₂ ~ U(0, 1), at least 0.01 (attn::kerple_r)
  KerplePower,     // (ρ₁, ρ₂) per head for r₁ ~ U(0, 1), r₂ ~ U(0, 2) (exponent), 0.01 <= r <= 1.99
  Fire,            // FIRE's block (attn::fire): MLP weights and biases U(±1/sqrt(fan_in)), c = 0.1, m = 1
  DiffLambda,      // differential attention's λ_q1, λ_k1, λ_q2, λ_k2: N(0, 0.1) (attn::diff::kInitStd)
};

// X(name, shape, init, decay, present). Shapes use C (channels), Vp (padded
// vocabulary), P (position rows), H (heads). Weights are (out, in). Order =
// buffer order. `present` may use learned_positions, learned_attn_scale and
// learned_attn_sink (the sink logits ζ_h of normalisation "sink", starting at
// 0: the sink begins as softmax1's implicit zero logit) and learned_kerple
// (KERPLE's raw (ρ₁, ρ₂) per head; `kerple_init` is its variant's InitKind)
// and learned_fire (FIRE's MLP, c and multiplier m of attn::fire, one block
// per layer, no weight decay) and learned_forget (the forget gate's projection C → H and bias: f_t =
// σ(fgatew·x_t + fgateb), x_t the layer's normalised input; N(0, init_std) and
// zeros, as the Forgetting Transformer's reference initialises them) and
// output_gate (gated attention's W_g, b_g: N(0, init_std) and zeros, so every
// gate starts near σ(0) = 1/2) and differential (differential attention's λ
// vectors, 4 × D/2 values, and the gain of its per-head RMSNorm, D values,
// starting at 1; attn::diff; no weight decay).
#define GPT_GLOBAL_HEAD_PARAMS(X)                                   \
  X(wte, (Shape{Vp, C}), InitKind::Normal, true, true)              \
  X(wpe, (Shape{P, C}), InitKind::Normal, true, learned_positions)

// Per-layer tensors, stacked layer-major: (L, shape...).
#define GPT_LAYER_PARAMS(X)                                             \
  X(ln1w, (Shape{C}), InitKind::Ones, false, true)                      \
  X(ln1b, (Shape{C}), InitKind::Zeros, false, true)                     \
  X(qkvw, (Shape{3 * C, C}), InitKind::Normal, true, true)              \
  X(qkvb, (Shape{3 * C}), InitKind::Zeros, false, true)                 \
  X(attprojw, (Shape{C, C}), InitKind::NormalResidual, true, true)      \
  X(attprojb, (Shape{C}), InitKind::Zeros, false, true)                 \
  X(ln2w, (Shape{C}), InitKind::Ones, false, true)                      \
  X(ln2b, (Shape{C}), InitKind::Zeros, false, true)                     \
  X(fcw, (Shape{4 * C, C}), InitKind::Normal, true, true)               \
  X(fcb, (Shape{4 * C}), InitKind::Zeros, false, true)                  \
  X(fcprojw, (Shape{C, 4 * C}), InitKind::NormalResidual, true, true)   \
  X(fcprojb, (Shape{C}), InitKind::Zeros, false, true)                 \
  X(attnscale, (Shape{H}), InitKind::AttnScale, false, learned_attn_scale) \
  X(attnsink, (Shape{H}), InitKind::Zeros, false, learned_attn_sink)   \
  X(attnkerple, (Shape{H, 2}), kerple_init, false, learned_kerple)     \
  X(attnfire, (Shape{attn::fire::count(H)}), InitKind::Fire, false, learned_fire) \
  X(fgatew, (Shape{H, C}), InitKind::Normal, true, learned_forget)      \
  X(fgateb, (Shape{H}), InitKind::Zeros, false, learned_forget)         \
  X(ogatew, (Shape{C, C}), InitKind::Normal, true, output_gate)         \
  X(ogateb, (Shape{C}), InitKind::Zeros, false, output_gate)            \
  X(attnlambda, (Shape{2 * (C / H)}), InitKind::DiffLambda, false, differential) \
  X(attnsubln, (Shape{C / H}), InitKind::Ones, false, differential)

#define GPT_GLOBAL_TAIL_PARAMS(X)                    \
  X(lnfw, (Shape{C}), InitKind::Ones, false, true)   \
  X(lnfb, (Shape{C}), InitKind::Zeros, false, true)

using Shape = std::vector<int64_t>;

struct ParamSpec {
  std::string name;
  Shape shape;        // full shape; per-layer tensors have L as first dimension
  InitKind init;
  bool decay;         // AdamW weight decay applies (weight matrices only)
  bool per_layer;
  size_t offset = 0;  // into the flat buffer
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
#define GPT_VIEW_FIELD(name, shape, init, decay, present) T* name = nullptr;
  GPT_LAYER_PARAMS(GPT_VIEW_FIELD)
};

template <typename T>
struct ParamViews {
  GPT_GLOBAL_HEAD_PARAMS(GPT_VIEW_FIELD)
  GPT_GLOBAL_TAIL_PARAMS(GPT_VIEW_FIELD)
#undef GPT_VIEW_FIELD
  std::vector<LayerViews<T>> layers;
};

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
