// Calibration at evaluation, the "fit one number" baseline: one scalar of the
// attention (a global temperature, YaRN's attention factor or the NTK scale
// factor) fitted by a 1-D search to the mean loss at one multiple of the
// training context, on calibration tokens that the evaluation never scores
// (gpt eval --calibrate KNOB --calibrate-on M).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/shard.h"
#include "kernels/attention_spec.h"
#include "model/gpt.h"

namespace gpt {

// The knobs: "temperature" (context.logit_scale τ, logits × τ),
// "yarn_attn_factor" (context.attn_factor t, logits × t²; needs rope_scaling
// or temperature yarn), "ntk_factor" (context.factor s of rope_scaling ntk),
// "swan_base" (context.temp_base a of temperature swan, logits × log_a(m + a));
// and "head_scale", which is no scalar: HeadScale's per-head temperatures,
// fitted by gradient (eval/head_scale_fit.h), not by calibrate().
const std::vector<std::string>& calibration_knobs();
// Throws, naming the knob and what it needs, when spec cannot take it.
void check_calibration_knob(const AttentionSpec& spec, const std::string& knob);
// spec with the knob set to v.
AttentionSpec with_knob(AttentionSpec spec, const std::string& knob, double v);
// The knob's value as spec runs it at windows of L tokens (its default when unset).
double knob_value(const AttentionSpec& spec, const std::string& knob, int L);
// The search interval [lo, hi] of a knob (searched on a log scale).
std::pair<double, double> knob_range(const std::string& knob);

// Golden-section search for the minimum of f on [lo, hi] in log(x), with
// `iters` narrowing steps (the interval shrinks by 0.618 each); every probe
// (x, f(x)) is appended to probes. Assumes f unimodal on the interval.
double golden_section_log(const std::function<double(double)>& f, double lo, double hi, int iters,
                          std::vector<std::pair<double, double>>& probes);

// The mean loss of `model` as it runs at multiple m of the trained context
// on the calibration tokens: windows of m·T (chunks), the first `tokens`
// of them; *scored (if given) gets the tokens scored. The measure both fits
// judge by (calibrate, fit_head_scales).
double calibration_loss(Model<float>& model, const TokenStream& calib, int multiple, int64_t tokens,
                        int trained_context, int64_t batch_tokens, int64_t* scored = nullptr);

struct CalibrationResult {
  std::string knob;
  int multiple = 1;
  int64_t tokens = 0;                             // calibration tokens scored per probe
  double default_value = 0, default_loss = 0;     // the knob as the run had it
  double fitted = 0, fitted_loss = 0;             // the best probe (the default included)
  std::vector<std::pair<double, double>> probes;  // (value, loss) in the order tried
  nlohmann::json to_json() const;
};

// Fits the knob on `calib` (the calibration tokens) at multiple m of the
// trained context T, scoring `tokens` tokens per probe; leaves the model
// running the fitted value. progress is called after each probe.
CalibrationResult calibrate(Model<float>& model, const TokenStream& calib, const std::string& knob, int multiple,
                            int64_t tokens, int trained_context, int64_t batch_tokens, int iters = 14,
                            const std::function<void(double, double)>& progress = {});

}  // namespace gpt
