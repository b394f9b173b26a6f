// From the attention block of a config to the AttentionSpec the kernels take:
// the preset's stages and constants, each overridable, with N = the training
// context and ALiBi from model.position. Also the spec's JSON description
// (recorded in results) and the compatibility check of an evaluation-time
// override against the variant a checkpoint was trained with.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "kernels/attention_spec.h"

namespace gpt {

// The preset named `name`, or null.
const AttentionPreset* find_attention_preset(const std::string& name);

// Resolves preset + overrides. trained_context = model.context.
AttentionSpec resolve_attention(const AttentionConfig& a, const ModelConfig& m);
inline AttentionSpec resolve_attention(const Config& c) { return resolve_attention(c.attention, c.model); }

// Every stage and constant, e.g. {"preset":"lssar","score":"cosine",...,"p":15}.
nlohmann::json attention_to_json(const AttentionConfig& a, const AttentionSpec& s);
// One line: "lssar (cosine·1, lssa, softplus, l1, reweight p=15 offset_rows=3)".
std::string attention_summary(const AttentionConfig& a, const AttentionSpec& s);

// Throws gpt::Error with the reason when a model trained with `trained`
// cannot be evaluated with `wanted`: a different score type, or learned
// parameters (ssmax's s_h) that one has and the other does not.
void check_attention_compatible(const AttentionSpec& trained, const AttentionSpec& wanted,
                                const std::string& trained_name, const std::string& wanted_name);

}  // namespace gpt
