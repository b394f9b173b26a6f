// Learning-rate schedule: linear warmup, then cosine decay to a floor.
#pragma once
#include <cmath>

#include "config/config.h"

namespace gpt {

// step is 0-based. During warmup the rate climbs linearly to lr, reaching
// lr at step warmup_steps - 1; afterwards it follows half a cosine from lr
// (at step warmup_steps) down to lr_min (at the last step, steps - 1).
inline double learning_rate(const TrainConfig& t, int step) {
  if (step < t.warmup_steps) return t.lr * (step + 1) / t.warmup_steps;
  const int decay_steps = t.steps - 1 - t.warmup_steps;
  if (decay_steps <= 0) return t.lr;
  const double progress = static_cast<double>(step - t.warmup_steps) / decay_steps;
  const double kPi = 3.14159265358979323846;
  return t.lr_min + 0.5 * (t.lr - t.lr_min) * (1.0 + std::cos(kPi * std::min(progress, 1.0)));
}

}  // namespace gpt
