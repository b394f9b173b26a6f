// The context section (context-extension methods): how it resolves into the
// AttentionSpec, every refused combination with the message that names both
// parts, and the method list of gpt eval --context.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "config/attention.h"
#include "config/config.h"
#include "core/check.h"

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

AttentionSpec spec_of(const std::string& text) { return resolve_attention(config_from_json(json::parse(text))); }

TEST(ContextConfig, DefaultsChangeNothing) {
  const AttentionSpec s = spec_of("{}");
  EXPECT_EQ(s.rope.scaling, RopeScaling::None);
  EXPECT_EQ(s.window, 0);
  EXPECT_EQ(s.sinks, 0);
  EXPECT_EQ(s.temperature, Temperature::None);
  EXPECT_EQ(s.rope.rot_dims, 32);  // C = 128, 4 heads
  EXPECT_EQ(for_length(s, 2048).logit_factor, 1.0);
  EXPECT_EQ(context_summary(s), "none");
}

TEST(ContextConfig, ResolvesEveryKey) {
  const AttentionSpec y = spec_of(R"({"context": {"rope_scaling": "yarn", "factor": 4, "beta_fast": 16}})");
  EXPECT_EQ(y.rope.scaling, RopeScaling::Yarn);
  EXPECT_EQ(y.rope.factor, 4);
  EXPECT_EQ(y.rope.beta_fast, 16);
  EXPECT_EQ(y.rope.trained_context, 128);
  const double t = 0.1 * std::log(4.0) + 1;
  EXPECT_DOUBLE_EQ(for_length(y, 128).logit_factor, t * t);  // a fixed factor: the same at every length
  const AttentionSpec auto_y = spec_of(R"({"context": {"rope_scaling": "yarn"}})");
  EXPECT_EQ(for_length(auto_y, 128).logit_factor, 1.0);
  const double t16 = 0.1 * std::log(16.0) + 1;
  EXPECT_DOUBLE_EQ(for_length(auto_y, 2048).logit_factor, t16 * t16);
  const AttentionSpec fixed_t = spec_of(R"({"context": {"rope_scaling": "yarn", "attn_factor": 1}})");
  EXPECT_EQ(for_length(fixed_t, 2048).logit_factor, 1.0);  // frequencies alone
  const AttentionSpec temp = spec_of(R"({"context": {"temperature": "yarn"}})");
  EXPECT_EQ(temp.rope.scaling, RopeScaling::None);  // temperature alone
  EXPECT_DOUBLE_EQ(for_length(temp, 2048).logit_factor, t16 * t16);

  const AttentionSpec w = spec_of(R"({"context": {"mask": "window"}})");
  EXPECT_EQ(w.window, 128);  // default w = N
  EXPECT_EQ(w.sinks, 0);
  const AttentionSpec k = spec_of(R"({"context": {"mask": "sinks"}})");
  EXPECT_EQ(k.sinks, 4);
  EXPECT_EQ(k.window, 124);  // default w = N - k_s
  const AttentionSpec keys =
      spec_of(R"({"context": {"mask": "sinks", "sinks": 2, "window": 60, "row_index": "keys"}})");
  EXPECT_EQ(keys.window, 60);
  EXPECT_EQ(keys.row_index, RowIndex::Keys);
  EXPECT_EQ(attn::kept_keys(keys, 50), 50);
  EXPECT_EQ(attn::kept_keys(keys, 100), 62);
  EXPECT_EQ(attn::kept_keys(keys, 61), 61);  // key 0 is both the oldest window key and a sink
  EXPECT_EQ(attn::kept_keys(keys, 62), 62);
  EXPECT_EQ(attn::kept_keys(keys, 63), 62);

  // Llama 4's chunked mask: chunks of w (default N); row i keeps the keys of its chunk.
  const AttentionSpec ch = spec_of(R"({"context": {"mask": "chunked", "window": 50}})");
  EXPECT_TRUE(ch.chunked);
  EXPECT_EQ(ch.window, 50);
  EXPECT_EQ(ch.sinks, 0);
  EXPECT_EQ(attn::kept_keys(ch, 1), 1);
  EXPECT_EQ(attn::kept_keys(ch, 50), 50);
  EXPECT_EQ(attn::kept_keys(ch, 51), 1);    // key 50 opens the second chunk
  EXPECT_EQ(attn::kept_keys(ch, 120), 20);  // keys 100..119
  EXPECT_FALSE(attn::key_kept(ch, 100, 99));
  EXPECT_TRUE(attn::key_kept(ch, 99, 50));
  EXPECT_EQ(spec_of(R"({"context": {"mask": "chunked"}})").window, 128);
  EXPECT_EQ(context_to_json(ch)["mask"], "chunked");

  const AttentionSpec l4 = spec_of(R"({"context": {"temperature": "llama4", "temp_beta": 0.2}})");
  EXPECT_EQ(l4.temperature, Temperature::Llama4);
  EXPECT_DOUBLE_EQ(attn::row_temperature(l4, 127), 1.0);  // ⌊127/128⌋ = 0
  EXPECT_DOUBLE_EQ(attn::row_temperature(l4, 256), 1 + 0.2 * std::log(3.0));
  // SWAN-GPT's log_a(m + a) of the 0-based position m = i − 1: 1 at the first query.
  const AttentionSpec sw = spec_of(R"({"model": {"position": "none"}, "context": {"temperature": "swan"}})");
  EXPECT_EQ(sw.temperature, Temperature::Swan);
  EXPECT_DOUBLE_EQ(attn::row_temperature(sw, 1), 1.0);
  EXPECT_NEAR(attn::row_temperature(sw, 129), std::log(256.0) / std::log(128.0), 1e-15);  // a = N = 128
  const AttentionSpec sw9 =
      spec_of(R"({"model": {"position": "none"}, "context": {"temperature": "swan", "temp_base": 9}})");
  EXPECT_NEAR(attn::row_temperature(sw9, 73), 2.0, 1e-15);  // log_9(72 + 9) = 2
  EXPECT_EQ(context_to_json(sw9)["temp_base"], 9.0);

  const AttentionSpec rr = spec_of(R"({"context": {"remap": "rerope"}})");
  EXPECT_EQ(rr.rope.remap, RemapKind::Rerope);
  EXPECT_EQ(rr.rope.remap_window, 64);  // default w = N/2
  const AttentionSpec se = spec_of(R"({"context": {"remap": "self_extend"}})");
  EXPECT_EQ(se.rope.remap_window, 32);  // default w_n = N/4
  EXPECT_EQ(for_length(se, 2048).rope.group, 21);
  const AttentionSpec lam = spec_of(R"({"context": {"mask": "lambda"}})");
  EXPECT_EQ(lam.sinks, 10);
  EXPECT_EQ(lam.window, 128);
  EXPECT_EQ(lam.rope.remap, RemapKind::Cap);
  EXPECT_EQ(lam.rope.remap_window, 128);
  EXPECT_EQ(context_to_json(lam).at("mask"), "lambda");
  const AttentionSpec sc = spec_of(R"({"context": {"mask": "sinks", "sink_positions": "cache"}})");
  EXPECT_EQ(sc.rope.remap, RemapKind::CacheSinks);
  EXPECT_EQ(sc.rope.remap_sinks, 4);
  EXPECT_EQ(sc.rope.remap_window, 124);
  const AttentionSpec partial = spec_of(R"({"model": {"rope_fraction": 0.25}})");
  EXPECT_EQ(partial.rope.rot_dims, 8);
  EXPECT_NE(context_summary(y).find("yarn s=4"), std::string::npos) << context_summary(y);
  const json j = context_to_json(k);
  EXPECT_EQ(j.at("mask"), "sinks");
  EXPECT_EQ(j.at("window"), 124);
}

TEST(ContextConfig, RefusedCombinationsNameBothParts) {
  expect_contains(error_of(R"({"model": {"position": "alibi"}, "context": {"rope_scaling": "yarn"}})"),
                  {"context.rope_scaling", "model.position", "alibi"});
  expect_contains(error_of(R"({"model": {"position": "none"}, "context": {"rope_scaling": "pi"}})"),
                  {"context.rope_scaling", "model.position"});
  expect_contains(error_of(R"({"context": {"rope_scaling": "pi", "factor": 0.5}})"), {"context.factor", ">= 1"});
  expect_contains(error_of(R"({"context": {"rope_scaling": "dynamic_ntk", "factor": 4}})"),
                  {"dynamic_ntk", "context.factor", "context.dynamic_alpha"});
  expect_contains(error_of(R"({"model": {"rope_fraction": 0.0625}, "context": {"rope_scaling": "ntk"}})"),
                  {"ntk", "4 rotated channels"});
  expect_contains(error_of(R"({"context": {"rope_scaling": "yarn", "beta_fast": 1, "beta_slow": 2}})"),
                  {"context.beta_fast", "context.beta_slow"});
  expect_contains(error_of(R"({"context": {"rope_scaling": "llama3", "high_freq": 1}})"),
                  {"context.high_freq", "context.low_freq"});
  expect_contains(error_of(R"({"context": {"attn_factor": 1.2}})"), {"context.attn_factor", "yarn"});
  expect_contains(error_of(R"({"context": {"rope_scaling": "yarn", "temperature": "yarn"}})"),
                  {"context.rope_scaling", "context.temperature"});
  expect_contains(error_of(R"({"context": {"window": 64}})"), {"context.window", "context.mask"});
  expect_contains(error_of(R"({"context": {"row_index": "keys"}})"), {"context.row_index", "context.mask"});
  expect_contains(error_of(R"({"context": {"mask": "sinks", "sinks": 128}})"), {"context.sinks", "model.context"});
  expect_contains(error_of(R"({"context": {"mask": "window", "sinks": 3}})"), {"context.sinks", "context.mask"});
  expect_contains(error_of(R"({"context": {"mask": "chunked", "sinks": 3}})"), {"context.sinks", "\"lambda\""});
  // A window that never hides a key at the longest evaluated context.
  expect_contains(error_of(R"({"eval": {"multiples": [1, 2]}, "context": {"mask": "window", "window": 256}})"),
                  {"never hide", "context.window", "eval.multiples"});
  expect_contains(error_of(R"({"eval": {"multiples": [1]}, "context": {"mask": "window"}})"), {"never hide", "= 128"});
  expect_contains(error_of(R"({"model": {"position": "alibi", "rope_fraction": 0.5}})"),
                  {"model.rope_fraction", "rope"});
  expect_contains(error_of(R"({"model": {"rope_fraction": 0.01}})"), {"model.rope_fraction", ">= 2"});
  expect_contains(error_of(R"({"model": {"rope_fraction": 0}})"), {"model.rope_fraction"});
  expect_contains(error_of(R"({"context": {"rope_scaling": "longrope"}})"), {"context.rope_scaling", "yarn"});
  expect_contains(error_of(R"({"context": {"mask": "dilated"}})"), {"context.mask", "window, sinks, lambda"});
  // Distance remappings.
  expect_contains(error_of(R"({"model": {"position": "alibi"}, "context": {"remap": "rerope"}})"),
                  {"distance remapping", "model.position"});
  expect_contains(error_of(R"({"model": {"position": "none"}, "context": {"mask": "lambda"}})"),
                  {"context.mask", "model.position", "use mask window or sinks"});
  expect_contains(error_of(R"({"context": {"remap": "rerope", "mask": "lambda"}})"), {"one distance remapping"});
  expect_contains(error_of(R"({"context": {"mask": "sinks", "sink_positions": "cache", "remap": "self_extend"}})"),
                  {"one distance remapping"});
  expect_contains(error_of(R"({"context": {"sink_positions": "cache"}})"), {"context.sink_positions", "sinks"});
  expect_contains(error_of(R"({"context": {"remap": "rerope", "rope_scaling": "ntk"}})"), {"yarn only"});
  EXPECT_NO_THROW(config_from_json(json::parse(R"({"context": {"remap": "rerope", "rope_scaling": "yarn"}})")));
  expect_contains(error_of(R"({"context": {"group": 4}})"), {"context.group", "context.remap"});
  expect_contains(error_of(R"({"context": {"remap": "rerope", "rerope_kappa": 1}})"), {"context.rerope_kappa"});
  expect_contains(error_of(R"({"context": {"remap": "self_extend", "remap_window": 128}})"),
                  {"self_extend", "context.remap_window"});
  expect_contains(error_of(R"({"eval": {"multiples": [1, 2]}, "context": {"remap": "rerope", "remap_window": 300}})"),
                  {"never act"});
  // Masks and temperatures apply to every position encoding.
  EXPECT_NO_THROW(config_from_json(json::parse(R"({"model": {"position": "alibi"}, "context": {"mask": "window",
      "temperature": "llama4"}})")));
  EXPECT_NO_THROW(config_from_json(json::parse(R"({"model": {"position": "none"}, "context": {"mask": "sinks"}})")));
  // HeadScale's τ_h shares ssmax's tensor and would not scale
  // scale-invariant attention's shift: both refused, in any layer.
  EXPECT_NO_THROW(config_from_json(json::parse(R"({"model": {"position": "none"}, "context": {"head_scale": 1}})")));
  expect_contains(error_of(R"({"attention": {"preset": "ssmax"}, "context": {"head_scale": 1}})"),
                  {"context.head_scale", "ssmax"});
  expect_contains(error_of(R"({"attention": {"scale": "scale_invariant"}, "context": {"head_scale": 1}})"),
                  {"context.head_scale", "scale_invariant"});
}

TEST(ContextConfig, MethodListOfGptEvalContext) {
  EXPECT_EQ(context_methods_to_json({"yarn", "window"}), json({{"rope_scaling", "yarn"}, {"mask", "window"}}));
  EXPECT_EQ(context_methods_to_json({"llama4_temp", "sinks", "none"}),
            json({{"temperature", "llama4"}, {"mask", "sinks"}}));
  EXPECT_EQ(context_methods_to_json({"none"}), json::object());
  EXPECT_EQ(context_methods_to_json({"streaming_llm"}), json({{"mask", "sinks"}, {"sink_positions", "cache"}}));
  EXPECT_EQ(context_methods_to_json({"rerope", "yarn"}), json({{"remap", "rerope"}, {"rope_scaling", "yarn"}}));
  // HeadScale's key is a number, and it joins a frequency rule.
  EXPECT_EQ(context_methods_to_json({"headscale", "yarn"}), json({{"head_scale", 1}, {"rope_scaling", "yarn"}}));
  try {
    context_methods_to_json({"pi", "yarn"});
    ADD_FAILURE() << "two frequency rules";
  } catch (const Error& e) {
    expect_contains(e.what(), {"\"pi\"", "\"yarn\"", "RoPE frequency rule"});
  }
  try {
    context_methods_to_json({"rerope2"});
    ADD_FAILURE() << "unknown method";
  } catch (const Error& e) {
    expect_contains(e.what(), {"rerope2", "pi, ntk, dynamic_ntk, yarn, llama3, window, sinks"});
  }
}

}  // namespace
}  // namespace gpt
