#include "config/attention.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/check.h"

namespace gpt {
namespace {

// The enumerator of `name` among a stage's names (validated by the schema).
template <typename E, size_t N>
E stage_from(const std::string& name, const char* const (&names)[N], const char* key,
             const char* section = "attention") {
  for (size_t i = 0; i < N; ++i)
    if (name == names[i]) return static_cast<E>(i);
  fail("config: \"", section, ".", key, "\" = \"", name, "\" is not a valid choice");
}

}  // namespace

const AttentionPreset* find_attention_preset(const std::string& name) {
  for (const auto& p : kAttentionPresets)
    if (name == p.name) return &p;
  return nullptr;
}

int rope_rotated_dims(const ModelConfig& m) {
  const int D = m.head_size();
  return static_cast<int>(m.rope_fraction * D / 2 + 1e-9) * 2;
}

AttentionSpec resolve_attention(const AttentionConfig& a, const ModelConfig& m, const ContextConfig& ctx) {
  const AttentionPreset* preset = find_attention_preset(a.preset);
  GPT_CHECK(preset, "config: unknown attention preset \"", a.preset, "\"");
  AttentionSpec s;
  s.trained_context = m.context;
  s.score = a.score == "preset" ? preset->score : stage_from<Score>(a.score, kScoreNames, "score");
  s.scale = a.scale == "preset" ? preset->scale : stage_from<Scale>(a.scale, kScaleNames, "scale");
  s.positivity = a.positivity == "preset" ? preset->positivity
                                          : stage_from<Positivity>(a.positivity, kPositivityNames, "positivity");
  s.normalize =
      a.normalize == "preset" ? preset->normalize : stage_from<Normalize>(a.normalize, kNormalizeNames, "normalize");
  s.p = a.p.value_or(preset->p);
  s.offset_rows = a.offset_rows;
  s.cosine_scale = a.cosine_scale.value_or(preset->cosine_scale);
  s.scale_value = a.scale_value;
  s.tau = a.tau;
  s.bias = a.bias.value_or(default_bias(s.positivity, s.normalize, m.context));
  s.norm_const = a.norm_const.value_or(default_norm_const(m.context));
  s.softcap = a.softcap;
  s.position_bias = stage_from<PositionBias>(a.position_bias, kPositionBiasNames, "position_bias");
  if (m.position == "alibi") s.position_bias = PositionBias::Alibi;
  s.output_gate = a.output_gate == "sigmoid";
  s.differential = a.differential == "on";
  s.head_group = s.differential ? attn::diff::kHeads : 1;
  // RoPE and the context-extension section (validated by the schema).
  RopeSpec& r = s.rope;
  r.theta = m.rope_theta;
  r.interleaved = m.rope_pairing == "interleaved";
  r.rot_dims = rope_rotated_dims(m);
  r.trained_context = m.context;
  r.scaling = stage_from<RopeScaling>(ctx.rope_scaling, kRopeScalingNames, "rope_scaling", "context");
  r.factor = ctx.factor;
  r.beta_fast = ctx.beta_fast;
  r.beta_slow = ctx.beta_slow;
  r.yarn_truncate = ctx.yarn_truncate == 1;
  r.keep = m.p_rope;
  r.low_freq = ctx.low_freq;
  r.high_freq = ctx.high_freq;
  r.dynamic_alpha = ctx.dynamic_alpha;
  s.attn_factor = ctx.attn_factor.value_or(0.0);
  const ContextMask mask = stage_from<ContextMask>(ctx.mask, kContextMaskNames, "mask", "context");
  if (mask != ContextMask::None) {
    s.sinks = mask == ContextMask::Sinks    ? (ctx.sinks > 0 ? ctx.sinks : 4)
              : mask == ContextMask::Lambda ? (ctx.sinks > 0 ? ctx.sinks : 10)
                                            : 0;
    s.window = ctx.window > 0 ? ctx.window : mask == ContextMask::Sinks ? m.context - s.sinks : m.context;
    s.chunked = mask == ContextMask::Chunked;
  }
  // Distance remappings (the far copy of q and k).
  const ContextRemap remap = stage_from<ContextRemap>(ctx.remap, kContextRemapNames, "remap", "context");
  if (remap == ContextRemap::Rerope) {
    r.remap = RemapKind::Rerope;
    r.remap_window = ctx.remap_window > 0 ? ctx.remap_window : std::max(1, m.context / 2);
    r.rerope_kappa = ctx.rerope_kappa;
  } else if (remap == ContextRemap::SelfExtend) {
    r.remap = RemapKind::SelfExtend;
    r.remap_window = ctx.remap_window > 0 ? ctx.remap_window : std::max(1, m.context / 4);
    r.group = ctx.group;  // 0: per length (for_length)
  } else if (remap == ContextRemap::String) {
    r.remap = RemapKind::String;
    r.remap_window = ctx.remap_window > 0 ? ctx.remap_window : std::max(1, static_cast<int>(0.33 * m.context));
    r.remap_local = ctx.remap_local > 0 ? ctx.remap_local : std::max(1, m.context / 1024);
  } else if (remap == ContextRemap::DualChunk) {
    // ChunkLlama's defaults: chunk_size s + w = 3N/4, local window w = N/16.
    r.remap = RemapKind::DualChunk;
    r.remap_window = ctx.remap_window > 0 ? ctx.remap_window : std::max(2, 3 * m.context / 4);
    r.remap_local = ctx.remap_local > 0 ? ctx.remap_local : m.context / 16;
  } else if (mask == ContextMask::Lambda) {
    r.remap = RemapKind::Cap;
    r.remap_window = s.window;  // Δ′ = min(Δ, n_local)
  } else if (mask == ContextMask::Sinks &&
             stage_from<SinkPositions>(ctx.sink_positions, kSinkPositionsNames, "sink_positions", "context") ==
                 SinkPositions::Cache) {
    r.remap = RemapKind::CacheSinks;
    r.remap_window = s.window;
    r.remap_sinks = s.sinks;
  }
  s.row_index = stage_from<RowIndex>(ctx.row_index, kRowIndexNames, "row_index", "context");
  s.temperature = stage_from<Temperature>(ctx.temperature, kTemperatureNames, "temperature", "context");
  s.temp_beta = ctx.temp_beta;
  s.logit_scale = ctx.logit_scale;
  s.temp_floor = ctx.temp_floor;
  s.temp_base = ctx.temp_base;
  s.head_temperature = ctx.head_scale == 1;
  return s;
}

std::vector<int> window_stages(const TrainConfig& t, int N) {
  std::vector<int> w;
  if (t.window_start <= 0 || t.window_start >= N) return w;
  for (int v = t.window_start; v < N; v += t.window_start) w.push_back(v);
  w.push_back(N);
  return w;
}

std::vector<int> length_stages(const TrainConfig& t, int N) {
  std::vector<int> w;
  if (t.length_start <= 0 || t.length_start >= N) return w;
  for (long long v = t.length_start; v < N; v *= 2) w.push_back(static_cast<int>(v));
  w.push_back(N);
  return w;
}

std::vector<int> growth_stages(const TrainConfig& t, int N) {
  return t.length_start > 0 ? length_stages(t, N) : window_stages(t, N);
}

AttentionSpec resolve_attention(const Config& c) {
  AttentionSpec s = resolve_attention(c.attention, c.model, c.context);
  // (A schedule of 0 or more than 17 stages grows nothing here: the config
  // rule on train.grow_yarn refuses it with the reason.)
  const std::vector<int> w = growth_stages(c.train, c.model.context);
  if (c.train.grow_yarn == "on" && w.size() >= 2 && w.size() <= RopeSpec::kMaxGrowth + 1u) {
    for (size_t j = 0; j < w.size(); ++j) s.rope.grow[j] = w[j];
    s.rope.grown = static_cast<int>(w.size()) - 1;
  }
  return s;
}

namespace {
struct ContextMethod {
  const char* name;
  const char* key;
  const char* value;  // the key's value (a number where it reads as one)
  const char* kind;
  const char* key2 = nullptr;  // a second key the method sets
  const char* value2 = nullptr;
};
constexpr ContextMethod kContextMethods[] = {
    {"pi", "rope_scaling", "pi", "RoPE frequency rule"},
    {"ntk", "rope_scaling", "ntk", "RoPE frequency rule"},
    {"dynamic_ntk", "rope_scaling", "dynamic_ntk", "RoPE frequency rule"},
    {"yarn", "rope_scaling", "yarn", "RoPE frequency rule"},
    {"llama3", "rope_scaling", "llama3", "RoPE frequency rule"},
    {"window", "mask", "window", "mask"},
    {"sinks", "mask", "sinks", "mask"},
    {"streaming_llm", "mask", "sinks", "mask", "sink_positions", "cache"},
    {"lambda", "mask", "lambda", "mask"},
    {"chunked", "mask", "chunked", "mask"},
    {"rerope", "remap", "rerope", "distance remapping"},
    {"self_extend", "remap", "self_extend", "distance remapping"},
    {"string", "remap", "string", "distance remapping"},
    {"dual_chunk", "remap", "dual_chunk", "distance remapping"},
    {"yarn_temp", "temperature", "yarn", "temperature"},
    {"llama4_temp", "temperature", "llama4", "temperature"},
    {"swan_temp", "temperature", "swan", "temperature"},
    {"headscale", "head_scale", "1", "head temperature"},
};
}  // namespace

std::string context_method_names() {
  std::string out;
  for (const ContextMethod& m : kContextMethods) out += std::string(out.empty() ? "" : ", ") + m.name;
  return out + ", none";
}

nlohmann::json context_methods_to_json(const std::vector<std::string>& methods) {
  nlohmann::json j = nlohmann::json::object();
  std::vector<std::pair<std::string, std::string>> used;  // key -> method name
  for (const std::string& name : methods) {
    if (name == "none") continue;
    const ContextMethod* found = nullptr;
    for (const ContextMethod& m : kContextMethods)
      if (name == m.name) found = &m;
    GPT_CHECK(found, "context method \"", name, "\" is unknown; valid: ", context_method_names());
    for (const auto& [key, other] : used)
      GPT_CHECK(key != found->key, "context methods \"", other, "\" and \"", name, "\" are both a ", found->kind,
                "; use one");
    used.emplace_back(found->key, name);
    // A value that reads as a number is one (context.head_scale = 1).
    const nlohmann::json number = nlohmann::json::parse(found->value, nullptr, false);
    j[found->key] = number.is_number() ? number : nlohmann::json(found->value);
    if (found->key2) j[found->key2] = found->value2;
  }
  return j;
}

std::string mask_name(const AttentionSpec& s) {
  if (s.window <= 0) return "none";
  if (s.chunked) return "chunked";
  return s.rope.remap == RemapKind::Cap ? "lambda" : s.sinks > 0 ? "sinks" : "window";
}

nlohmann::json context_to_json(const AttentionSpec& s) {
  const RopeSpec& r = s.rope;
  nlohmann::json j = {{"rope_scaling", stage_name(r.scaling)}, {"rope_rot_dims", r.rot_dims}};
  if (r.scaling != RopeScaling::None) j["factor"] = r.factor > 0 ? nlohmann::json(r.factor) : nlohmann::json("L/N");
  if (r.keep < 1) j["p_rope"] = r.keep;
  if (r.scaling == RopeScaling::Yarn) {
    j["beta_fast"] = r.beta_fast;
    j["beta_slow"] = r.beta_slow;
    j["yarn_truncate"] = r.yarn_truncate;
  }
  if (r.scaling == RopeScaling::Llama3) {
    j["low_freq"] = r.low_freq;
    j["high_freq"] = r.high_freq;
  }
  if (r.scaling == RopeScaling::DynamicNtk) j["dynamic_alpha"] = r.dynamic_alpha;
  if (r.scaling == RopeScaling::Yarn || s.temperature == Temperature::Yarn)
    j["attn_factor"] = s.attn_factor > 0 ? nlohmann::json(s.attn_factor) : nlohmann::json("0.1 ln s + 1");
  j["mask"] = mask_name(s);
  j["remap"] = stage_name(r.remap);
  if (r.remap != RemapKind::None) j["remap_window"] = r.remap_window;
  if (r.remap == RemapKind::Rerope) j["rerope_kappa"] = r.rerope_kappa;
  if (r.remap == RemapKind::String || r.remap == RemapKind::DualChunk) j["remap_local"] = r.remap_local;
  if (r.remap == RemapKind::SelfExtend) j["group"] = r.group > 0 ? nlohmann::json(r.group) : nlohmann::json("auto");
  if (s.window > 0) {
    j["window"] = s.window;
    j["sinks"] = s.sinks;
    j["row_index"] = stage_name(s.row_index);
  }
  if (r.grown > 0)  // train.grow_yarn: the windows whose switches grew the frequencies
    j["grown_windows"] = std::vector<int>(r.grow, r.grow + r.grown + 1);
  j["temperature"] = stage_name(s.temperature);
  j["logit_scale"] = s.logit_scale;
  if (s.temperature == Temperature::Llama4) {
    j["temp_beta"] = s.temp_beta;
    j["temp_floor"] = s.temp_floor > 0 ? s.temp_floor : s.trained_context;
  }
  if (s.temperature == Temperature::Swan) j["temp_base"] = attn::swan_base(s);
  j["head_scale"] = s.head_temperature;
  return j;
}

std::string context_summary(const AttentionSpec& s) {
  std::ostringstream os;
  const RopeSpec& r = s.rope;
  const auto add = [&os](const std::string& part) { os << (os.tellp() > 0 ? ", " : "") << part; };
  std::ostringstream t;  // YaRN's attention factor as configured
  if (s.attn_factor > 0)
    t << s.attn_factor;
  else
    t << "0.1 ln s + 1";
  const std::string t_text = t.str();
  if (r.scaling != RopeScaling::None) {
    std::ostringstream m;
    m << stage_name(r.scaling);
    if (r.scaling != RopeScaling::DynamicNtk) {
      m << " s=";
      if (r.factor > 0)
        m << r.factor;
      else
        m << "L/N";
    }
    if (r.scaling == RopeScaling::Yarn) m << " (t=" << t_text << ")";
    add(m.str());
  }
  if (s.window > 0) {
    std::ostringstream m;
    if (s.chunked)
      m << "chunked (chunks of " << s.window << ")";
    else if (s.rope.remap == RemapKind::Cap)
      m << "lambda (n_global " << s.sinks << ", n_local " << s.window << ", distances capped at n_local)";
    else if (s.sinks > 0)
      m << "sinks " << s.sinks << " + window " << s.window
        << (s.rope.remap == RemapKind::CacheSinks ? " (cache positions)" : "");
    else
      m << "window " << s.window;
    if (s.row_index == RowIndex::Keys) m << " (i = keys kept)";
    add(m.str());
  }
  if (r.remap == RemapKind::Rerope) {
    std::ostringstream m;
    m << "rerope w=" << r.remap_window;
    if (r.rerope_kappa > 0) m << " kappa=" << r.rerope_kappa;
    add(m.str());
  }
  if (r.remap == RemapKind::SelfExtend) {
    std::ostringstream m;
    m << "self_extend w_n=" << r.remap_window << " G=";
    if (r.group > 0)
      m << r.group;
    else
      m << "auto";
    add(m.str());
  }
  if (r.remap == RemapKind::String) {
    std::ostringstream m;
    m << "string S=" << r.remap_window << " W=" << r.remap_local;
    add(m.str());
  }
  if (r.remap == RemapKind::DualChunk) {
    std::ostringstream m;
    m << "dual_chunk s=" << remap::dca_chunk(r) << " w=" << r.remap_local;
    add(m.str());
  }
  if (s.temperature == Temperature::Yarn) add("temperature yarn (t=" + t_text + ")");
  if (s.temperature == Temperature::Llama4) {
    std::ostringstream m;
    m << "temperature llama4 (beta=" << s.temp_beta << ", F=" << (s.temp_floor > 0 ? s.temp_floor : s.trained_context)
      << ")";
    add(m.str());
  }
  if (s.temperature == Temperature::Swan) {
    std::ostringstream m;
    m << "temperature swan (logits x log_a(m + a), a=" << attn::swan_base(s) << ", NoPE layers)";
    add(m.str());
  }
  if (s.logit_scale != 1) {
    std::ostringstream m;
    m << "logits x " << s.logit_scale;
    add(m.str());
  }
  if (s.head_temperature) add("headscale (logits x a learned tau per layer and head)");
  if (r.grown > 0) {
    std::ostringstream m;
    m << "frequencies grown by YaRN over the training windows ";
    for (int j = 0; j <= r.grown; ++j) m << (j ? "->" : "") << r.grow[j];
    m << " (logits x " << grown_attention_factor(r) * grown_attention_factor(r) << ")";
    add(m.str());
  }
  const std::string out = os.str();
  return out.empty() ? "none" : out;
}

nlohmann::json attention_to_json(const AttentionConfig& a, const AttentionSpec& s) {
  nlohmann::json j = {{"preset", a.preset},
                      {"score", stage_name(s.score)},
                      {"scale", stage_name(s.scale)},
                      {"positivity", stage_name(s.positivity)},
                      {"normalize", stage_name(s.normalize)},
                      {"p", s.p},
                      {"offset_rows", s.offset_rows},
                      {"bias", s.bias},
                      {"alibi", s.alibi()},
                      {"position_bias", stage_name(s.position_bias)},
                      {"output_gate", s.output_gate ? "sigmoid" : "none"},
                      {"differential", s.differential ? "on" : "none"},
                      {"trained_context", s.trained_context}};
  if (s.score == Score::Cosine) j["cosine_scale"] = s.cosine_scale;
  if (s.scale == Scale::Fixed) j["scale_value"] = s.scale_value;
  if (s.scale == Scale::ScaleInvariant) j["tau"] = s.tau;
  if (s.normalize == Normalize::Fixed) j["norm_const"] = s.norm_const;
  if (s.softcap > 0) j["softcap"] = s.softcap;
  return j;
}

AttentionConfig attention_variant(const std::string& name, const std::string& what) {
  const size_t plus = name.find('+');
  const std::string preset = name.substr(0, plus), extra = plus == std::string::npos ? "" : name.substr(plus + 1);
  bool known = false, known_extra = extra.empty() || extra == "differential" || extra == "softcap";
  for (const AttentionPreset& a : kAttentionPresets) known = known || preset == a.name;
  for (const char* b : kPositionBiasNames) known_extra = known_extra || extra == b;
  GPT_CHECK(known, what, ": unknown attention preset \"", preset, "\"");
  GPT_CHECK(known_extra, what, ": \"", name, "\": unknown position bias \"", extra,
            "\" (PRESET+BIAS, BIAS one of alibi, kerple_log, kerple_power, forget, fire; or PRESET+differential, "
            "PRESET+softcap)");
  AttentionConfig ac;
  ac.preset = preset;
  if (extra == "differential")
    ac.differential = "on";
  else if (extra == "softcap")
    ac.softcap = 50;  // Gemma 2's attention cap (the cost does not depend on its value)
  else if (!extra.empty())
    ac.position_bias = extra;
  return ac;
}

std::string attention_summary(const AttentionConfig& a, const AttentionSpec& s) {
  std::ostringstream os;
  os << a.preset << " (" << stage_name(s.score);
  if (s.score == Score::Cosine) os << "·" << s.cosine_scale;
  os << ", " << stage_name(s.scale);
  if (s.scale == Scale::Fixed) os << " " << s.scale_value;
  if (s.scale == Scale::ScaleInvariant) os << " tau " << s.tau;
  os << ", " << stage_name(s.positivity);
  if (s.bias != 0) os << " bias " << s.bias;
  os << ", " << stage_name(s.normalize);
  if (s.normalize == Normalize::Fixed) os << " /" << s.norm_const;
  if (s.softcap > 0) os << ", softcap " << s.softcap;
  if (s.sharpened()) os << ", reweight p=" << s.p << " offset_rows=" << s.offset_rows;
  if (s.kerple() || s.forget() || s.fire()) os << ", " << stage_name(s.position_bias);
  if (s.output_gate) os << ", output gate";
  if (s.differential) os << ", differential";
  os << ")";
  return os.str();
}

}  // namespace gpt
