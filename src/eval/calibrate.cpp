#include "eval/calibrate.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "eval/extrapolation.h"

namespace gpt {

const std::vector<std::string>& calibration_knobs() {
  static const std::vector<std::string> k = {"temperature", "yarn_attn_factor", "ntk_factor", "swan_base",
                                             "head_scale"};
  return k;
}

void check_calibration_knob(const AttentionSpec& spec, const std::string& knob) {
  const auto& ks = calibration_knobs();
  if (std::find(ks.begin(), ks.end(), knob) == ks.end()) {
    std::string valid;
    for (const std::string& k : ks) valid += (valid.empty() ? "" : ", ") + k;
    fail("eval: --calibrate \"", knob, "\" is no knob; valid: ", valid);
  }
  if (knob == "head_scale")
    GPT_CHECK(spec.head_temperature,
              "eval: --calibrate head_scale fits HeadScale's temperature per layer and head, which needs --context "
              "headscale (context.head_scale = 1)");
  if (knob == "yarn_attn_factor")
    GPT_CHECK(spec.rope.scaling == RopeScaling::Yarn || spec.temperature == Temperature::Yarn,
              "eval: --calibrate yarn_attn_factor fits YaRN's attention factor, which needs --context yarn or "
              "--context yarn_temp (context.rope_scaling or context.temperature yarn)");
  if (knob == "swan_base")
    GPT_CHECK(spec.temperature == Temperature::Swan,
              "eval: --calibrate swan_base fits the a of SWAN-GPT's temperature log_a(m + a), which needs --context "
              "swan_temp (context.temperature swan)");
  if (knob == "ntk_factor")
    GPT_CHECK(spec.rope.scaling == RopeScaling::Ntk,
              "eval: --calibrate ntk_factor fits the scale factor of the NTK rule, which needs --context ntk");
}

AttentionSpec with_knob(AttentionSpec spec, const std::string& knob, double v) {
  if (knob == "temperature") spec.logit_scale = v;
  if (knob == "yarn_attn_factor") spec.attn_factor = v;
  if (knob == "ntk_factor") spec.rope.factor = v;
  if (knob == "swan_base") spec.temp_base = v;
  return spec;
}

double knob_value(const AttentionSpec& spec, const std::string& knob, int L) {
  if (knob == "temperature") return spec.logit_scale;
  if (knob == "yarn_attn_factor") return yarn_attention_factor(spec, L);
  if (knob == "ntk_factor") return std::max(1.0, rope::scale_factor(spec.rope, L));
  if (knob == "swan_base") return attn::swan_base(spec);
  return NAN;
}

std::pair<double, double> knob_range(const std::string& knob) {
  if (knob == "temperature") return {0.25, 4.0};
  if (knob == "yarn_attn_factor") return {0.5, 4.0};
  if (knob == "swan_base") return {2.0, 1e6};  // a → ∞ is no scaling
  return {1.0, 128.0};  // ntk_factor
}

double golden_section_log(const std::function<double(double)>& f, double lo, double hi, int iters,
                          std::vector<std::pair<double, double>>& probes) {
  GPT_CHECK(lo > 0 && hi > lo, "golden_section_log: need 0 < lo < hi, got [", lo, ", ", hi, "]");
  const double g = (std::sqrt(5.0) - 1) / 2;  // 0.618...
  double a = std::log(lo), b = std::log(hi);
  auto eval = [&](double u) {
    const double x = std::exp(u), y = f(x);
    probes.emplace_back(x, y);
    return y;
  };
  double c = b - g * (b - a), d = a + g * (b - a);
  double fc = eval(c), fd = eval(d);
  for (int it = 0; it < iters; ++it) {
    if (fc <= fd) {  // the minimum lies in [a, d]
      b = d, d = c, fd = fc;
      c = b - g * (b - a);
      fc = eval(c);
    } else {  // in [c, b]
      a = c, c = d, fc = fd;
      d = a + g * (b - a);
      fd = eval(d);
    }
  }
  return std::exp(fc <= fd ? c : d);
}

nlohmann::json CalibrationResult::to_json() const {
  nlohmann::json p = nlohmann::json::array();
  for (const auto& [x, y] : probes) p.push_back({{"value", x}, {"loss", y}});
  return {{"knob", knob},
          {"multiple", multiple},
          {"tokens", tokens},
          {"default", default_value},
          {"default_loss", default_loss},
          {"fitted", fitted},
          {"fitted_loss", fitted_loss},
          {"probes", p}};
}

double calibration_loss(Model<float>& model, const TokenStream& calib, int multiple, int64_t tokens,
                        int trained_context, int64_t batch_tokens, int64_t* scored) {
  EvalConfig ec;
  ec.multiples = {multiple};
  ec.tokens = tokens;
  ec.span = static_cast<int64_t>(multiple) * trained_context;  // the fit's own windows: sequences of m·T, chunks
  ec.profile_buckets = 1;
  const ExtrapolationResult e = evaluate_extrapolation(model, calib, ec, trained_context, batch_tokens);
  if (scored) *scored = e.tokens_per_multiple;
  return e.rows[0].loss;
}

CalibrationResult calibrate(Model<float>& model, const TokenStream& calib, const std::string& knob, int multiple,
                            int64_t tokens, int trained_context, int64_t batch_tokens, int iters,
                            const std::function<void(double, double)>& progress) {
  const AttentionSpec base = model.attention();
  check_calibration_knob(base, knob);
  GPT_CHECK(knob != "head_scale", "calibrate: head_scale is fitted by gradient (fit_head_scales), not searched");
  const int L = multiple * trained_context;
  CalibrationResult r;
  r.knob = knob;
  r.multiple = multiple;
  auto loss_at = [&](double v) {
    model.set_attention(with_knob(base, knob, v));
    const double loss = calibration_loss(model, calib, multiple, tokens, trained_context, batch_tokens, &r.tokens);
    if (progress) progress(v, loss);
    return loss;
  };
  r.default_value = knob_value(base, knob, L);
  r.default_loss = loss_at(r.default_value);
  r.probes.emplace_back(r.default_value, r.default_loss);
  const auto [lo, hi] = knob_range(knob);
  golden_section_log(loss_at, lo, hi, iters, r.probes);
  const auto best = std::min_element(r.probes.begin(), r.probes.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  r.fitted = best->first;
  r.fitted_loss = best->second;
  model.set_attention(with_knob(base, knob, r.fitted));
  return r;
}

}  // namespace gpt
