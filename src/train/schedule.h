// Training schedules: the learning rate (linear warmup, then cosine decay to
// a floor) and the attention window's warm-up.
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

// The attention window of training step `step` (0-based) under the window
// warm-up (train.window_start W0 > 0 and train.window_steps S, for training
// windows of N tokens; docs/training_for_length.md): the window grows in
// stages of W0, 2·W0, ... below N, k = ceil(N / W0) stages over the first S
// steps (stage ⌊step·k / S⌋), then full attention from step S on. Returns
// the window in keys, or 0 for full attention (also without the warm-up).
inline int attention_window_at(const TrainConfig& t, int N, int step) {
  if (t.window_start <= 0 || t.window_start >= N || step >= t.window_steps) return 0;
  const int k = (N + t.window_start - 1) / t.window_start;
  const int stage = static_cast<int>(static_cast<long long>(step) * k / t.window_steps);
  const int w = t.window_start * (stage + 1);
  return w >= N ? 0 : w;
}

}  // namespace gpt
