#include "config/block_presets.h"

#include "core/check.h"

namespace gpt {
namespace {

struct BlockPreset {
  std::string_view name;
  const char* keys;  // the model keys it sets, as JSON
};

// Hugging Face's config classes, their defaults: GPT2Config (learned
// positions aside: the project's GPT-2 block keeps its position setting),
// LlamaConfig (rms_norm_eps 1e-6, silu MLP, no biases, untied, θ 10000),
// GPTNeoXConfig (rotary_pct 0.25, parallel residual, exact GELU, untied,
// layer_norm_eps 1e-5), Qwen2Config (as Llama with q/k/v biases), Qwen3Config
// (as Llama with q_norm and k_norm over head_dim).
constexpr BlockPreset kBlockPresets[] = {
    {"gpt2",
     R"({"norm": "layernorm", "mlp": "gelu", "bias": "all", "head": "tied", "residual": "sequential",
         "qk_norm": "none", "rope_pairing": "half"})"},
    {"llama",
     R"({"position": "rope", "rope_theta": 10000, "rope_pairing": "half", "norm": "rmsnorm", "norm_eps": 1e-6,
         "mlp": "swiglu", "bias": "none", "head": "untied", "residual": "sequential", "qk_norm": "none"})"},
    {"neox",
     R"({"position": "rope", "rope_theta": 10000, "rope_pairing": "half", "rope_fraction": 0.25, "norm": "layernorm",
         "mlp": "gelu_erf", "bias": "all", "head": "untied", "residual": "parallel", "qk_norm": "none"})"},
    {"qwen2",
     R"({"position": "rope", "rope_theta": 10000, "rope_pairing": "half", "norm": "rmsnorm", "norm_eps": 1e-6,
         "mlp": "swiglu", "bias": "qkv", "head": "untied", "residual": "sequential", "qk_norm": "none"})"},
    {"qwen3",
     R"({"position": "rope", "rope_theta": 10000, "rope_pairing": "half", "norm": "rmsnorm", "norm_eps": 1e-6,
         "mlp": "swiglu", "bias": "none", "head": "untied", "residual": "sequential", "qk_norm": "rms"})"},
};

}  // namespace

const std::vector<std::string_view>& block_preset_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> v{"custom"};
    for (const BlockPreset& p : kBlockPresets) v.push_back(p.name);
    return v;
  }();
  return names;
}

nlohmann::json expand_block_preset(const nlohmann::json& model_section) {
  if (!model_section.is_object() || !model_section.contains("block")) return model_section;
  const nlohmann::json& b = model_section["block"];
  if (b == "custom") return model_section;
  for (const BlockPreset& p : kBlockPresets) {
    if (!b.is_string() || b != p.name) continue;
    nlohmann::json out = model_section;
    const nlohmann::json preset = nlohmann::json::parse(p.keys);  // alive for the loop over its items
    for (const auto& [key, value] : preset.items())
      if (!out.contains(key)) out[key] = value;
    return out;
  }
  std::string names;
  for (std::string_view n : block_preset_names()) names += (names.empty() ? "" : ", ") + std::string(n);
  fail("config: \"model.block\" = ", b.dump(), " is not a block preset; allowed: ", names);
}

}  // namespace gpt
