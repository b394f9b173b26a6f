// Hugging Face model directories (convert/hf.h): the fixtures of
// tests/data/hf/ (tiny random-weight models saved by transformers, with the
// logits transformers computed for fixed tokens; scripts/make_hf_fixtures.py)
// loaded by the project's own code must give the same logits.
#include "convert/hf.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>

#include "config/attention.h"
#include "convert/safetensors.h"
#include "core/check.h"
#include "train/model_io.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

const fs::path kFixtures = fs::path(GPT_SOURCE_DIR) / "tests" / "data" / "hf";

struct Golden {
  std::vector<int32_t> ids;
  std::vector<float> logits;  // (T, V)
  int64_t vocab = 0;
};

Golden read_golden(const fs::path& dir) {
  const SafetensorsModel g((dir / "golden.safetensors").string());
  Golden out;
  for (float v : g.read("input_ids")) out.ids.push_back(static_cast<int32_t>(v));
  out.logits = g.read("logits");
  out.vocab = g.tensor("logits").shape[1];
  return out;
}

// max |ours - theirs| over the positions checked, relative to the largest
// |logit| of the golden ones; every position (prefix by prefix), or only the
// last one where the method reads the sequence's length (dynamic NTK: one
// forward pass of the whole sequence is what transformers computed).
double relative_logit_error(const std::string& name, bool last_only, const fs::path& model_dir = {}) {
  const fs::path dir = model_dir.empty() ? kFixtures / name : model_dir;
  const Golden g = read_golden(kFixtures / name);
  LoadedModel lm = load_model(dir.string());
  EXPECT_EQ(lm.config.model.vocab_size, g.vocab);
  const int T = static_cast<int>(g.ids.size());
  double max_err = 0, max_ref = 0;
  for (float v : g.logits) max_ref = std::max(max_ref, static_cast<double>(std::fabs(v)));
  for (int t = last_only ? T : 1; t <= T; ++t) {
    const std::vector<float> ours = lm.model->next_token_logits(g.ids.data(), t);
    EXPECT_EQ(static_cast<int64_t>(ours.size()), g.vocab);
    for (int64_t v = 0; v < g.vocab; ++v)
      max_err = std::max(max_err, std::fabs(static_cast<double>(ours[v]) - g.logits[(t - 1) * g.vocab + v]));
  }
  const double rel = max_err / max_ref;
  std::cout << "hf fixture " << name << ": T=" << T << " V=" << g.vocab << " max|logit|=" << max_ref
            << " max abs error=" << max_err << " relative=" << rel << "\n";
  return rel;
}

fs::path edited_copy(const std::string& name, const std::function<void(nlohmann::json&)>& edit);
std::string load_refusal(const fs::path& dir);

// float32 on both sides: transformers' eager attention against ours.
constexpr double kTolerance = 1e-4;

TEST(HfModel, Gpt2LogitsMatchTransformers) { EXPECT_LE(relative_logit_error("gpt2", false), kTolerance); }
TEST(HfModel, NeoXParallelLogitsMatchTransformers) { EXPECT_LE(relative_logit_error("neox", false), kTolerance); }
TEST(HfModel, NeoXSequentialLogitsMatchTransformers) {
  EXPECT_LE(relative_logit_error("neox_sequential", false), kTolerance);
}
TEST(HfModel, LlamaLogitsMatchTransformers) { EXPECT_LE(relative_logit_error("llama", false), kTolerance); }
TEST(HfModel, LlamaBf16WeightsLogitsMatchTransformers) {
  EXPECT_LE(relative_logit_error("llama_bf16", false), kTolerance);
}
TEST(HfModel, LinearRopeScalingMatchesTransformers) {
  EXPECT_LE(relative_logit_error("llama_linear", false), kTolerance);
}
TEST(HfModel, DynamicRopeScalingMatchesTransformers) {
  EXPECT_LE(relative_logit_error("llama_dynamic", true), kTolerance);
}
TEST(HfModel, YarnRopeScalingMatchesTransformers) { EXPECT_LE(relative_logit_error("llama_yarn", false), kTolerance); }
TEST(HfModel, YarnMscaleAndBetasMatchTransformers) {
  EXPECT_LE(relative_logit_error("llama_yarn_mscale", false), kTolerance);
}
// YaRN's ramp with its ends unrounded (truncate false) to context.yarn_truncate 0.
TEST(HfModel, YarnUntruncatedMatchesTransformers) {
  EXPECT_LE(relative_logit_error("llama_yarn_exact", false), kTolerance);
  EXPECT_EQ(load_model((kFixtures / "llama_yarn_exact").string()).config.context.yarn_truncate, 0);
}
TEST(HfModel, Llama3RopeScalingMatchesTransformers) { EXPECT_LE(relative_logit_error("llama3", false), kTolerance); }
TEST(HfModel, MistralSlidingWindowMatchesTransformers) {
  EXPECT_LE(relative_logit_error("mistral", false), kTolerance);
}
TEST(HfModel, Qwen2LogitsMatchTransformers) { EXPECT_LE(relative_logit_error("qwen2", false), kTolerance); }
TEST(HfModel, Qwen3LogitsMatchTransformers) { EXPECT_LE(relative_logit_error("qwen3", false), kTolerance); }
// Heads of head_dim channels other than hidden_size / num_attention_heads:
// Qwen3's wider (4 heads of 32 in 64, with grouped keys and QK-norm), Llama's
// narrower (4 of 8).
TEST(HfModel, Qwen3WideHeadsMatchTransformers) {
  EXPECT_LE(relative_logit_error("qwen3_wide_heads", false), kTolerance);
  const LoadedModel lm = load_model((kFixtures / "qwen3_wide_heads").string());
  EXPECT_EQ(lm.config.model.head_size(), 32);
  EXPECT_EQ(lm.config.model.attn_width(), 128);
}
TEST(HfModel, LlamaNarrowHeadsMatchTransformers) {
  EXPECT_LE(relative_logit_error("llama_narrow_heads", false), kTolerance);
  EXPECT_EQ(load_model((kFixtures / "llama_narrow_heads").string()).config.model.head_size(), 8);
}
// Qwen's sliding-window layers: Qwen2's from max_window_layers on (layer 1
// of 2, window 16), Qwen3's as layer_types lists them (layer 0, window 8),
// as a per-layer plan of full and sliding layers.
TEST(HfModel, QwenSlidingLayersMatchTransformers) {
  EXPECT_LE(relative_logit_error("qwen2_sliding", false), kTolerance);
  EXPECT_LE(relative_logit_error("qwen3_sliding", false), kTolerance);
  const ModelConfig m = load_model((kFixtures / "qwen3_sliding").string()).config.model;
  EXPECT_EQ(m.layer_pattern, "SF");
  EXPECT_EQ(m.layer_kinds["S"]["window"], 8);
  EXPECT_EQ(m.layer_kinds["F"]["window"], 0);
  // Every layer sliding: the window mask, as Mistral's.
  const fs::path all = edited_copy("qwen3_sliding", [](nlohmann::json& c) {
    c["layer_types"] = {"sliding_attention", "sliding_attention"};
  });
  const LoadedModel lm = load_model(all.string());
  EXPECT_EQ(lm.config.context.mask, "window");
  EXPECT_EQ(lm.config.context.window, 8);
  EXPECT_EQ(lm.config.model.layer_pattern, "");
  fs::remove_all(all);
}

// Qwen3's config class defaults head_dim to 128, whatever hidden_size and
// num_attention_heads (the other families to hidden_size / heads): a file
// without the key is read so.
TEST(HfModel, Qwen3HeadDimDefaultsTo128) {
  const fs::path dir = edited_copy("qwen3", [](nlohmann::json& c) { c.erase("head_dim"); });
  const std::string msg = load_refusal(dir);
  EXPECT_NE(msg.find("has shape [64, 64] but the model"), std::string::npos) << msg;  // q_proj: 4 heads of 16, not 128
  fs::remove_all(dir);
  const fs::path llama = edited_copy("llama", [](nlohmann::json& c) { c.erase("head_dim"); });
  EXPECT_LE(relative_logit_error("llama", false, llama), kTolerance);
  fs::remove_all(llama);
}

// A copy of fixture `name` under the test's temporary directory with its
// config.json changed by `edit` (and the tensors of `drop` removed).
fs::path edited_copy(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  const fs::path dir = fs::temp_directory_path() / ("gpt_hf_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"model.safetensors", "golden.safetensors"}) fs::copy_file(kFixtures / name / f, dir / f);
  nlohmann::json c;
  std::ifstream(kFixtures / name / "config.json") >> c;
  edit(c);
  std::ofstream(dir / "config.json") << c.dump(2);
  return dir;
}

// The fixtures can fail: the same weights without the method that the
// config states give other logits, far beyond the tolerance.
TEST(HfModel, FixturesTellTheMethodsApart) {
  const std::pair<const char*, std::function<void(nlohmann::json&)>> cases[] = {
      {"mistral", [](nlohmann::json& c) { c["sliding_window"] = nullptr; }},
      {"llama_yarn", [](nlohmann::json& c) { c["rope_parameters"]["attention_factor"] = 1.0; }},
      {"llama3", [](nlohmann::json& c) { c["rope_parameters"]["high_freq_factor"] = 8.0; }},
      {"neox", [](nlohmann::json& c) { c["use_parallel_residual"] = false; }},
      {"llama", [](nlohmann::json& c) { c["rms_norm_eps"] = 1e-1; }},
      {"qwen2_sliding", [](nlohmann::json& c) { c["layer_types"] = {"full_attention", "full_attention"}; }},
      {"llama_yarn_exact", [](nlohmann::json& c) { c["rope_parameters"]["truncate"] = true; }},
      {"qwen3_sliding", [](nlohmann::json& c) { c["layer_types"] = {"full_attention", "sliding_attention"}; }},
  };
  for (const auto& [name, edit] : cases) {
    const fs::path dir = edited_copy(name, edit);
    EXPECT_GT(relative_logit_error(name, false, dir), 1e-2) << name;
    fs::remove_all(dir);
  }
}

std::string load_refusal(const fs::path& dir) {
  try {
    load_model(dir.string());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// What the project does not implement is refused by name, never ignored.
TEST(HfModel, RefusesWhatItDoesNotImplementByName) {
  struct Case {
    const char* fixture;
    std::function<void(nlohmann::json&)> edit;
    const char* expect;
  };
  const Case cases[] = {
      {"llama", [](nlohmann::json& c) { c["model_type"] = "phi3"; }, "model_type \"phi3\" is not implemented"},
      {"llama", [](nlohmann::json& c) { c["foo_bar"] = 3; }, "key 'foo_bar' = 3 is not implemented"},
      {"llama", [](nlohmann::json& c) { c["quantization_config"] = {{"bits", 4}}; }, "quantization_config"},
      {"llama",
       [](nlohmann::json& c) {
         c["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 10000.0}, {"short_factor", {1.0}}};
       },
       "rope_type \"longrope\" is not implemented"},
      {"llama_yarn", [](nlohmann::json& c) { c["rope_parameters"]["extra"] = 1; }, "key 'extra'"},
      {"neox", [](nlohmann::json& c) { c["head_dim"] = 8; }, "key 'head_dim' = 8 is not implemented"},
      {"qwen2", [](nlohmann::json& c) { c["layer_types"][1] = "sliding_attention"; },
       "has sliding_attention layers but use_sliding_window is false"},
      {"qwen2", [](nlohmann::json& c) { c["layer_types"][1] = "chunked_attention"; },
       "layer_types entry \"chunked_attention\" is not implemented"},
      {"qwen2", [](nlohmann::json& c) { c["layer_types"] = {"full_attention"}; }, "must list one kind per layer"},
      {"llama", [](nlohmann::json& c) { c["hidden_act"] = "gelu"; }, "'hidden_act' = \"gelu\""},
      {"llama", [](nlohmann::json& c) { c["tie_word_embeddings"] = true; }, "differs from 'model.embed_tokens.weight'"},
      {"qwen2", [](nlohmann::json& c) { c["tie_word_embeddings"] = false; }, "has no tensor 'lm_head.weight'"},
      {"llama", [](nlohmann::json& c) { c["num_key_value_heads"] = 4; },
       "tensor 'model.layers.0.self_attn.k_proj.weight' (for qkvw) has shape [32, 64] but the model"},
      {"neox", [](nlohmann::json& c) { c["rope_parameters"]["partial_rotary_factor"] = 0.2; }, "rotates 3 of 16"},
      {"gpt2", [](nlohmann::json& c) { c["scale_attn_by_inverse_layer_idx"] = true; }, "logits divided by the layer"},
  };
  for (const Case& c : cases) {
    const fs::path dir = edited_copy(c.fixture, c.edit);
    const std::string msg = load_refusal(dir);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.fixture << ": " << msg;
    EXPECT_NE(msg.find(dir.string()), std::string::npos) << "the message names the model: " << msg;
    fs::remove_all(dir);
  }
}

// A tensor of the file that the described model does not use is refused.
TEST(HfModel, RefusesTensorsTheModelDoesNotUse) {
  const fs::path dir = edited_copy("llama", [](nlohmann::json&) {});
  const SafetensorsModel st((kFixtures / "llama").string());
  std::vector<std::vector<float>> values;
  std::vector<StWriteTensor> tensors;
  const std::vector<std::string> names = st.names();
  for (const std::string& n : names) values.push_back(st.read(n));
  const std::vector<float> extra(64, 1.0f);
  for (size_t i = 0; i < names.size(); ++i) tensors.push_back({names[i], st.tensor(names[i]).shape, values[i].data()});
  tensors.push_back({"model.layers.0.self_attn.extra.weight", {64}, extra.data()});
  write_safetensors((dir / "model.safetensors").string(), tensors, StDtype::F32);
  const std::string msg = load_refusal(dir);
  EXPECT_NE(msg.find("tensor 'model.layers.0.self_attn.extra.weight' of the file is not used"), std::string::npos)
      << msg;
  fs::remove_all(dir);
}

// Import, export (--to-hf), import again: the same tensors bit for bit, the
// same config, and so the golden logits (scripts/check_hf_export.py checks the
// exported directories with transformers itself).
TEST(HfModel, ExportRoundTripsEveryFamily) {
  for (const char* name : {"gpt2", "neox", "neox_sequential", "llama", "llama_yarn", "llama_yarn_mscale", "llama3",
                           "llama_linear", "llama_dynamic", "mistral", "qwen2", "qwen3", "qwen3_wide_heads",
                           "llama_narrow_heads", "qwen2_sliding", "qwen3_sliding", "llama_yarn_exact"}) {
    const fs::path out = fs::temp_directory_path() / ("gpt_hf_export_" + std::string(name) + "_" +
                                                      std::to_string(::getpid()));
    fs::remove_all(out);
    const HfModel in((kFixtures / name).string());
    const Checkpoint ckpt = in.to_checkpoint();
    const HfExport e = export_hf(ckpt, name, out.string(), false);
    EXPECT_EQ(e.model_type, in.model_type()) << name;
    const HfModel back(out.string());
    EXPECT_EQ(config_to_json(back.config())["model"], config_to_json(in.config())["model"]) << name;
    EXPECT_EQ(config_to_json(back.config())["context"], config_to_json(in.config())["context"]) << name;
    for (const std::string& t : in.weights().names())
      if (back.weights().has(t)) { EXPECT_EQ(back.weights().read(t), in.weights().read(t)) << name << " " << t; }
    EXPECT_EQ(back.weights().names().size(), in.weights().names().size()) << name;
    const Checkpoint again = back.to_checkpoint();
    for (const CheckpointTensor& t : ckpt.tensors) EXPECT_EQ(again.tensor(t.name).data, t.data) << name << " " << t.name;
    const bool dynamic = std::string(name) == "llama_dynamic";
    EXPECT_LE(relative_logit_error(name, dynamic, out), kTolerance) << name;
    fs::remove_all(out);
  }
}

// A window mask of context.window 0 runs with the window model.context; the
// export writes that, not 0 (which transformers would read as no window).
TEST(HfModel, ExportWritesTheWindowAsItRuns) {
  Checkpoint c = HfModel((kFixtures / "mistral").string()).to_checkpoint();
  c.meta["config"]["context"]["window"] = 0;
  const fs::path out = fs::temp_directory_path() / ("gpt_hf_window_" + std::to_string(::getpid()));
  fs::remove_all(out);
  export_hf(c, "mistral.bin", out.string(), false);
  nlohmann::json j;
  std::ifstream(out / "config.json") >> j;
  EXPECT_EQ(j["sliding_window"], c.meta["config"]["model"]["context"]);
  fs::remove_all(out);
}

TEST(HfModel, ExportRefusesWhatNoFamilyHolds) {
  const Checkpoint base = HfModel((kFixtures / "llama").string()).to_checkpoint();
  const std::pair<std::function<void(nlohmann::json&)>, const char*> cases[] = {
      {[](nlohmann::json& c) { c["attention"]["preset"] = "lssa"; }, "plain softmax"},
      {[](nlohmann::json& c) { c["model"]["rope_pairing"] = "interleaved"; }, "interleaved"},
      {[](nlohmann::json& c) { c["context"]["remap"] = "rerope"; }, "no Hugging Face config key"},
      {[](nlohmann::json& c) { c["context"]["rope_scaling"] = "yarn"; }, "fixed factor"},
      {[](nlohmann::json& c) { c["context"]["rope_scaling"] = "ntk"; c["context"]["factor"] = 2.0; },
       "no Hugging Face rope_type"},
      {[](nlohmann::json& c) { c["model"]["mlp"] = "relu2"; c["model"]["mlp_hidden"] = 64; }, "none of the"},
      {[](nlohmann::json& c) {
         c["model"]["layer_pattern"] = "LG";
         c["model"]["layer_kinds"] = {{"L", {{"window", 8}}}, {"G", {{"window", 0}}}};
       },
       "has no llama form; only Qwen2's and Qwen3's layer_types"},
      {[](nlohmann::json& c) { c["model"]["p_rope"] = 0.5; }, "p-RoPE (model.p_rope 0.5) has no form"},
      {[](nlohmann::json& c) {
         c["train"]["length_start"] = c["model"]["context"].get<int>() / 2;
         c["train"]["length_steps"] = 10;
         c["train"]["grow_yarn"] = "on";
       },
       "RoPE frequencies grown by train.grow_yarn have no form"},
  };
  for (const auto& [edit, expect] : cases) {
    Checkpoint c = base;
    edit(c.meta["config"]);
    try {
      export_hf(c, "edited.bin", (fs::temp_directory_path() / "gpt_hf_refused").string(), false);
      ADD_FAILURE() << "exported: " << expect;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("edited.bin"), std::string::npos) << e.what();
    }
  }
  fs::remove_all(fs::temp_directory_path() / "gpt_hf_refused");
  // A Qwen plan holds full and sliding layers of one window, nothing else.
  const Checkpoint qwen = HfModel((kFixtures / "qwen3_sliding").string()).to_checkpoint();
  const std::pair<std::function<void(nlohmann::json&)>, const char*> qwen_cases[] = {
      {[](nlohmann::json& k) { k["S"]["position"] = "none"; }, "is not one of Qwen's layer_types"},
      {[](nlohmann::json& k) { k["F"]["window"] = 4; }, "share one sliding_window"},
  };
  for (const auto& [edit, expect] : qwen_cases) {
    Checkpoint c = qwen;
    edit(c.meta["config"]["model"]["layer_kinds"]);
    try {
      export_hf(c, "qwen.bin", (fs::temp_directory_path() / "gpt_hf_refused").string(), false);
      ADD_FAILURE() << "exported: " << expect;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
  }
  // GPT-NeoX's heads are hidden_size / num_attention_heads wide, always.
  Checkpoint neox = HfModel((kFixtures / "neox").string()).to_checkpoint();
  neox.meta["config"]["model"]["head_dim"] = 8;
  try {
    export_hf(neox, "neox.bin", (fs::temp_directory_path() / "gpt_hf_refused").string(), false);
    ADD_FAILURE() << "exported GPT-NeoX with heads of 8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the gpt_neox family's heads are n_embd / n_head wide"), std::string::npos)
        << e.what();
  }
  fs::remove_all(fs::temp_directory_path() / "gpt_hf_refused");
}

// train.init_from a Hugging Face directory: a model of the same block with
// another attention variant takes every tensor of the same name and shape
// (ssmax adds its learned scales, which keep their initialisation); with the
// file's own attention it computes the golden logits.
TEST(HfModel, InitFromCopiesTheTensorsOfTheSameNameAndShape) {
  const HfModel hf((kFixtures / "llama").string());
  Config ssmax = hf.config();
  ssmax.attention.preset = "ssmax";
  const AttentionSpec spec = resolve_attention(ssmax);
  auto model = make_model(ssmax.model, spec, "cpu", "fp32", "fp32");
  model->init(7);
  const InitFromSummary sum = init_from_checkpoint(*model, hf.dir());
  EXPECT_EQ(sum.kept, (std::vector<std::string>{"attnscale"}));
  EXPECT_EQ(sum.copied.size(), ParamLayout(hf.config().model).specs.size());

  auto plain = make_model(hf.config().model, resolve_attention(hf.config()), "cpu", "fp32", "fp32");
  plain->init(7);
  init_from_checkpoint(*plain, hf.dir());
  const Golden g = read_golden(kFixtures / "llama");
  const std::vector<float> ours = plain->next_token_logits(g.ids.data(), static_cast<int>(g.ids.size()));
  const size_t last = (g.ids.size() - 1) * static_cast<size_t>(g.vocab);
  for (int64_t v = 0; v < g.vocab; ++v) EXPECT_NEAR(ours[v], g.logits[last + v], 1e-4) << v;
}

}  // namespace
}  // namespace gpt
