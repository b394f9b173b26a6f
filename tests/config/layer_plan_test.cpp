// Per-layer plans (config/layer_plan.h): how model.layer_plan, layer_pattern
// and layer_kinds resolve into every layer's attention, the named plans, and
// every refused input with the message that names the key.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "config/attention.h"
#include "config/config.h"
#include "config/layer_plan.h"
#include "core/check.h"
#include "model/params.h"

namespace gpt {
namespace {

using nlohmann::json;

std::string error_of(const std::string& text) {
  try {
    config_from_json(json::parse(text));
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a gpt::Error for " << text;
  return "";
}

void expect_contains(const std::string& message, std::initializer_list<std::string> parts) {
  for (const auto& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << "missing [" << part << "] in: " << message;
}

std::vector<LayerAttention> layers_of(const std::string& text) {
  const Config c = config_from_json(json::parse(text));
  return layer_attention(c.model, resolve_attention(c));
}

TEST(LayerPlan, NoPlanIsTheRunsAttentionInEveryLayer) {
  const Config c = config_from_json(json::parse(R"({"context": {"mask": "window", "window": 32}})"));
  EXPECT_TRUE(resolve_layer_plan(c.model).empty());
  const auto layers = layer_attention(c.model, resolve_attention(c));
  ASSERT_EQ(layers.size(), 4u);
  for (const auto& la : layers) {
    EXPECT_TRUE(la.rope);
    EXPECT_EQ(la.kind, "");
    EXPECT_EQ(la.spec.window, 32);
  }
  EXPECT_EQ(layer_plan_summary(c.model), "none");
}

// SWAN-GPT's 3:1 interleaving over 8 layers: LLLGLLLG, L = RoPE with a
// window of N/2 = 64, G = NoPE with full attention.
TEST(LayerPlan, SwanInterleavesWindowedRopeAndFullNope) {
  const auto layers = layers_of(R"({"model": {"n_layer": 8, "layer_plan": "swan"}})");
  ASSERT_EQ(layers.size(), 8u);
  const std::string expect = "LLLGLLLG";
  for (int l = 0; l < 8; ++l) {
    EXPECT_EQ(layers[l].kind, std::string(1, expect[l])) << l;
    const bool global = expect[l] == 'G';
    EXPECT_EQ(layers[l].rope, !global) << l;
    EXPECT_EQ(layers[l].spec.window, global ? 0 : 64) << l;
    EXPECT_EQ(layers[l].spec.sinks, 0) << l;
    EXPECT_EQ(layers[l].spec.temperature, Temperature::None) << l;
    EXPECT_EQ(layers[l].spec.score, Score::Dot) << l;
  }
  // iRoPE: the same with the llama4 temperature on the NoPE layers only.
  const auto irope = layers_of(R"({"model": {"layer_plan": "irope"}})");
  for (int l = 0; l < 4; ++l)
    EXPECT_EQ(irope[l].spec.temperature, l == 3 ? Temperature::Llama4 : Temperature::None) << l;
  // SWAN-GPT's temperature, set for the run, acts on the NoPE layers only.
  const auto swan = layers_of(R"({"model": {"layer_plan": "swan"}, "context": {"temperature": "swan"}})");
  for (int l = 0; l < 4; ++l)
    EXPECT_EQ(swan[l].spec.temperature, l == 3 ? Temperature::Swan : Temperature::None) << l;
  // 6 layers: the pattern repeats and is cut, LLLGLL.
  const auto six = layers_of(R"({"model": {"n_layer": 6, "layer_plan": "swan"}})");
  std::string kinds;
  for (const auto& la : six) kinds += la.kind;
  EXPECT_EQ(kinds, "LLLGLL");
}

// model.layer_kinds amends a named plan's kinds field by field; a custom
// pattern names its own.
TEST(LayerPlan, KindsAmendNamedPlansAndDefineCustomOnes) {
  const auto amended = layers_of(R"({"model": {"layer_plan": "swan", "layer_kinds": {"L": {"window": 16}}}})");
  EXPECT_EQ(amended[0].spec.window, 16);
  EXPECT_TRUE(amended[0].rope);  // the named plan's position kept
  EXPECT_FALSE(amended[3].rope);
  const auto custom = layers_of(R"({"model": {"layer_pattern": "AB",
      "layer_kinds": {"A": {}, "B": {"position": "none", "temperature": "yarn"}}}})");
  ASSERT_EQ(custom.size(), 4u);
  EXPECT_EQ(custom[0].kind + custom[1].kind + custom[2].kind + custom[3].kind, "ABAB");
  EXPECT_TRUE(custom[0].rope);
  EXPECT_FALSE(custom[1].rope);
  EXPECT_EQ(custom[0].spec.temperature, Temperature::None);
  EXPECT_EQ(custom[1].spec.temperature, Temperature::Yarn);
  // A NoPE model with RoPE layers.
  const auto mixed = layers_of(R"({"model": {"position": "none", "layer_pattern": "RN",
      "layer_kinds": {"R": {"position": "rope"}, "N": {}}}})");
  EXPECT_TRUE(mixed[0].rope);
  EXPECT_FALSE(mixed[1].rope);
  EXPECT_EQ(mixed[0].spec.rope.rot_dims, 32);
}

// A kind's attention section replaces the run's stages in its layers (its
// missing keys take their defaults); the run's context extension stays.
TEST(LayerPlan, KindAttentionReplacesTheStages) {
  const auto layers = layers_of(R"({"attention": {"preset": "ssmax"},
      "context": {"temperature": "llama4", "logit_scale": 0.9},
      "model": {"layer_pattern": "LG", "layer_kinds": {"L": {}, "G": {"attention": {"preset": "lssar", "p": 7}}}}})");
  EXPECT_EQ(layers[0].spec.scale, Scale::Ssmax);
  EXPECT_EQ(layers[0].spec.score, Score::Dot);
  const AttentionSpec& g = layers[1].spec;
  EXPECT_EQ(g.score, Score::Cosine);
  EXPECT_EQ(g.scale, Scale::Lssa);
  EXPECT_EQ(g.positivity, Positivity::Softplus);
  EXPECT_EQ(g.p, 7);
  EXPECT_EQ(g.temperature, Temperature::Llama4);  // the run's context part
  EXPECT_EQ(g.logit_scale, 0.9);
  // The parameter table holds ssmax's scales (layer L uses them).
  const Config c = config_from_json(json::parse(R"({
      "model": {"layer_pattern": "LG", "layer_kinds": {"L": {}, "G": {"attention": {"preset": "ssmax",
      "position_bias": "forget", "output_gate": "sigmoid"}}}}})"));
  const ParamLayout layout(c.model, resolve_attention(c));
  EXPECT_TRUE(layout.has("attnscale"));
  EXPECT_TRUE(layout.has("fgatew"));
  EXPECT_TRUE(layout.has("ogatew"));
  EXPECT_FALSE(ParamLayout(ModelConfig{}, resolve_attention(Config{})).has("attnscale"));
}

// A NoPE layer drops what belongs to the rotation (the frequency rule, the
// distance remappings); a window kind replaces the run's mask and the
// remapping that belongs to it.
TEST(LayerPlan, NopeAndWindowKindsDropWhatDoesNotApply) {
  const auto layers = layers_of(R"({"context": {"rope_scaling": "yarn", "remap": "rerope", "mask": "sinks"},
      "model": {"layer_pattern": "RNW", "n_layer": 3,
      "layer_kinds": {"R": {}, "N": {"position": "none"}, "W": {"window": 20}}}})");
  EXPECT_EQ(layers[0].spec.rope.scaling, RopeScaling::Yarn);
  EXPECT_EQ(layers[0].spec.rope.remap, RemapKind::Rerope);
  EXPECT_EQ(layers[0].spec.sinks, 4);
  EXPECT_EQ(layers[1].spec.rope.scaling, RopeScaling::None);
  EXPECT_EQ(layers[1].spec.rope.remap, RemapKind::None);
  EXPECT_EQ(layers[1].spec.sinks, 4);  // the mask is the run's
  EXPECT_EQ(layers[2].spec.window, 20);
  EXPECT_EQ(layers[2].spec.sinks, 0);
  EXPECT_EQ(layers[2].spec.rope.remap, RemapKind::Rerope);  // not a mask's remapping: kept
  const auto lambda = layers_of(R"({"context": {"mask": "lambda"},
      "model": {"layer_pattern": "F", "layer_kinds": {"F": {"window": 0}}}})");
  EXPECT_EQ(lambda[0].spec.window, 0);
  EXPECT_EQ(lambda[0].spec.rope.remap, RemapKind::None);  // LM-Infinite's distance cap went with its mask
}

TEST(LayerPlan, ReportsEveryLayer) {
  const auto layers = layers_of(R"({"model": {"layer_plan": "swan"}})");
  const json j = layer_plan_to_json(layers);
  ASSERT_EQ(j.size(), 4u);
  EXPECT_EQ(j[0]["kind"], "L");
  EXPECT_EQ(j[0]["position"], "rope");
  EXPECT_EQ(j[0]["mask"], "window");
  EXPECT_EQ(j[0]["window"], 64);
  EXPECT_EQ(j[3]["kind"], "G");
  EXPECT_EQ(j[3]["position"], "none");
  EXPECT_EQ(j[3]["mask"], "none");
  EXPECT_EQ(j[3]["attention"]["score"], "dot");
  const Config c = config_from_json(json::parse(R"({"model": {"layer_plan": "swan"}})"));
  expect_contains(layer_plan_summary(c.model), {"swan", "\"LLLG\" over 4 layers", "L = ", "\"window\":64", "G = "});
}

TEST(LayerPlan, RefusesBadInputNamingTheKey) {
  // SWAN-GPT's temperature needs a layer without position encoding.
  expect_contains(error_of(R"({"context": {"temperature": "swan"}})"),
                  {"\"context.temperature\" = \"swan\"", "this model has none", "model.position = \"rope\""});
  EXPECT_NO_THROW(config_from_json(json::parse(R"({"model": {"position": "none"}, "context": {"temperature": "swan"}})")));
  expect_contains(error_of(R"({"context": {"temp_base": 1}})"), {"\"context.temp_base\"", "> 1"});
  expect_contains(error_of(R"({"model": {"layer_plan": "jamba"}})"), {"model.layer_plan", "swan, irope"});
  expect_contains(error_of(R"({"model": {"layer_pattern": "LLG"}})"),
                  {"model.layer_pattern", "uses 'L'", "model.layer_kinds"});
  expect_contains(error_of(R"({"model": {"layer_kinds": {"G": {}}}})"), {"model.layer_kinds", "needs a pattern"});
  expect_contains(error_of(R"({"model": {"layer_pattern": "LLLLLG", "layer_kinds": {"L": {}, "G": {}}}})"),
                  {"6 letters", "4 layers"});
  expect_contains(error_of(R"({"model": {"layer_pattern": "L1", "layer_kinds": {"L": {}}}})"), {"'1' is not a letter"});
  expect_contains(error_of(R"({"model": {"layer_plan": "swan", "layer_kinds": {"X": {}}}})"),
                  {"model.layer_kinds.X", "not used"});
  expect_contains(error_of(R"({"model": {"layer_plan": "swan", "layer_kinds": {"G": {"foo": 1}}}})"),
                  {"model.layer_kinds.G.foo", "position, window, temperature, rope_theta, attention"});
  expect_contains(error_of(R"({"model": {"layer_plan": "swan", "layer_kinds": {"G": {"position": "alibi"}}}})"),
                  {"model.layer_kinds.G.position", "\"rope\", \"none\""});
  expect_contains(error_of(R"({"model": {"layer_plan": "swan", "position": "learned"}})"),
                  {"model.layer_kinds.", ".position", "model.position", "learned"});
  expect_contains(error_of(R"({"model": {"layer_plan": "swan", "layer_kinds": {"L": {"window": 2.5}}}})"),
                  {"model.layer_kinds.L.window", "2.5", "integer"});
  expect_contains(error_of(R"({"model": {"layer_plan": "swan", "layer_kinds": {"L": {"window": 4096}}}})"),
                  {"model.layer_kinds.L.window", "never hide a key", "2048"});
  expect_contains(error_of(R"({"model": {"layer_plan": "swan", "layer_kinds": {"G": {"temperature": "hot"}}}})"),
                  {"model.layer_kinds.G.temperature", "llama4"});
  expect_contains(
      error_of(R"({"model": {"layer_plan": "swan", "layer_kinds": {"G": {"attention": {"preset": "x"}}}}})"),
      {"model.layer_kinds.G.attention", "attention.preset", "softmax"});
  expect_contains(error_of(R"({"model": {"layer_plan": "swan", "layer_kinds": {"G": {"attention": {"colour": 1}}}}})"),
                  {"model.layer_kinds.G.attention", "unknown key \"colour\"", "position_bias"});
  // The schema's cross-field rules hold for a kind's attention too.
  expect_contains(error_of(R"({"model": {"layer_plan": "swan",
      "layer_kinds": {"G": {"attention": {"preset": "lssar", "normalize": "sink"}}}}})"),
                  {"model.layer_kinds.G.attention", "re-weighting"});
  // One KERPLE variant per model (one tensor, one initialisation).
  expect_contains(error_of(R"({"model": {"position": "none", "layer_pattern": "AB", "layer_kinds": {
      "A": {"attention": {"position_bias": "kerple_log"}}, "B": {"attention": {"position_bias": "kerple_power"}}}}})"),
                  {"kerple_power", "kerple_log", "one KERPLE variant"});
  expect_contains(error_of(R"({"context": {"rope_scaling": "yarn"}, "model": {"layer_plan": "swan",
      "layer_kinds": {"L": {"temperature": "yarn"}}}})"),
                  {"model.layer_kinds.L.temperature", "yarn"});
}

}  // namespace
}  // namespace gpt
