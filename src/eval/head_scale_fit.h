// HeadScale's fit (Wang et al. 2024, "Length Generalization of Causal
// Transformers without Position Encoding", arXiv 2404.12224, the
// head-based scale; code: AntNLP/nope_head_scale, models/llama_nope.py): one
// temperature τ_h per layer and head (context.head_scale; the attnscale
// tensor, every q·k logit of the head times τ_h) trained by gradient descent
// on the language-modelling loss at the target length, every other parameter
// frozen, and kept at or above a floor after each step (their constraint
// τ_h >= 1: no head attends more diffusely than it was trained to). gpt eval
// --calibrate head_scale runs it on calibration tokens the evaluation never
// scores (docs/context_extension.md, "HeadScale").
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/shard.h"
#include "model/gpt.h"

namespace gpt {

struct HeadScaleFitOptions {
  int multiple = 16;   // the fit's windows hold multiple·T tokens
  int steps = 200;     // the authors' 200
  double lr = 0.05;    // Adam's peak learning rate (the authors ran 0.05 and 0.1)
  int batch = 1;       // windows per step
  double floor = 1.0;  // every τ_h >= floor after each step; 0 = no floor
  double init = 0;     // > 0: every τ_h starts here (the authors: the uniform scale fitted first; >= floor);
                       // 0 = as the model has them (the first step raises those below the floor)
  uint64_t seed = 1;   // which windows each step reads
  int64_t tokens = 0;  // calibration tokens scored before and after the fit (0: as many as fit in the split)
};

struct HeadScaleFit {
  HeadScaleFitOptions options;
  int layers = 0, heads = 0;
  std::vector<double> initial, fitted;          // τ (layer-major, layers × heads); initial before the floor acts
  int64_t tokens = 0;                           // tokens scored by default_loss and fitted_loss
  double initial_loss = 0, fitted_loss = 0;     // mean loss at the multiple before and after, on the same tokens
  std::vector<std::pair<int, double>> trace;    // (step, the step's training loss)
  nlohmann::json to_json() const;
};

// The learning rate of step s (0-based) of n: a linear warm-up over the first
// tenth, then a cosine to a tenth of the peak (the authors' schedule).
double head_scale_lr(double peak, int step, int steps);

// Fits the τ_h of `model` (which must run context.head_scale) on `calib` at
// windows of multiple·trained_context tokens; leaves the model with the fitted
// values. progress(step, loss, mean τ) after each step.
HeadScaleFit fit_head_scales(Model<float>& model, const TokenStream& calib, int trained_context, int64_t batch_tokens,
                             const HeadScaleFitOptions& options,
                             const std::function<void(int, double, double)>& progress = {});

}  // namespace gpt
