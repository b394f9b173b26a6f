// Block presets (model.block; docs/blocks.md): a name for the block options
// of an architecture family. A preset fills the model keys a config leaves
// out; keys the config sets win. The values are those of the Hugging Face
// config class's defaults for the family (a downloaded checkpoint's
// config.json states its own, e.g. its rope_theta or tied head).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpt {

// "custom" (no preset: every key its own default, GPT-2's block) and the
// presets.
const std::vector<std::string_view>& block_preset_names();

// The model section with the preset it names under "block" filled in where
// the section leaves a key out; unchanged without "block" or with "custom".
// Throws on an unknown name, listing the valid ones.
nlohmann::json expand_block_preset(const nlohmann::json& model_section);

}  // namespace gpt
