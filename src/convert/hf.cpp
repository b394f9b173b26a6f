// Hugging Face model directories: config.json mapping and the weight layouts
// of each family (hf.h; the tables are described in docs/hf_models.md).
#include "convert/hf.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <spdlog/spdlog.h>

#include "config/attention.h"
#include "core/check.h"
#include "core/files.h"
#include "core/json.h"
#include "model/block_parts.h"
#include "train/model_io.h"

namespace fs = std::filesystem;

namespace gpt {

namespace {

enum class Family { Gpt2, NeoX, Llama, Mistral, Qwen2, Qwen3 };

struct FamilyInfo {
  const char* model_type;
  Family family;
  const char* block;  // the block preset (docs/blocks.md)
};
constexpr FamilyInfo kFamilies[] = {{"gpt2", Family::Gpt2, "gpt2"},        {"gpt_neox", Family::NeoX, "neox"},
                                    {"llama", Family::Llama, "llama"},     {"mistral", Family::Mistral, "llama"},
                                    {"qwen2", Family::Qwen2, "qwen2"},     {"qwen3", Family::Qwen3, "qwen3"}};

std::string family_list() {
  std::string s;
  for (const FamilyInfo& f : kFamilies) s += std::string(s.empty() ? "" : ", ") + f.model_type;
  return s;
}

// config.json keys that do not change what the model computes in
// evaluation or fine-tuning here: metadata, token ids (the tokenizer's
// business), dropout rates (the project trains without dropout), the
// initialiser's spread, inference-cache switches, and GPT-2's
// sequence-summary head (a classifier head that is not loaded).
constexpr const char* kInertKeys[] = {
    "architectures", "transformers_version", "dtype", "torch_dtype", "_name_or_path", "bos_token_id",
    "eos_token_id", "pad_token_id", "sep_token_id", "initializer_range", "use_cache", "attention_dropout",
    "hidden_dropout", "classifier_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_type",
    "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout", "is_decoder",
    "add_cross_attention", "tokenizer_class", "output_attentions", "output_hidden_states", "return_dict",
    "id2label", "label2id", "problem_type", "task_specific_params", "reorder_and_upcast_attn",
    "tie_encoder_decoder", "chunk_size_feed_forward", "model_type"};

// The letters of a per-layer plan made from Qwen's layer_types (and written
// back by the export): full attention and a sliding window.
constexpr char kFullLayer = 'F', kSlidingLayer = 'S';

// Reads config.json keys, remembering which were read, so that the keys
// nobody read can be refused by name at the end.
class Keys {
 public:
  Keys(const nlohmann::json& j, std::string where) : j_(j), where_(std::move(where)) {}
  bool has(const std::string& k) const { return j_.contains(k) && !j_[k].is_null(); }
  const nlohmann::json& raw(const std::string& k) {
    used_.insert(k);
    return j_[k];
  }
  double number(const std::string& k, double def) {
    used_.insert(k);
    if (!has(k)) return def;
    GPT_CHECK(j_[k].is_number(), where_, ": key '", k, "' = ", j_[k].dump(), " must be a number");
    return j_[k].get<double>();
  }
  int integer(const std::string& k, int def) {
    const double v = number(k, def);
    GPT_CHECK(v == std::floor(v) && v >= 0 && v <= 1e9, where_, ": key '", k, "' = ", j_[k].dump(),
              " must be a non-negative integer");
    return static_cast<int>(v);
  }
  bool boolean(const std::string& k, bool def) {
    used_.insert(k);
    if (!has(k)) return def;
    GPT_CHECK(j_[k].is_boolean(), where_, ": key '", k, "' = ", j_[k].dump(), " must be true or false");
    return j_[k].get<bool>();
  }
  std::string string(const std::string& k, const std::string& def) {
    used_.insert(k);
    if (!has(k)) return def;
    GPT_CHECK(j_[k].is_string(), where_, ": key '", k, "' = ", j_[k].dump(), " must be a string");
    return j_[k].get<std::string>();
  }
  // The key must hold `want` (or be absent/null) because the project
  // implements only that; `why` says what another value would ask for.
  template <typename T>
  void require(const std::string& k, const T& want, const std::string& why) {
    used_.insert(k);
    if (!has(k)) return;
    GPT_CHECK(j_[k] == nlohmann::json(want), where_, ": key '", k, "' = ", j_[k].dump(), " is not implemented (",
              why, "); this project implements ", nlohmann::json(want).dump());
  }
  void finish(const std::string& family) const {
    for (const auto& [k, v] : j_.items()) {
      if (used_.count(k)) continue;
      bool inert = false;
      for (const char* s : kInertKeys) inert = inert || k == s;
      if (inert) continue;
      fail(where_, ": key '", k, "' = ", v.dump(), " is not implemented by this project's ", family,
           " import (docs/hf_models.md lists the keys it maps and the ones that do not change the model); "
           "it is refused rather than ignored");
    }
  }

 private:
  const nlohmann::json& j_;
  std::string where_;
  std::set<std::string> used_;
};

// 0.1·m·ln s + 1 (1 for s <= 1): YaRN's mscale, as transformers computes it.
double yarn_mscale(double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * std::log(s) + 1.0; }

// Qwen2's and Qwen3's sliding-window layers, as their config classes decide
// them: sliding_window counts only with use_sliding_window; layer_types, when
// given, names each layer's kind, else the layers from max_window_layers on
// slide. All layers sliding: the window mask (as Mistral's); some: a
// per-layer plan of full (F) and sliding (S) layers (docs/hf_models.md §3).
void qwen_sliding_layers(Keys& k, const std::string& where, nlohmann::json& model, nlohmann::json& context) {
  const int L = model["n_layer"];
  const bool use = k.boolean("use_sliding_window", false);
  const int window = k.integer("sliding_window", 0), from = k.integer("max_window_layers", 28);
  std::string letters;
  if (k.has("layer_types")) {
    const nlohmann::json& lt = k.raw("layer_types");
    GPT_CHECK(lt.is_array() && static_cast<int>(lt.size()) == L, where, ": layer_types ", lt.dump(),
              " must list one kind per layer (num_hidden_layers = ", L, ")");
    for (const nlohmann::json& v : lt) {
      GPT_CHECK(v == "full_attention" || v == "sliding_attention", where, ": layer_types entry ", v.dump(),
                " is not implemented (full_attention, sliding_attention)");
      letters += v == "full_attention" ? kFullLayer : kSlidingLayer;
    }
  } else {
    k.raw("layer_types");
    for (int l = 0; l < L; ++l) letters += use && window > 0 && l >= from ? kSlidingLayer : kFullLayer;
  }
  if (letters.find(kSlidingLayer) == std::string::npos) return;
  GPT_CHECK(use && window > 0, where, ": layer_types has sliding_attention layers but ",
            use ? "sliding_window is not set" : "use_sliding_window is false", "; they would have no window");
  if (letters.find(kFullLayer) == std::string::npos) {
    context["mask"] = "window", context["window"] = window;
    return;
  }
  model["layer_pattern"] = letters;
  model["layer_kinds"] = {{std::string(1, kFullLayer), {{"window", 0}}},
                          {std::string(1, kSlidingLayer), {{"window", window}}}};
}

// RoPE: θ, the rotated fraction, and the scaling of rope_parameters /
// rope_scaling mapped onto model.rope_* and context.*; returns model.context
// (the original length for yarn and llama3, else max_position_embeddings).
int map_rope(Keys& k, const std::string& where, Family fam, nlohmann::json& model, nlohmann::json& context,
             int max_pos, int context_override) {
  nlohmann::json params = nlohmann::json::object();
  const char* params_key = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!k.has(key)) {
      k.raw(key);
      continue;
    }
    const nlohmann::json& p = k.raw(key);
    GPT_CHECK(p.is_object(), where, ": key '", key, "' must be an object");
    GPT_CHECK(!params_key, where, ": both rope_parameters and rope_scaling are set; a file states one");
    GPT_CHECK(p.empty() || !p.begin()->is_object(), where, ": key '", key,
              "' holds RoPE parameters per layer type; this project runs one RoPE for every layer");
    params = p, params_key = key;
  }
  const std::string pw = where + (params_key ? std::string(": ") + params_key : std::string());
  Keys r(params, pw);
  double theta = r.number("rope_theta", 0);
  if (theta == 0) theta = k.number(fam == Family::NeoX ? "rotary_emb_base" : "rope_theta", 10000.0);
  else k.number(fam == Family::NeoX ? "rotary_emb_base" : "rope_theta", 0);
  GPT_CHECK(theta > 1, where, ": the RoPE base ", theta, " must be > 1");
  model["rope_theta"] = theta;
  double fraction = r.number("partial_rotary_factor", 0);
  if (fam == Family::NeoX) {
    const double top = k.number("partial_rotary_factor", 0), pct = k.number("rotary_pct", 0);
    if (fraction == 0) fraction = top > 0 ? top : pct > 0 ? pct : 0.25;
    // transformers rotates int(D · fraction) channels; the project's
    // rope_fraction takes the even part of f·D, so an odd count is refused.
    const int D = model["n_embd"].get<int>() / model["n_head"].get<int>();
    const int rot = static_cast<int>(D * fraction);
    GPT_CHECK(rot % 2 == 0 && rot >= 2, where, ": rotary_pct ", fraction, " rotates ", rot, " of ", D,
              " head channels; RoPE rotates an even number >= 2 of them");
    model["rope_fraction"] = static_cast<double>(rot) / D;
  } else {
    k.require("partial_rotary_factor", 1.0, "the family rotates every channel of a head");
    GPT_CHECK(fraction == 0 || fraction == 1, pw, ": partial_rotary_factor ", fraction,
              " is not implemented for this family (it rotates every channel)");
  }
  std::string type = r.string("rope_type", "");
  const std::string legacy = r.string("type", "");
  if (type.empty()) type = legacy.empty() ? "default" : legacy;
  int n = context_override > 0 ? context_override : max_pos;
  auto original = [&] {
    // transformers: rope_parameters' value, else the top-level key (Phi-3
    // style), else max_position_embeddings.
    int o = r.integer("original_max_position_embeddings", 0);
    if (o == 0) o = k.integer("original_max_position_embeddings", 0);
    return o > 0 ? o : max_pos;
  };
  if (type == "default") {
    k.integer("original_max_position_embeddings", 0);
  } else {
    if (type == "linear") {
      context["rope_scaling"] = "pi";
      context["factor"] = r.number("factor", 0);
      k.integer("original_max_position_embeddings", 0);
    } else if (type == "dynamic") {
      context["rope_scaling"] = "dynamic_ntk";
      context["dynamic_alpha"] = r.number("factor", 0);
      k.integer("original_max_position_embeddings", 0);
    } else if (type == "yarn") {
      n = original();
      double s = r.number("factor", 0);
      if (s == 0) s = static_cast<double>(max_pos) / n;
      context["rope_scaling"] = "yarn";
      context["factor"] = s;
      const double bf = r.number("beta_fast", 0), bs = r.number("beta_slow", 0);
      context["beta_fast"] = bf > 0 ? bf : 32.0;
      context["beta_slow"] = bs > 0 ? bs : 1.0;
      double t = r.number("attention_factor", 0);
      const double ms = r.number("mscale", 0), msa = r.number("mscale_all_dim", 0);
      if (t == 0) t = ms != 0 && msa != 0 ? yarn_mscale(s, ms) / yarn_mscale(s, msa) : yarn_mscale(s, 1.0);
      context["attn_factor"] = t;
      context["yarn_truncate"] = r.boolean("truncate", true) ? 1 : 0;
    } else if (type == "llama3") {
      n = original();
      context["rope_scaling"] = "llama3";
      context["factor"] = r.number("factor", 0);
      context["low_freq"] = r.number("low_freq_factor", 1.0);
      context["high_freq"] = r.number("high_freq_factor", 4.0);
    } else {
      fail(pw, ": rope_type \"", type,
           "\" is not implemented (this project maps default, linear, dynamic, yarn and llama3)");
    }
    GPT_CHECK(context_override == 0, where, ": rope_type \"", type,
              "\" scales RoPE relative to the model's own trained length; it cannot be evaluated with another 1x "
              "length (--hf-context)");
    if (context.contains("factor"))
      GPT_CHECK(context["factor"].get<double>() >= 1, pw, ": factor ", context["factor"].dump(), " must be >= 1");
    if (context.contains("dynamic_alpha"))
      GPT_CHECK(context["dynamic_alpha"].get<double>() >= 1, pw, ": factor ", context["dynamic_alpha"].dump(),
                " must be >= 1");
  }
  r.finish(std::string("rope_type \"") + type + "\"");
  return n;
}

// GPT-2, GPT-NeoX and the Llama-like families' config.json onto the project's.
Config map_config(const nlohmann::json& hf, const std::string& dir, const HfOpenOptions& opt, Family& fam,
                  std::string& model_type) {
  const std::string where = "Hugging Face model '" + dir + "': config.json";
  GPT_CHECK(hf.is_object(), where, " is not a JSON object");
  Keys k(hf, where);
  model_type = k.string("model_type", "");
  const FamilyInfo* info = nullptr;
  for (const FamilyInfo& f : kFamilies)
    if (model_type == f.model_type) info = &f;
  GPT_CHECK(info, where, ": model_type \"", model_type, "\" is not implemented; this project loads ", family_list());
  fam = info->family;
  nlohmann::json model = {{"block", info->block}, {"vocab_pad_multiple", 64}};
  nlohmann::json context = nlohmann::json::object();
  nlohmann::json eval = nlohmann::json::object();
  k.require("quantization_config", nullptr, "quantised weights");
  int max_pos = 0, n_ctx = 0;
  if (fam == Family::Gpt2) {
    model["n_embd"] = k.integer("n_embd", 768);
    model["n_layer"] = k.integer("n_layer", 12);
    model["n_head"] = k.integer("n_head", 12);
    model["vocab_size"] = k.integer("vocab_size", 50257);
    max_pos = k.integer("n_positions", 1024);
    GPT_CHECK(k.integer("n_ctx", max_pos) == max_pos, where, ": n_ctx differs from n_positions");
    model["position"] = "learned";
    model["max_position"] = max_pos;
    const int inner = k.integer("n_inner", 0);
    if (inner > 0) model["mlp_hidden"] = inner;
    const std::string act = k.string("activation_function", "gelu_new");
    GPT_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu", where, ": activation_function \"",
              act, "\" is not implemented (gelu_new and gelu_pytorch_tanh: GELU's tanh form; gelu: the exact one)");
    model["mlp"] = act == "gelu" ? "gelu_erf" : "gelu";
    k.require("layer_norm_epsilon", 1e-5, "the project's LayerNorm uses eps 1e-5");
    k.require("scale_attn_weights", true, "unscaled attention logits");
    k.require("scale_attn_by_inverse_layer_idx", false, "logits divided by the layer index");
    model["head"] = k.boolean("tie_word_embeddings", true) ? "tied" : "untied";
    n_ctx = opt.context > 0 ? opt.context : max_pos;
    GPT_CHECK(n_ctx <= max_pos, where, ": --hf-context ", n_ctx, " exceeds the learned position table (n_positions = ",
              max_pos, ")");
    eval["multiples"] = {1};  // learned positions end at n_positions
  } else {
    model["n_embd"] = k.integer("hidden_size", 0);
    model["n_layer"] = k.integer("num_hidden_layers", 0);
    model["n_head"] = k.integer("num_attention_heads", 0);
    model["vocab_size"] = k.integer("vocab_size", 0);
    model["mlp_hidden"] = k.integer("intermediate_size", 0);
    for (const char* key : {"n_embd", "n_layer", "n_head", "vocab_size", "mlp_hidden"})
      GPT_CHECK(model[key].get<int>() > 0, where, ": the model's size keys (hidden_size, num_hidden_layers, "
                "num_attention_heads, vocab_size, intermediate_size) must be set and > 0");
    const int C = model["n_embd"], H = model["n_head"];
    // A head's width: head_dim where the family reads it (Qwen3's class
    // defaults it to 128, the others to hidden_size / num_attention_heads;
    // GPT-NeoX always divides).
    const int even = C % H == 0 ? C / H : 0;
    const int head_dim = fam == Family::NeoX ? even : k.integer("head_dim", fam == Family::Qwen3 ? 128 : even);
    GPT_CHECK(head_dim > 0, where, ": hidden_size ", C, " is not divisible by num_attention_heads ", H,
              fam == Family::NeoX ? "" : " and no head_dim is given");
    if (head_dim != even) model["head_dim"] = head_dim;
    max_pos = k.integer("max_position_embeddings", 2048);
    GPT_CHECK(max_pos >= 2, where, ": max_position_embeddings ", max_pos, " must be >= 2");
    model["position"] = "rope";
    const bool tied = k.boolean("tie_word_embeddings", false);
    model["head"] = tied ? "tied" : "untied";
    if (fam == Family::NeoX) {
      const std::string act = k.string("hidden_act", "gelu");
      GPT_CHECK(act == "gelu" || act == "gelu_new" || act == "gelu_pytorch_tanh", where, ": hidden_act \"", act,
                "\" is not implemented (gelu: exact GELU; gelu_new and gelu_pytorch_tanh: its tanh form)");
      model["mlp"] = act == "gelu" ? "gelu_erf" : "gelu";
      k.require("layer_norm_eps", 1e-5, "the project's LayerNorm uses eps 1e-5");
      model["residual"] = k.boolean("use_parallel_residual", true) ? "parallel" : "sequential";
      k.require("attention_bias", true, "GPT-NeoX without attention biases");
    } else {
      k.require("hidden_act", "silu", "the SwiGLU MLP of these families gates with SiLU");
      model["norm_eps"] = k.number("rms_norm_eps", 1e-6);
      model["n_kv_head"] = k.integer("num_key_value_heads", H);
      k.require("pretraining_tp", 1, "tensor-parallel slicing of the projections at pretraining");
      k.require("mlp_bias", false, "biases in the MLP");
      k.require("attention_bias", fam == Family::Qwen2, fam == Family::Qwen2 ? "Qwen2 has q/k/v biases only"
                                                                              : "biases in the attention projections");
      if (fam == Family::Mistral) {
        const int w = k.integer("sliding_window", 0);
        if (w > 0) context["mask"] = "window", context["window"] = w;
      }
      if (fam == Family::Qwen2 || fam == Family::Qwen3) qwen_sliding_layers(k, where, model, context);
    }
    n_ctx = map_rope(k, where, fam, model, context, max_pos, opt.context);
  }
  k.finish(model_type);
  model["context"] = n_ctx;
  const int multiple_max = eval.contains("multiples") ? 1 : 16;
  eval["span"] = static_cast<int64_t>(multiple_max) * n_ctx;
  eval["tokens"] = std::max<int64_t>(131072, static_cast<int64_t>(multiple_max) * n_ctx);
  nlohmann::json j = {{"model", model}, {"eval", eval}};
  // Its own tokenizer where the directory has one (docs/hf_models.md §7).
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "tokenizer.json", ec)) j["data"] = {{"tokenizer", "hf:" + dir}};
  if (!context.empty()) j["context"] = context;
  try {
    return config_from_json(j);
  } catch (const Error& e) {
    fail(where, " maps to a model this project cannot hold: ", e.what());
  }
}

// Tensors of a file that are buffers of the modeling code, not parameters:
// GPT-2's causal-mask buffers and older files' RoPE frequencies.
bool is_buffer(const std::string& name) {
  for (const char* end : {".attn.bias", ".attn.masked_bias", ".attention.bias", ".attention.masked_bias",
                          ".rotary_emb.inv_freq"}) {
    const size_t n = std::strlen(end);
    if (name.size() >= n && name.compare(name.size() - n, n, end) == 0) return true;
  }
  return false;
}

// How a file tensor becomes rows of ours: as it is, transposed (GPT-2's
// Conv1D (in, out) weights), or regrouped (GPT-NeoX's fused qkv, whose rows
// are (head, [q, k, v], channel) where ours are ([q, k, v], head, channel)).
enum class Xf { Copy, Transpose, NeoxQkv };

// One file tensor of a parameter's layer slice: its name, transform, the
// rows of the slice it fills (in order) and its shape in the file.
struct Piece {
  std::string name;
  Xf xf = Xf::Copy;
  int64_t rows = 0;
  std::vector<int64_t> file_shape;
};

// A parameter's layer slice as (rows, cols): cols the product of the
// dimensions after the first.
struct SliceShape {
  int64_t rows = 1, cols = 1;
  bool matrix = false;
};
SliceShape slice_shape(const ParamSpec& spec) {
  const size_t first = spec.per_layer ? 1 : 0;
  SliceShape s;
  if (spec.shape.size() > first) s.rows = spec.shape[first];
  for (size_t d = first + 1; d < spec.shape.size(); ++d) s.cols *= spec.shape[d];
  s.matrix = spec.shape.size() > first + 1;
  return s;
}

// The file tensors of parameter `spec`'s slice for layer `layer`
// (docs/hf_models.md §5): the one table that loading and --to-hf read.
std::vector<Piece> pieces(const std::string& model_type, const std::string& prefix, const ModelConfig& m,
                          const ParamSpec& spec, int layer) {
  const std::string& n = spec.name;
  const std::string i = std::to_string(layer);
  std::vector<std::pair<std::string, Xf>> names;
  if (model_type == "gpt2") {
    const std::string P = prefix, lp = P + "h." + i + ".";
    static const std::map<std::string, std::pair<std::string, Xf>> per_layer = {
        {"ln1w", {"ln_1.weight", Xf::Copy}},
        {"ln1b", {"ln_1.bias", Xf::Copy}},
        {"qkvw", {"attn.c_attn.weight", Xf::Transpose}},
        {"qkvb", {"attn.c_attn.bias", Xf::Copy}},
        {"attprojw", {"attn.c_proj.weight", Xf::Transpose}},
        {"attprojb", {"attn.c_proj.bias", Xf::Copy}},
        {"ln2w", {"ln_2.weight", Xf::Copy}},
        {"ln2b", {"ln_2.bias", Xf::Copy}},
        {"fcw", {"mlp.c_fc.weight", Xf::Transpose}},
        {"fcb", {"mlp.c_fc.bias", Xf::Copy}},
        {"fcprojw", {"mlp.c_proj.weight", Xf::Transpose}},
        {"fcprojb", {"mlp.c_proj.bias", Xf::Copy}}};
    static const std::map<std::string, std::string> global = {
        {"wte", "wte.weight"}, {"wpe", "wpe.weight"}, {"lnfw", "ln_f.weight"}, {"lnfb", "ln_f.bias"}};
    if (spec.per_layer && per_layer.count(n)) names = {{lp + per_layer.at(n).first, per_layer.at(n).second}};
    if (!spec.per_layer && global.count(n)) names = {{P + global.at(n), Xf::Copy}};
    if (n == "lmhead") names = {{"lm_head.weight", Xf::Copy}};
  } else if (model_type == "gpt_neox") {
    const std::string P = "gpt_neox.", lp = P + "layers." + i + ".";
    static const std::map<std::string, std::pair<std::string, Xf>> per_layer = {
        {"ln1w", {"input_layernorm.weight", Xf::Copy}},
        {"ln1b", {"input_layernorm.bias", Xf::Copy}},
        {"qkvw", {"attention.query_key_value.weight", Xf::NeoxQkv}},
        {"qkvb", {"attention.query_key_value.bias", Xf::NeoxQkv}},
        {"attprojw", {"attention.dense.weight", Xf::Copy}},
        {"attprojb", {"attention.dense.bias", Xf::Copy}},
        {"ln2w", {"post_attention_layernorm.weight", Xf::Copy}},
        {"ln2b", {"post_attention_layernorm.bias", Xf::Copy}},
        {"fcw", {"mlp.dense_h_to_4h.weight", Xf::Copy}},
        {"fcb", {"mlp.dense_h_to_4h.bias", Xf::Copy}},
        {"fcprojw", {"mlp.dense_4h_to_h.weight", Xf::Copy}},
        {"fcprojb", {"mlp.dense_4h_to_h.bias", Xf::Copy}}};
    static const std::map<std::string, std::string> global = {{"wte", "gpt_neox.embed_in.weight"},
                                                              {"lnfw", "gpt_neox.final_layer_norm.weight"},
                                                              {"lnfb", "gpt_neox.final_layer_norm.bias"},
                                                              {"lmhead", "embed_out.weight"}};
    if (spec.per_layer && per_layer.count(n)) names = {{lp + per_layer.at(n).first, per_layer.at(n).second}};
    if (!spec.per_layer && global.count(n)) names = {{global.at(n), Xf::Copy}};
  } else {
    const std::string P = "model.", lp = P + "layers." + i + ".";
    static const std::map<std::string, std::vector<std::string>> per_layer = {
        {"ln1w", {"input_layernorm.weight"}},
        {"qkvw", {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}},
        {"qkvb", {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"}},
        {"attprojw", {"self_attn.o_proj.weight"}},
        {"ln2w", {"post_attention_layernorm.weight"}},
        {"fcw", {"mlp.gate_proj.weight", "mlp.up_proj.weight"}},  // swiglu: [gate | up]
        {"fcprojw", {"mlp.down_proj.weight"}},
        {"qnormw", {"self_attn.q_norm.weight"}},
        {"knormw", {"self_attn.k_norm.weight"}}};
    static const std::map<std::string, std::string> global = {
        {"wte", "model.embed_tokens.weight"}, {"lnfw", "model.norm.weight"}, {"lmhead", "lm_head.weight"}};
    if (spec.per_layer && per_layer.count(n))
      for (const std::string& part : per_layer.at(n)) names.emplace_back(lp + part, Xf::Copy);
    if (!spec.per_layer && global.count(n)) names = {{global.at(n), Xf::Copy}};
  }
  GPT_CHECK(!names.empty(), "a ", model_type, " model file has no place for tensor ", spec.name, " (", spec.what,
            ") of the project's model");
  // The rows each fills: q, k and v of the qkv projection; swiglu's gate and
  // up; else all of them (the real vocabulary for the embedding and the
  // head, whose padding rows are zero).
  const SliceShape sh = slice_shape(spec);
  const int64_t kv_rows = static_cast<int64_t>(m.kv_heads()) * m.head_size();
  std::vector<int64_t> rows = {n == "wte" || n == "lmhead" ? m.vocab_size : sh.rows};
  if (names.size() == 3) rows = {m.attn_width(), kv_rows, kv_rows};
  if (names.size() == 2) rows = {m.mlp_width(), m.mlp_width()};
  std::vector<Piece> out;
  for (size_t k = 0; k < names.size(); ++k) {
    Piece p{names[k].first, names[k].second, rows[k], {}};
    if (p.xf == Xf::Transpose)
      p.file_shape = {sh.cols, p.rows};
    else if (sh.matrix)
      p.file_shape = {p.rows, sh.cols};
    else
      p.file_shape = {p.rows};
    out.push_back(std::move(p));
  }
  return out;
}

// A file tensor's values (file, p.file_shape) as p.rows rows of ours, and back.
void to_ours(const Piece& p, const ModelConfig& m, int64_t cols, const float* file, float* ours) {
  if (p.xf == Xf::Transpose) {
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t c = 0; c < cols; ++c) ours[r * cols + c] = file[c * p.rows + r];
  } else if (p.xf == Xf::NeoxQkv) {
    const int64_t H = m.n_head, D = m.head_size();
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < 3; ++j)
        std::memcpy(ours + (j * H + h) * D * cols, file + (h * 3 + j) * D * cols,
                    static_cast<size_t>(D * cols) * sizeof(float));
  } else {
    std::memcpy(ours, file, static_cast<size_t>(p.rows * cols) * sizeof(float));
  }
}
void from_ours(const Piece& p, const ModelConfig& m, int64_t cols, const float* ours, float* file) {
  if (p.xf == Xf::Transpose) {
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t c = 0; c < cols; ++c) file[c * p.rows + r] = ours[r * cols + c];
  } else if (p.xf == Xf::NeoxQkv) {
    const int64_t H = m.n_head, D = m.head_size();
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < 3; ++j)
        std::memcpy(file + (h * 3 + j) * D * cols, ours + (j * H + h) * D * cols,
                    static_cast<size_t>(D * cols) * sizeof(float));
  } else {
    std::memcpy(file, ours, static_cast<size_t>(p.rows * cols) * sizeof(float));
  }
}

}  // namespace

bool is_hf_model_dir(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  return fs::is_directory(p, ec) && fs::exists(p / "config.json", ec) &&
         (fs::exists(p / "model.safetensors", ec) || fs::exists(p / "model.safetensors.index.json", ec));
}

HfModel::HfModel(const std::string& dir, const HfOpenOptions& opt) : dir_(dir) {
  GPT_CHECK(is_hf_model_dir(dir), "'", dir,
            "' is not a Hugging Face model directory (config.json with model.safetensors or "
            "model.safetensors.index.json)");
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  const nlohmann::json hf =
      parse_json(read_text_file(cfg_path, "Hugging Face config"), "'" + cfg_path + "'", {.comments = false});
  Family fam;
  config_ = map_config(hf, dir, opt, fam, model_type_);
  weights_ = std::make_unique<SafetensorsModel>(dir);
  if (fam == Family::Gpt2) prefix_ = weights_->has("transformer.wte.weight") ? "transformer." : "";
}

HfModel::~HfModel() = default;

void HfModel::fill(const ParamSpec& spec, int layer, float* out) const {
  const ModelConfig& m = config_.model;
  const SliceShape sh = slice_shape(spec);
  int64_t row = 0;
  std::vector<float> src;
  for (const Piece& p : pieces(model_type_, prefix_, m, spec, layer)) {
    GPT_CHECK(weights_->has(p.name), "Hugging Face model '", dir_, "' has no tensor '", p.name, "' (for ", spec.name,
              ", ", spec.what, ")",
              spec.name == "lmhead" ? "; config.json says tie_word_embeddings false, but the file holds no head of its "
                                      "own: is the model tied?"
                                    : "");
    const StTensor& t = weights_->tensor(p.name);
    const std::string what = "Hugging Face model '" + dir_ + "': tensor '" + p.name + "' (for " + spec.name + ")";
    GPT_CHECK(t.shape == p.file_shape, what, " has shape ", st_shape_text(t.shape), " but the model (", m.n_layer,
              " layers, n_embd ", m.n_embd, ", ", m.n_head, " heads, ", m.kv_heads(), " key/value heads, MLP width ",
              m.mlp_width(), ", vocabulary ", m.vocab_size, ") expects ", st_shape_text(p.file_shape),
              p.xf == Xf::Transpose ? " (GPT-2's Conv1D stores (in, out))" : "");
    src.resize(t.numel());
    weights_->file_of(p.name).read(t, src.data());
    used_.insert(p.name);
    to_ours(p, m, sh.cols, src.data(), out + row * sh.cols);
    row += p.rows;
  }
  std::fill(out + row * sh.cols, out + sh.rows * sh.cols, 0.0f);  // the vocabulary's padding rows
}

void HfModel::check_all_used() const {
  const ModelConfig& m = config_.model;
  for (const std::string& name : weights_->names()) {
    if (used_.count(name) || is_buffer(name)) continue;
    const bool head = name == "lm_head.weight" || name == "embed_out.weight";
    if (head && m.head == "tied") {
      // A tied model's file may hold the head too; it must be the embedding.
      const std::string emb = model_type_ == "gpt2"       ? prefix_ + "wte.weight"
                              : model_type_ == "gpt_neox" ? "gpt_neox.embed_in.weight"
                                                          : "model.embed_tokens.weight";
      GPT_CHECK(weights_->read(name) == weights_->read(emb), "Hugging Face model '", dir_,
                "': config.json says tie_word_embeddings true but tensor '", name, "' differs from '", emb,
                "'; set tie_word_embeddings to false if the head is its own matrix");
      continue;
    }
    fail("Hugging Face model '", dir_, "': tensor '", name, "' of the file is not used by the ", model_type_,
         " model its config.json describes (", block_summary(m),
         "); refusing rather than dropping it");
  }
}

void HfModel::upload_tensor(Model<float>& model, const ParamSpec& spec) const {
  const int L = spec.per_layer ? config_.model.n_layer : 1;
  const size_t slice = spec.numel() / static_cast<size_t>(L);
  std::vector<float> host(slice);
  for (int l = 0; l < L; ++l) {
    fill(spec, l, host.data());
    model.backend().upload(model.params() + spec.offset + static_cast<size_t>(l) * slice, host.data(), slice);
  }
}

void HfModel::upload(Model<float>& model, const std::vector<std::string>& skip) const {
  used_.clear();
  for (const ParamSpec& s : model.layout().specs)
    if (std::find(skip.begin(), skip.end(), s.name) == skip.end()) upload_tensor(model, s);
  check_all_used();
}

Checkpoint HfModel::to_checkpoint() const {
  used_.clear();
  const ParamLayout layout(config_.model, resolve_attention(config_));
  Checkpoint ckpt;
  for (const ParamSpec& s : layout.specs) {
    CheckpointTensor t{"param/" + s.name, s.shape, std::vector<float>(s.numel())};
    const int L = s.per_layer ? config_.model.n_layer : 1;
    const size_t slice = s.numel() / static_cast<size_t>(L);
    for (int l = 0; l < L; ++l) fill(s, l, t.data.data() + static_cast<size_t>(l) * slice);
    ckpt.tensors.push_back(std::move(t));
  }
  check_all_used();
  ckpt.meta = {{"format", "gpt-checkpoint"},
               {"config", config_to_json(config_)},
               {"step", 0},
               {"loader", {{"seed", config_.train.seed}, {"epoch", 0}, {"index", 0}}},
               {"adam_steps", 0},
               {"converted_from", {{"format", "huggingface"}, {"path", dir_}, {"model_type", model_type_}}}};
  return ckpt;
}


namespace {

// The Hugging Face family a model of ours is (docs/hf_models.md §8), or a
// refusal naming what no family holds.
std::string family_of(const Config& cfg, const std::string& what) {
  const ModelConfig& m = cfg.model;
  GPT_CHECK(m.qk_norm_scale == "none", what, ": model.qk_norm_scale learned has no Hugging Face family");
  GPT_CHECK(m.p_rope == 1.0, what, ": p-RoPE (model.p_rope ", m.p_rope,
            ") has no form in the Hugging Face families this project writes");
  GPT_CHECK(cfg.train.grow_yarn == "off", what,
            ": RoPE frequencies grown by train.grow_yarn have no form in the Hugging Face families this project "
            "writes");
  GPT_CHECK(m.position != "rope" || m.rope_pairing == "half", what,
            ": RoPE with interleaved pairs is not the rotate-half layout of the Hugging Face families");
  const bool rope = m.position == "rope", full_rope = rope && m.rope_fraction == 1.0;
  if (m.position == "learned" && m.norm == "layernorm" && (m.mlp == "gelu" || m.mlp == "gelu_erf") &&
      m.bias == "all" && m.residual == "sequential" && m.qk_norm == "none" && m.kv_heads() == m.n_head)
    return "gpt2";
  if (rope && m.norm == "layernorm" && (m.mlp == "gelu" || m.mlp == "gelu_erf") && m.bias == "all" &&
      m.head == "untied" && m.qk_norm == "none" && m.kv_heads() == m.n_head)
    return "gpt_neox";
  if (full_rope && m.norm == "rmsnorm" && m.mlp == "swiglu" && m.residual == "sequential") {
    if (m.bias == "none" && m.qk_norm == "none") return cfg.context.mask == "window" ? "mistral" : "llama";
    if (m.bias == "qkv" && m.qk_norm == "none") return "qwen2";
    if (m.bias == "none" && m.qk_norm == "rms") return "qwen3";
  }
  fail(what, ": its block (", block_summary(m), ", position ", m.position,
       ") is none of the Hugging Face families this project writes: gpt2 (learned positions, LayerNorm, GELU, "
       "biases), gpt_neox (RoPE, LayerNorm, GELU, biases, untied head), llama/mistral (RMSNorm, SwiGLU, no biases), "
       "qwen2 (q/k/v biases), qwen3 (QK-norm per head)");
}

// Each layer's sliding window (0: full attention) where the family holds
// one: Mistral's window mask, Qwen's window mask or plan of full and sliding
// layers (qwen_sliding_layers' inverse); empty for none. Any other per-layer
// plan, or a window in another family, is refused.
std::vector<int> sliding_windows(const Config& cfg, const std::string& family, const std::string& what) {
  const ModelConfig& m = cfg.model;
  const bool qwen = family == "qwen2" || family == "qwen3", mask = cfg.context.mask == "window";
  const LayerPlan plan = resolve_layer_plan(m);
  if (plan.empty())  // the window as it runs (context.window 0: model.context)
    return mask && (qwen || family == "mistral") ? std::vector<int>(m.n_layer, resolve_attention(cfg).window)
                                                 : std::vector<int>{};
  GPT_CHECK(qwen && !mask, what, ": its per-layer plan (", layer_plan_summary(m), ") has no ", family,
            " form; only Qwen2's and Qwen3's layer_types of full and sliding-window layers map");
  std::vector<int> w;
  for (int kind : plan.layer_kind) {
    const LayerKind& k = plan.kinds[kind];
    GPT_CHECK(k.window && !k.rope && !k.temperature && !k.rope_theta && !k.attention, what, ": layer kind \"",
              k.name, "\" ", k.source.dump(), " is not one of Qwen's layer_types (a window of 0 or of w keys, nothing "
              "else)");
    w.push_back(*k.window);
  }
  for (int x : w)
    GPT_CHECK(x == 0 || x == *std::max_element(w.begin(), w.end()), what,
              ": Qwen's sliding layers share one sliding_window; the plan has several");
  return w;
}

// The context section as rope_parameters (and a sliding window): refused
// for anything else the section holds.
nlohmann::json rope_parameters_of(const Config& cfg, const std::string& family, const std::string& what,
                                  int& max_position) {
  const ContextConfig& c = cfg.context;
  const ModelConfig& m = cfg.model;
  nlohmann::json ctx = config_to_json(cfg)["context"], plain = config_to_json(Config{})["context"];
  nlohmann::json r = {{"rope_theta", m.rope_theta}};
  if (family == "gpt_neox") r["partial_rotary_factor"] = m.rope_fraction;
  max_position = m.context;
  for (const char* k : {"rope_scaling", "factor", "beta_fast", "beta_slow", "yarn_truncate", "low_freq", "high_freq",
                        "dynamic_alpha", "attn_factor"})
    ctx.erase(k), plain.erase(k);
  if (family == "mistral" || family == "qwen2" || family == "qwen3")  // sliding_windows' business
    for (const char* k : {"mask", "window"}) ctx.erase(k), plain.erase(k);
  GPT_CHECK(ctx == plain, what, ": its context section ", ctx.dump(),
            " holds methods with no Hugging Face config key (rope scaling pi, dynamic_ntk, yarn and llama3 with a "
            "fixed factor, and Mistral's window, map)");
  const std::string rs = c.rope_scaling;
  auto fixed_factor = [&] {
    GPT_CHECK(c.factor >= 1, what, ": context.rope_scaling ", rs,
              " with factor 0 (the evaluated length over the context) has no Hugging Face form; give a fixed factor");
    return c.factor;
  };
  if (rs == "none") {
    r["rope_type"] = "default";
  } else if (rs == "pi") {
    r["rope_type"] = "linear", r["factor"] = fixed_factor();
  } else if (rs == "dynamic_ntk") {
    r["rope_type"] = "dynamic", r["factor"] = c.dynamic_alpha;
  } else if (rs == "yarn") {
    r["rope_type"] = "yarn", r["factor"] = fixed_factor();
    r["original_max_position_embeddings"] = m.context;
    r["beta_fast"] = c.beta_fast, r["beta_slow"] = c.beta_slow;
    if (c.yarn_truncate == 0) r["truncate"] = false;
    if (c.attn_factor) r["attention_factor"] = *c.attn_factor;
    max_position = static_cast<int>(std::lround(m.context * c.factor));
  } else if (rs == "llama3") {
    r["rope_type"] = "llama3", r["factor"] = fixed_factor();
    r["original_max_position_embeddings"] = m.context;
    r["low_freq_factor"] = c.low_freq, r["high_freq_factor"] = c.high_freq;
    max_position = static_cast<int>(std::lround(m.context * c.factor));
  } else {
    fail(what, ": context.rope_scaling ", rs, " has no Hugging Face rope_type (linear, dynamic, yarn, llama3)");
  }
  return r;
}

}  // namespace

HfExport export_hf(const Checkpoint& ckpt, const std::string& ckpt_path, const std::string& out_dir, bool bf16) {
  const std::string what = "export to Hugging Face of '" + ckpt_path + "'";
  const Config cfg = checkpoint_config(ckpt, ckpt_path);
  const ModelConfig& m = cfg.model;
  nlohmann::json plain_attention = config_to_json(Config{})["attention"];
  GPT_CHECK(config_to_json(cfg)["attention"] == plain_attention, what, ": its attention ",
            config_to_json(cfg)["attention"].dump(),
            " is not the plain softmax attention of the Hugging Face families (their modeling code has no other)");
  const std::string family = family_of(cfg, what);
  const std::vector<int> windows = sliding_windows(cfg, family, what);
  GPT_CHECK(m.attn_width() == m.n_embd || (family != "gpt2" && family != "gpt_neox"), what, ": its heads of ",
            m.head_size(), " channels (model.head_dim) make the attention ", m.attn_width(), " wide, not n_embd = ",
            m.n_embd, "; the ", family, " family's heads are n_embd / n_head wide");
  static const std::map<std::string, std::string> arch = {
      {"gpt2", "GPT2LMHeadModel"}, {"gpt_neox", "GPTNeoXForCausalLM"}, {"llama", "LlamaForCausalLM"},
      {"mistral", "MistralForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"}};
  nlohmann::ordered_json j = {{"architectures", {arch.at(family)}}, {"model_type", family}};
  const bool tied = m.head == "tied";
  const std::string act = m.mlp == "gelu" ? "gelu_new" : "gelu";
  if (family == "gpt2") {
    j["n_embd"] = m.n_embd, j["n_layer"] = m.n_layer, j["n_head"] = m.n_head, j["n_positions"] = m.position_rows();
    j["n_inner"] = m.mlp_width() == 4 * m.n_embd ? nlohmann::ordered_json() : nlohmann::ordered_json(m.mlp_width());
    j["activation_function"] = act, j["layer_norm_epsilon"] = 1e-5;
    GPT_CHECK(config_to_json(cfg)["context"] == config_to_json(Config{})["context"], what,
              ": a learned-position model has no Hugging Face form for its context section");
  } else {
    int max_position = m.context;
    nlohmann::json rope = rope_parameters_of(cfg, family, what, max_position);
    j["hidden_size"] = m.n_embd, j["num_hidden_layers"] = m.n_layer, j["num_attention_heads"] = m.n_head;
    j["intermediate_size"] = m.mlp_width(), j["max_position_embeddings"] = max_position;
    if (family == "gpt_neox") {
      j["hidden_act"] = act, j["layer_norm_eps"] = 1e-5;
      j["use_parallel_residual"] = m.residual == "parallel", j["attention_bias"] = true;
    } else {
      j["num_key_value_heads"] = m.kv_heads(), j["head_dim"] = m.head_size(), j["hidden_act"] = "silu";
      j["rms_norm_eps"] = m.norm_eps, j["attention_bias"] = family == "qwen2", j["mlp_bias"] = false;
      const int window = windows.empty() ? 0 : *std::max_element(windows.begin(), windows.end());
      if (family == "mistral") j["sliding_window"] = window;
      if ((family == "qwen2" || family == "qwen3") && window > 0) {
        j["use_sliding_window"] = true, j["sliding_window"] = window;
        j["max_window_layers"] = std::find(windows.begin(), windows.end(), window) - windows.begin();
        nlohmann::json types = nlohmann::json::array();
        for (int w : windows) types.push_back(w > 0 ? "sliding_attention" : "full_attention");
        j["layer_types"] = types;
      }
    }
    j["rope_parameters"] = rope;
  }
  j["tie_word_embeddings"] = tied, j["vocab_size"] = m.vocab_size;
  j["dtype"] = bf16 ? "bfloat16" : "float32";

  // The tensors, each built from our parameters through the loader's table.
  const ParamLayout layout(m, resolve_attention(cfg));
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  std::vector<std::vector<float>> values;
  for (const ParamSpec& s : layout.specs) {
    const std::string name = "param/" + s.name;
    GPT_CHECK(ckpt.has(name), what, ": it has no tensor ", name);
    const std::vector<float>& all = ckpt.tensor(name).data;
    const SliceShape sh = slice_shape(s);
    const int L = s.per_layer ? m.n_layer : 1;
    for (int l = 0; l < L; ++l) {
      const float* slice = all.data() + static_cast<size_t>(l) * static_cast<size_t>(sh.rows * sh.cols);
      int64_t row = 0;
      for (const Piece& p : pieces(family, "transformer.", m, s, l)) {
        std::vector<float> file(static_cast<size_t>(p.rows * sh.cols));
        from_ours(p, m, sh.cols, slice + row * sh.cols, file.data());
        shapes.emplace_back(p.name, p.file_shape);
        values.push_back(std::move(file));
        row += p.rows;
      }
    }
  }
  std::vector<StWriteTensor> tensors;
  for (size_t i = 0; i < values.size(); ++i) tensors.push_back({shapes[i].first, shapes[i].second, values[i].data()});
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  GPT_CHECK(!ec, what, ": cannot create '", out_dir, "' (", ec.message(), ")");
  write_safetensors((fs::path(out_dir) / "model.safetensors").string(), tensors, bf16 ? StDtype::BF16 : StDtype::F32,
                    {{"format", "pt"}});
  write_file_atomic((fs::path(out_dir) / "config.json").string(), j.dump(2) + "\n");

  // The tokenizer, where the run's maps onto Hugging Face's files.
  HfExport out{family, values.size(), false};
  const std::string& tok = cfg.data.tokenizer;
  if (tok.rfind("hf:", 0) == 0) {
    const fs::path from = tok.substr(3);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      if (fs::exists(from / f, ec)) {
        fs::copy_file(from / f, fs::path(out_dir) / f, fs::copy_options::overwrite_existing, ec);
        GPT_CHECK(!ec, what, ": cannot copy ", (from / f).string(), " (", ec.message(), ")");
        out.tokenizer = true;
      }
  }
  return out;
}

}  // namespace gpt
