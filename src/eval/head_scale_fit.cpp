#include "eval/head_scale_fit.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/check.h"
#include "data/rng.h"
#include "eval/calibrate.h"

namespace gpt {

double head_scale_lr(double peak, int step, int steps) {
  const int warmup = std::max(1, steps / 10);
  if (step < warmup) return peak * (step + 1) / warmup;
  const double progress = steps > warmup ? static_cast<double>(step - warmup) / (steps - warmup) : 1.0;
  return peak * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
}

nlohmann::json HeadScaleFit::to_json() const {
  auto grid = [&](const std::vector<double>& v) {
    nlohmann::json g = nlohmann::json::array();
    for (int l = 0; l < layers; ++l)
      g.push_back(std::vector<double>(v.begin() + static_cast<ptrdiff_t>(l) * heads,
                                      v.begin() + static_cast<ptrdiff_t>(l + 1) * heads));
    return g;
  };
  nlohmann::json t = nlohmann::json::array();
  for (const auto& [s, loss] : trace) t.push_back({{"step", s}, {"loss", loss}});
  return {{"knob", "head_scale"},
          {"init", options.init > 0 ? nlohmann::json(options.init) : nlohmann::json("the model's")},
          {"multiple", options.multiple},
          {"steps", options.steps},
          {"lr", options.lr},
          {"batch", options.batch},
          {"floor", options.floor},
          {"seed", options.seed},
          {"tokens", tokens},
          {"initial_loss", initial_loss},
          {"fitted_loss", fitted_loss},
          {"initial", grid(initial)},
          {"fitted", grid(fitted)},
          {"trace", t}};
}

HeadScaleFit fit_head_scales(Model<float>& model, const TokenStream& calib, int trained_context, int64_t batch_tokens,
                             const HeadScaleFitOptions& o, const std::function<void(int, double, double)>& progress) {
  GPT_CHECK(model.attention().head_temperature && model.layout().has("attnscale"),
            "--calibrate head_scale fits HeadScale's per-head temperatures: the model needs context.head_scale = 1 "
            "(--context headscale)");
  GPT_CHECK(o.multiple >= 1 && o.steps >= 1 && o.batch >= 1 && o.lr > 0 && o.floor >= 0 && o.init >= 0,
            "head scale fit: multiple, steps and batch must be >= 1, lr > 0, floor and init >= 0");
  const int64_t L = static_cast<int64_t>(o.multiple) * trained_context;
  GPT_CHECK(calib.size() >= static_cast<uint64_t>(L) + 1, "head scale fit: the calibration tokens (", calib.size(),
            ") cannot hold one window of ", L, " tokens");
  HeadScaleFit r;
  r.options = o;
  r.layers = model.config().n_layer;
  r.heads = model.config().n_head;
  const ParamSpec& spec = model.layout().find("attnscale");
  const size_t n = spec.numel();
  auto& be = model.backend();
  std::vector<float> tau(n), grad(n);
  be.download(tau.data(), model.params() + spec.offset, n);
  GPT_CHECK(o.init == 0 || o.floor == 0 || o.init >= o.floor, "--head-scale-init ", o.init,
            " lies below --head-scale-floor ", o.floor, ", which every step enforces; lower the floor (0 = none)");
  if (o.init > 0) std::fill(tau.begin(), tau.end(), static_cast<float>(o.init));
  be.upload(model.params() + spec.offset, tau.data(), n);
  r.initial.assign(tau.begin(), tau.end());

  // The mean loss at the multiple on the first `tokens` calibration tokens,
  // the same before and after.
  const int64_t tokens = o.tokens > 0 ? o.tokens : static_cast<int64_t>(calib.size()) - 1;
  auto calib_loss = [&] {
    return calibration_loss(model, calib, o.multiple, tokens, trained_context, batch_tokens, &r.tokens);
  };
  r.initial_loss = calib_loss();  // the model as it starts, before the floor acts

  // Adam (β 0.9, 0.999, ε 1e-8, no weight decay) on τ alone.
  std::vector<double> m1(n, 0.0), m2(n, 0.0);
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  std::vector<int32_t> inputs(static_cast<size_t>(o.batch) * L), targets(inputs.size());
  Rng rng(o.seed);
  for (int step = 0; step < o.steps; ++step) {
    for (int b = 0; b < o.batch; ++b) {
      const uint64_t offset = rng.below(calib.size() - static_cast<uint64_t>(L));
      calib.read_example(offset, static_cast<uint64_t>(L), inputs.data() + static_cast<size_t>(b) * L,
                         targets.data() + static_cast<size_t>(b) * L);
    }
    model.zero_grad();
    const double loss = model.forward(inputs.data(), targets.data(), o.batch, static_cast<int>(L));
    model.backward();
    be.download(grad.data(), model.grads() + spec.offset, n);
    const double lr = head_scale_lr(o.lr, step, o.steps);
    const double c1 = 1.0 - std::pow(b1, step + 1), c2 = 1.0 - std::pow(b2, step + 1);
    double mean = 0;
    for (size_t i = 0; i < n; ++i) {
      const double g = grad[i];
      GPT_CHECK(std::isfinite(g), "head scale fit: the gradient of tau ", i, " is not finite at step ", step);
      m1[i] = b1 * m1[i] + (1 - b1) * g;
      m2[i] = b2 * m2[i] + (1 - b2) * g * g;
      double t = tau[i] - lr * (m1[i] / c1) / (std::sqrt(m2[i] / c2) + eps);
      if (o.floor > 0) t = std::max(t, o.floor);
      tau[i] = static_cast<float>(t);
      mean += t;
    }
    be.upload(model.params() + spec.offset, tau.data(), n);
    r.trace.emplace_back(step + 1, loss);
    if (progress) progress(step + 1, loss, mean / static_cast<double>(n));
  }
  model.zero_grad();
  r.fitted.assign(tau.begin(), tau.end());
  r.fitted_loss = calib_loss();
  return r;
}

}  // namespace gpt
