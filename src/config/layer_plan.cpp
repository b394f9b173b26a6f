#include "config/layer_plan.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "config/attention.h"
#include "core/check.h"

namespace gpt {
namespace {

// A config error (no source location: the message names the key).
#define GPT_CONFIG_CHECK(cond, ...) \
  do {                              \
    if (!(cond)) fail(__VA_ARGS__); \
  } while (0)

constexpr const char* kPlanNames[] = {"none", "swan", "irope"};
constexpr const char* kKindKeys = "position, window, temperature, rope_theta, attention";

std::string kind_path(const std::string& letter, const std::string& key = "") {
  return "model.layer_kinds." + letter + (key.empty() ? "" : "." + key);
}

// The kinds of a named plan, as JSON (model.layer_kinds amends them).
nlohmann::json named_plan_kinds(const std::string& name, const ModelConfig& m) {
  const int half = std::max(1, m.context / 2);
  nlohmann::json kinds = {{"L", {{"position", "rope"}, {"window", half}}},
                          {"G", {{"position", "none"}, {"window", 0}}}};
  if (name == "irope") kinds["G"]["temperature"] = "llama4";
  return kinds;
}

LayerKind parse_kind(const std::string& letter, const nlohmann::json& body, const ModelConfig& m) {
  GPT_CONFIG_CHECK(body.is_object(), "config: \"", kind_path(letter), "\" must be an object with any of the keys ",
                   kKindKeys, ", got ", body.dump());
  LayerKind k;
  k.name = letter;
  k.source = body;
  for (const auto& [key, v] : body.items()) {
    const std::string where = kind_path(letter, key);
    if (key == "position") {
      GPT_CONFIG_CHECK(v.is_string() && (v == "rope" || v == "none"), "config: \"", where, "\" = ", v.dump(),
                       " is not valid; allowed: \"rope\", \"none\"");
      GPT_CONFIG_CHECK(
          m.position == "rope" || m.position == "none", "config: \"", where,
          "\" needs \"model.position\" = \"rope\" or \"none\" (got \"", m.position,
          "\"): learned positions are added to the embedding once, not per layer, and alibi is an attention "
          "bias (set it per layer with attention.position_bias)");
      k.rope = v == "rope";
      if (*k.rope)
        GPT_CONFIG_CHECK(m.head_size() % 2 == 0, "config: \"", where,
                         "\" = \"rope\" needs an even head size (model.head_dim, or model.n_embd / model.n_head; got ",
                         m.head_size(), ")");
    } else if (key == "window") {
      GPT_CONFIG_CHECK(v.is_number() && v.get<double>() >= 0 &&
                           v.get<double>() == static_cast<double>(v.get<int64_t>()) && v.get<double>() <= (1 << 20),
                       "config: \"", where, "\" = ", v.dump(),
                       " is not valid; allowed: an integer in [0, 1048576]: 0 = full attention, w = the last w keys");
      k.window = static_cast<int>(v.get<int64_t>());
    } else if (key == "temperature") {
      std::string names;
      bool found = false;
      for (size_t i = 0; i < std::size(kTemperatureNames); ++i) {
        names += std::string(i ? ", " : "") + kTemperatureNames[i];
        if (v.is_string() && v == kTemperatureNames[i]) {
          k.temperature = static_cast<Temperature>(i);
          found = true;
        }
      }
      GPT_CONFIG_CHECK(found, "config: \"", where, "\" = ", v.dump(), " is not valid; allowed: ", names);
    } else if (key == "rope_theta") {
      GPT_CONFIG_CHECK(v.is_number() && v.get<double>() > 0, "config: \"", where, "\" = ", v.dump(),
                       " is not valid; allowed: a number > 0 (the layer's RoPE base, e.g. Gemma 3's 10000 on local "
                       "and 1000000 on global layers)");
      GPT_CONFIG_CHECK(m.position == "rope", "config: \"", where, "\" needs \"model.position\" = \"rope\" (got \"",
                       m.position, "\")");
      k.rope_theta = v.get<double>();
    } else if (key == "attention") {
      k.attention = attention_config_from_json(v, where);
    } else {
      fail("config: unknown key \"", where, "\"; valid keys of a layer kind: ", kKindKeys);
    }
  }
  return k;
}

}  // namespace

LayerPlan resolve_layer_plan(const ModelConfig& m) {
  LayerPlan plan;
  const bool named = m.layer_plan != "none";
  bool known = false;
  for (const char* n : kPlanNames) known |= m.layer_plan == n;
  GPT_CONFIG_CHECK(known, "config: \"model.layer_plan\" = \"", m.layer_plan,
                   "\" is not valid; allowed: none, swan, irope");
  GPT_CONFIG_CHECK(m.layer_kinds.is_object(), "config: \"model.layer_kinds\" must be an object (letter -> kind)");
  if (!named && m.layer_pattern.empty()) {
    GPT_CONFIG_CHECK(m.layer_kinds.empty(),
                     "config: \"model.layer_kinds\" needs a pattern: set \"model.layer_pattern\" "
                     "(one letter per layer) or a named \"model.layer_plan\" (swan, irope)");
    return plan;
  }
  plan.name = named ? m.layer_plan : "custom";
  plan.pattern = m.layer_pattern.empty() ? "LLLG" : m.layer_pattern;
  nlohmann::json kinds = named ? named_plan_kinds(m.layer_plan, m) : nlohmann::json::object();
  for (const auto& [letter, body] : m.layer_kinds.items()) {
    GPT_CONFIG_CHECK(body.is_object(), "config: \"", kind_path(letter), "\" must be an object with any of the keys ",
                     kKindKeys, ", got ", body.dump());
    if (!kinds.contains(letter)) kinds[letter] = nlohmann::json::object();
    for (const auto& [key, v] : body.items()) kinds[letter][key] = v;
  }
  GPT_CONFIG_CHECK(static_cast<int>(plan.pattern.size()) <= m.n_layer, "config: \"model.layer_pattern\" = \"",
                   plan.pattern, "\" has ", plan.pattern.size(), " letters but the model has ", m.n_layer,
                   " layers (model.n_layer); the pattern repeats over the layers, so it may be shorter, not longer");
  for (char ch : plan.pattern)
    GPT_CONFIG_CHECK(std::isalpha(static_cast<unsigned char>(ch)), "config: \"model.layer_pattern\" = \"", plan.pattern,
                     "\": '", std::string(1, ch),
                     "' is not a letter; one letter (a kind of model.layer_kinds) per layer");
  for (const auto& [letter, body] : kinds.items()) {
    GPT_CONFIG_CHECK(letter.size() == 1 && std::isalpha(static_cast<unsigned char>(letter[0])), "config: \"",
                     kind_path(letter), "\": a kind is named by one letter, as in model.layer_pattern");
    GPT_CONFIG_CHECK(plan.pattern.find(letter[0]) != std::string::npos, "config: \"", kind_path(letter),
                     "\" is not used: model.layer_pattern \"", plan.pattern, "\" has no '", letter, "'");
    plan.kinds.push_back(parse_kind(letter, body, m));
  }
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string letter(1, plan.pattern[l % plan.pattern.size()]);
    int index = -1;
    for (size_t i = 0; i < plan.kinds.size(); ++i)
      if (plan.kinds[i].name == letter) index = static_cast<int>(i);
    GPT_CONFIG_CHECK(index >= 0, "config: \"model.layer_pattern\" = \"", plan.pattern, "\" uses '", letter,
                     "', which \"model.layer_kinds\" does not define", named ? " (nor does the named plan)" : "");
    plan.layer_kind.push_back(index);
  }
  return plan;
}

namespace {

AttentionSpec apply_kind(AttentionSpec s, const LayerKind& k, const ModelConfig& m, bool rope) {
  if (k.attention) {
    const AttentionSpec a = resolve_attention(*k.attention, m);
    s.score = a.score;
    s.scale = a.scale;
    s.positivity = a.positivity;
    s.normalize = a.normalize;
    s.p = a.p;
    s.offset_rows = a.offset_rows;
    s.cosine_scale = a.cosine_scale;
    s.scale_value = a.scale_value;
    s.tau = a.tau;
    s.bias = a.bias;
    s.norm_const = a.norm_const;
    s.softcap = a.softcap;
    s.position_bias = a.position_bias;
    s.output_gate = a.output_gate;
    s.differential = a.differential;
    s.head_group = a.head_group;
  }
  if (!rope) {  // nothing rotates: no frequency rule, no distance remapping
    s.rope.scaling = RopeScaling::None;
    s.rope.remap = RemapKind::None;
    s.rope.remap_window = 0;
    s.rope.remap_sinks = 0;
  }
  if (k.window) {  // the kind's mask replaces the run's (and the remappings that belong to it)
    s.window = *k.window;
    s.sinks = 0;
    s.chunked = false;
    if (s.rope.remap == RemapKind::Cap || s.rope.remap == RemapKind::CacheSinks) {
      s.rope.remap = RemapKind::None;
      s.rope.remap_window = 0;
      s.rope.remap_sinks = 0;
    }
    if (*k.window == 0) s.row_index = RowIndex::Position;
  }
  if (k.temperature) s.temperature = *k.temperature;
  if (k.rope_theta) s.rope.theta = *k.rope_theta;
  return s;
}

}  // namespace

std::vector<LayerAttention> layer_attention(const ModelConfig& m, const LayerPlan& plan, const AttentionSpec& base) {
  GPT_CONFIG_CHECK(plan.empty() || m.position != "pope",
                   "config: a per-layer plan (model.layer_plan, layer_pattern) with \"model.position\" = \"pope\" is "
                   "not supported: PoPE runs every layer on heads of 2D channels, and per-layer kinds (position, "
                   "window, attention) have not been built for it");
  std::vector<LayerAttention> out(m.n_layer);
  for (int l = 0; l < m.n_layer; ++l) {
    LayerAttention& la = out[l];
    la.rope = m.position == "rope";
    la.pope = m.position == "pope";
    la.spec = base;
    if (!plan.empty()) {
      const LayerKind& k = plan.kinds[plan.layer_kind[l]];
      la.kind = k.name;
      if (k.rope) la.rope = *k.rope;
      la.spec = apply_kind(base, k, m, la.rope);
    }
    // SWAN-GPT's temperature scales the layers without position encoding
    // only (its global NoPE layers); a RoPE or PoPE layer runs without it.
    if (la.spec.temperature == Temperature::Swan && (la.rope || la.pope)) la.spec.temperature = Temperature::None;
  }
  return out;
}

std::vector<LayerAttention> layer_attention(const ModelConfig& m, const AttentionSpec& base) {
  return layer_attention(m, resolve_layer_plan(m), base);
}

std::string position_ids_refusal(const ModelConfig& m, const std::vector<LayerAttention>& layers) {
  if (m.position == "learned")
    return "\"model.position\" = \"learned\" adds a table of model.context rows to the embedding; ids past it "
           "have no row";
  bool encoded = false;
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerAttention& la = layers[l];
    const AttentionSpec& s = la.spec;
    encoded |= la.rope || la.pope || attn::position_table::applies(s);
    const char* reader = attn::scale_invariant(s) ? "attention.scale = scale_invariant"
                         : remap::on(s.rope)      ? "a distance remapping"
                                                  : nullptr;
    if (reader)
      return std::string(reader) + " (layer " + std::to_string(l) +
             ") takes its distances from token indices inside the attention kernels, which do not read position "
             "ids; train with plain positions";
  }
  if (!encoded)
    return "no layer uses RoPE, PoPE, ALiBi, KERPLE or FIRE (model.position " + m.position +
           "), the only encodings the ids reach: training would be plain";
  return "";
}

LearnedAttention learned_attention(const std::vector<LayerAttention>& layers) {
  LearnedAttention out;
  for (size_t l = 0; l < layers.size(); ++l) {
    const AttentionSpec& s = layers[l].spec;
    out.scale |= s.learned_scale();
    out.head_temperature |= s.head_temperature;
    out.sink |= s.learned_sink();
    out.forget |= s.forget();
    out.fire |= s.fire();
    out.output_gate |= s.output_gate;
    out.differential |= s.differential;
    if (s.kerple()) {
      GPT_CONFIG_CHECK(out.kerple_kind == PositionBias::None || out.kerple_kind == s.position_bias, "layer ", l,
                       " has the position bias ", stage_name(s.position_bias), " but an earlier layer ",
                       stage_name(out.kerple_kind),
                       ": one model holds one KERPLE variant (its r1, r2 tensor and initialisation); use one of them");
      out.kerple = true;
      out.kerple_kind = s.position_bias;
    }
  }
  return out;
}

void check_layer_plan(const Config& c) {
  const LayerPlan plan = resolve_layer_plan(c.model);
  if (plan.empty()) return;
  for (const LayerKind& k : plan.kinds) {
    if (k.attention) {
      Config with = c;
      with.attention = *k.attention;
      try {
        check_config_rules(with);
      } catch (const Error& e) {
        throw Error("\"" + kind_path(k.name, "attention") + "\": " + e.what());
      }
    }
    if (k.window && *k.window > 0) {
      const int64_t longest =
          static_cast<int64_t>(c.eval.multiples.empty() ? 1 : std::max(1, c.eval.multiples.back())) * c.model.context;
      GPT_CONFIG_CHECK(*k.window < std::max<int64_t>(longest, c.model.context), "config: \"",
                       kind_path(k.name, "window"), "\" = ", *k.window,
                       " would never hide a key: it must be smaller than the longest context it runs "
                       "at, max(eval.multiples) * model.context = ",
                       longest, " (0 = full attention)");
    }
  }
  const std::vector<LayerAttention> layers = layer_attention(c.model, plan, resolve_attention(c));
  for (const LayerAttention& la : layers) {
    GPT_CONFIG_CHECK(
        !(la.spec.rope.scaling == RopeScaling::Yarn && la.spec.temperature == Temperature::Yarn), "config: \"",
        kind_path(la.kind, "temperature"),
        "\" = \"yarn\" on a layer whose context.rope_scaling yarn already applies YaRN's attention factor");
  }
  learned_attention(layers);
}

nlohmann::json layer_plan_to_json(const std::vector<LayerAttention>& layers) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t l = 0; l < layers.size(); ++l) {
    const AttentionSpec& s = layers[l].spec;
    nlohmann::json stages = {{"score", stage_name(s.score)},
                             {"scale", stage_name(s.scale)},
                             {"positivity", stage_name(s.positivity)},
                             {"normalize", stage_name(s.normalize)},
                             {"p", s.p},
                             {"position_bias", stage_name(s.position_bias)},
                             {"output_gate", s.output_gate ? "sigmoid" : "none"},
                             {"differential", s.differential ? "on" : "none"}};
    out.push_back({{"layer", l},
                   {"kind", layers[l].kind},
                   {"position", layers[l].rope   ? "rope"
                                : layers[l].pope ? "pope"
                                                 : "none"},
                   {"attention", stages},
                   {"mask", mask_name(s)},
                   {"window", s.window},
                   {"temperature", stage_name(s.temperature)},
                   {"rope_scaling", stage_name(layers[l].rope ? s.rope.scaling : RopeScaling::None)},
                   {"rope_theta", s.rope.theta}});
  }
  return out;
}

std::string layer_plan_summary(const ModelConfig& m) {
  const LayerPlan plan = resolve_layer_plan(m);
  if (plan.empty()) return "none";
  std::ostringstream os;
  os << (plan.name == "custom" ? std::string() : plan.name + " ") << "\"" << plan.pattern << "\" over " << m.n_layer
     << " layers:";
  for (size_t i = 0; i < plan.kinds.size(); ++i)
    os << (i ? ";" : "") << " " << plan.kinds[i].name << " = " << plan.kinds[i].source.dump();
  return os.str();
}

}  // namespace gpt
