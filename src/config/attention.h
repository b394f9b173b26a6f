// From the attention block of a config to the AttentionSpec the kernels take:
// the preset's stages and constants, each overridable, with N = the training
// context and ALiBi from model.position. Also the spec's JSON description
// (recorded in results) and the compatibility check of an evaluation-time
// override against the variant a checkpoint was trained with.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "kernels/attention_spec.h"

namespace gpt {

// The preset named `name`, or null.
const AttentionPreset* find_attention_preset(const std::string& name);

// Resolves preset + overrides, the RoPE of the model and the
// context-extension section. trained_context = model.context.
AttentionSpec resolve_attention(const AttentionConfig& a, const ModelConfig& m, const ContextConfig& ctx = {});
// A whole config's: also the frequencies its growing training schedule left
// (train.grow_yarn: every switch of growth_stages applied).
AttentionSpec resolve_attention(const Config& c);

// The stages of a growing training schedule (docs/training_for_length.md),
// for training windows of N tokens: the window warm-up's (train.window_start
// W0 below N) W0, 2·W0, ... below N, then N (full attention), ceil(N / W0)
// of them; the length schedule's (train.length_start L0, N / L0 a power of
// two) L0, 2·L0, 4·L0, ..., N. Empty without the schedule; growth_stages:
// whichever is on (the config refuses both).
std::vector<int> window_stages(const TrainConfig& t, int N);
std::vector<int> length_stages(const TrainConfig& t, int N);
std::vector<int> growth_stages(const TrainConfig& t, int N);

// d_r: the channels of each head that RoPE rotates (model.rope_fraction of
// the head size, rounded down to even).
int rope_rotated_dims(const ModelConfig& m);

// The context-extension part of a spec (RoPE rule and its parameters, mask,
// row index, temperature), recorded in results beside the attention.
// The mask as the config names it (context.mask): none, window, sinks, lambda or chunked.
std::string mask_name(const AttentionSpec& s);
nlohmann::json context_to_json(const AttentionSpec& s);
// One line, e.g. "yarn s=L/N (t=0.1 ln s + 1), window 128" or "none".
std::string context_summary(const AttentionSpec& s);

// The context section for a list of method names (gpt eval --context, gpt
// sweep): each of pi, ntk, dynamic_ntk, yarn, llama3 sets rope_scaling;
// window, sinks set mask; yarn_temp, llama4_temp set temperature; none adds
// nothing. Two methods of one kind, or an unknown name, are errors naming them.
nlohmann::json context_methods_to_json(const std::vector<std::string>& methods);
// "pi, ntk, ..., none": every name context_methods_to_json takes.
std::string context_method_names();

// Every stage and constant, e.g. {"preset":"lssar","score":"cosine",...,"p":15}.
nlohmann::json attention_to_json(const AttentionConfig& a, const AttentionSpec& s);
// One line: "lssar (cosine·1, lssa, softplus, l1, reweight p=15 offset_rows=3)".
// A variant named as gpt bench takes it: PRESET, PRESET+BIAS (a position bias
// of attention.position_bias, e.g. softmax+forget), PRESET+differential or
// PRESET+softcap (a logit soft-cap of 50);
// throws naming `what` and the valid names for an unknown one.
AttentionConfig attention_variant(const std::string& name, const std::string& what);
std::string attention_summary(const AttentionConfig& a, const AttentionSpec& s);

}  // namespace gpt
