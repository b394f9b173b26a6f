#include "config/attention.h"

#include <cstring>
#include <sstream>

#include "core/check.h"

namespace gpt {
namespace {

// The enumerator of `name` among a stage's names (validated by the schema).
template <typename E, size_t N>
E stage_from(const std::string& name, const char* const (&names)[N], const char* key) {
  for (size_t i = 0; i < N; ++i)
    if (name == names[i]) return static_cast<E>(i);
  fail("config: \"attention.", key, "\" = \"", name, "\" is not a valid choice");
}

}  // namespace

const AttentionPreset* find_attention_preset(const std::string& name) {
  for (const auto& p : kAttentionPresets)
    if (name == p.name) return &p;
  return nullptr;
}

AttentionSpec resolve_attention(const AttentionConfig& a, const ModelConfig& m) {
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
  s.bias = a.bias.value_or(default_bias(s.positivity, m.context));
  s.norm_const = a.norm_const.value_or(default_norm_const(m.context));
  s.alibi = m.position == "alibi";
  return s;
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
                      {"alibi", s.alibi},
                      {"trained_context", s.trained_context}};
  if (s.score == Score::Cosine) j["cosine_scale"] = s.cosine_scale;
  if (s.scale == Scale::Fixed) j["scale_value"] = s.scale_value;
  if (s.normalize == Normalize::Fixed) j["norm_const"] = s.norm_const;
  return j;
}

std::string attention_summary(const AttentionConfig& a, const AttentionSpec& s) {
  std::ostringstream os;
  os << a.preset << " (" << stage_name(s.score);
  if (s.score == Score::Cosine) os << "·" << s.cosine_scale;
  os << ", " << stage_name(s.scale);
  if (s.scale == Scale::Fixed) os << " " << s.scale_value;
  os << ", " << stage_name(s.positivity);
  if (s.bias != 0) os << " bias " << s.bias;
  os << ", " << stage_name(s.normalize);
  if (s.normalize == Normalize::Fixed) os << " /" << s.norm_const;
  if (s.sharpened()) os << ", reweight p=" << s.p << " offset_rows=" << s.offset_rows;
  os << ")";
  return os.str();
}

void check_attention_compatible(const AttentionSpec& trained, const AttentionSpec& wanted,
                                const std::string& trained_name, const std::string& wanted_name) {
  GPT_CHECK(trained.score == wanted.score, "attention ", wanted_name, " uses ", stage_name(wanted.score),
            " scores but the checkpoint was trained with ", trained_name, " (", stage_name(trained.score),
            " scores); the score type cannot change after training");
  GPT_CHECK(!wanted.learned_scale() || trained.learned_scale(), "attention ", wanted_name,
            " needs the learned ssmax scales s_h, which the checkpoint (trained with ", trained_name,
            ") does not have");
  GPT_CHECK(!trained.learned_scale() || wanted.learned_scale(), "attention ", wanted_name,
            " would drop the learned ssmax scales s_h that the checkpoint (trained with ", trained_name,
            ") holds; keep scale ssmax (e.g. --attention-set p=15)");
}

}  // namespace gpt
