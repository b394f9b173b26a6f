// Training schedules: the learning rate (linear warmup, then a cosine decay
// to a floor, or warmup-stable-decay), the attention window's warm-up and
// the training length's schedule.
#pragma once
#include <algorithm>
#include <cmath>

#include "config/attention.h"
#include "config/config.h"

namespace gpt {

// The first step of WSD's decay for runs of `steps` steps: the last
// ceil(decay_fraction · steps) steps decay (at least one past the warmup).
inline int wsd_decay_start(const TrainConfig& t) {
  const int decay = static_cast<int>(std::ceil(t.decay_fraction * t.steps - 1e-9));
  return std::max(t.warmup_steps, t.steps - std::max(decay, 1));
}

// step is 0-based. During warmup the rate climbs linearly to lr, reaching
// lr at step warmup_steps - 1. Then, cosine: half a cosine from lr (at step
// warmup_steps) down to lr_min (at the last step, steps - 1); wsd
// (warmup-stable-decay; Hu et al. 2024, MiniCPM, arXiv 2404.06395, §4): lr
// until wsd_decay_start, then a straight line down to lr_min at the last
// step. Under wsd the rate of a step before the decay does not depend on
// train.steps, so a shorter run is a branch of a longer one's checkpoint.
inline double learning_rate(const TrainConfig& t, int step) {
  if (step < t.warmup_steps) return t.lr * (step + 1) / t.warmup_steps;
  if (t.lr_schedule == "wsd") {
    const int d0 = wsd_decay_start(t), span = t.steps - 1 - d0;
    if (step < d0) return t.lr;
    if (span <= 0) return t.lr_min;
    const double progress = static_cast<double>(step - d0) / span;
    return t.lr + (t.lr_min - t.lr) * std::min(progress, 1.0);
  }
  const int decay_steps = t.steps - 1 - t.warmup_steps;
  if (decay_steps <= 0) return t.lr;
  const double progress = static_cast<double>(step - t.warmup_steps) / decay_steps;
  const double kPi = 3.14159265358979323846;
  return t.lr_min + 0.5 * (t.lr - t.lr_min) * (1.0 + std::cos(kPi * std::min(progress, 1.0)));
}

// The stage of the growing schedule at training step `step` (0-based), for
// training windows of N tokens (docs/training_for_length.md): of the k
// stages of growth_stages (config/attention.h), stage ⌊step·k / S⌋ over the
// first S steps (train.window_steps or train.length_steps), then the last
// (N). -1 without a schedule.
inline int stage_at(const TrainConfig& t, int N, int step) {
  const int k = static_cast<int>(growth_stages(t, N).size());
  if (k == 0) return -1;
  const int S = t.length_start > 0 ? t.length_steps : t.window_steps;
  if (step >= S) return k - 1;
  return static_cast<int>(static_cast<long long>(step) * k / S);
}
// The size of that step's stage (growth_stages: a window in keys or a
// length in tokens); N past the schedule's last stage and without one.
inline int stage_size_at(const TrainConfig& t, int N, int step) {
  const int stage = stage_at(t, N, step);
  return stage < 0 ? N : growth_stages(t, N)[stage];
}
// The attention window of the window warm-up at that step in keys, or 0 for
// full attention (also without the warm-up).
inline int attention_window_at(const TrainConfig& t, int N, int step) {
  if (t.window_start <= 0) return 0;
  const int w = stage_size_at(t, N, step);
  return w >= N ? 0 : w;
}
// The length of the training windows at that step under the length
// schedule: L0·2^stage (N from step S on, and without the schedule).
inline int training_length_at(const TrainConfig& t, int N, int step) {
  return t.length_start > 0 ? stage_size_at(t, N, step) : N;
}

}  // namespace gpt
