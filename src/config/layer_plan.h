// Per-layer plans (issue 18, part 4; docs/contenders.md, "Per-layer plans"):
// the position encoding, the mask, the temperature and the attention stages
// may differ by layer. A plan is a pattern of letters, one per layer,
// repeated over model.n_layer ("LLLG" on 8 layers: LLLGLLLG), and the kinds
// the letters name:
//
//   "layer_pattern": "LLLG",
//   "layer_kinds": {"L": {"window": 64}, "G": {"position": "none", "window": 0}}
//
// A kind's fields, each optional (absent: the run's choice for that layer):
//   position     "rope" | "none": the layer rotates q and k, or not (NoPE);
//                only with model.position rope or none
//   window       0: full attention (the run's mask dropped); w > 0: a sliding
//                window of the last w keys (replacing the run's mask)
//   temperature  a context.temperature choice (none, yarn, llama4)
//   rope_theta   the layer's RoPE base (Gemma 3: 10k local, 1M global)
//   attention    a whole attention section (preset and stages): the layer's
//                score, scale, positivity, normalisation, re-weighting, bias
//                and output gate; missing keys take their defaults, not the
//                run's. The context extension of the run applies on top.
//
// Named plans (model.layer_plan), whose kinds model.layer_kinds may amend:
//   swan   "LLLG": L = RoPE with a window of N/2, G = NoPE with full
//          attention (SWAN-GPT, Puvvada et al. 2025, at its 3:1 ratio)
//   irope  the same with G's llama4 temperature (Llama 4's interleaved NoPE
//          layers; its RoPE layers use chunked attention, for which the
//          sliding window stands in here)
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "kernels/attention_spec.h"

namespace gpt {

struct LayerKind {
  std::string name;           // its letter
  std::optional<bool> rope;   // position: true rope, false none
  std::optional<int> window;  // 0: full attention; w > 0: sliding window of w keys
  std::optional<Temperature> temperature;
  std::optional<double> rope_theta;                  // the layer's RoPE base (model.rope_theta elsewhere)
  std::optional<AttentionConfig> attention;          // the layer's attention section
  nlohmann::json source = nlohmann::json::object();  // the kind as resolved, for reports
};

struct LayerPlan {
  std::string name = "none";  // none | swan | irope | custom
  std::string pattern;        // as configured, before the repetition
  std::vector<LayerKind> kinds;
  std::vector<int> layer_kind;  // per layer, its index into kinds; empty without a plan
  bool empty() const { return layer_kind.empty(); }
};

// The plan of model.layer_plan, model.layer_pattern and model.layer_kinds,
// checked against the model config: throws gpt::Error naming the key (e.g.
// "model.layer_kinds.G.position") and what is valid.
LayerPlan resolve_layer_plan(const ModelConfig& m);

// One layer as the model runs it.
struct LayerAttention {
  AttentionSpec spec;  // the layer's attention (base spec with the kind applied)
  bool rope = false;   // q and k are rotated by RoPE
  bool pope = false;   // q and k in PoPE's polar coordinates (model.position "pope"; no plan)
  std::string kind;    // its letter; "" without a plan
};

// Every layer's attention: `base` (the run's spec, as the model resolves
// it) with each layer's kind applied; without a plan, base everywhere.
std::vector<LayerAttention> layer_attention(const ModelConfig& m, const LayerPlan& plan, const AttentionSpec& base);
std::vector<LayerAttention> layer_attention(const ModelConfig& m, const AttentionSpec& base);

// Why a model whose layers run `layers` cannot train with position ids
// (train.positions pose or randomized; train/position_ids.h), or "" when it
// can: the ids reach RoPE and PoPE only, so some layer must use one of them,
// and nothing may read positions another way — the learned table (it has
// model.context rows), and the biases, scales and remappings whose distances
// the attention kernels take from token indices (ALiBi, KERPLE, FIRE,
// scale_invariant, a distance remapping).
std::string position_ids_refusal(const ModelConfig& m, const std::vector<LayerAttention>& layers);

// Whether some layer has each learned attention parameter (the parameter
// table holds a tensor when any layer uses it). Refuses two KERPLE variants
// in one model (one tensor, one initialisation).
struct LearnedAttention {
  bool scale = false, sink = false, kerple = false, forget = false, fire = false, output_gate = false,
       differential = false;
  bool head_temperature = false;  // the learned per-head scale is HeadScale's τ_h (else ssmax's s_h)
  PositionBias kerple_kind = PositionBias::None;
  bool operator==(const LearnedAttention&) const = default;
};
LearnedAttention learned_attention(const std::vector<LayerAttention>& layers);

// The full-config checks of a plan (config_from_json calls it): the kinds'
// attention sections against the schema's rules, windows that act, and
// the learned parameters' consistency.
void check_layer_plan(const Config& c);

// Per layer: {"layer", "kind", "position", "attention": stages, "mask",
// "window", "temperature"}; results and diagnostics report it.
nlohmann::json layer_plan_to_json(const std::vector<LayerAttention>& layers);
// One line, e.g. "LLLG x2: L = rope, window 64; G = none, full" or "none".
std::string layer_plan_summary(const ModelConfig& m);

}  // namespace gpt
