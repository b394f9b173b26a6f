#include <gtest/gtest.h>

#include "config/attention.h"
#include "train/schedule.h"

namespace gpt {
namespace {

TEST(Schedule, WarmupThenCosineToFloor) {
  TrainConfig t;
  t.lr = 1e-3;
  t.lr_min = 1e-4;
  t.warmup_steps = 10;
  t.steps = 110;
  EXPECT_DOUBLE_EQ(learning_rate(t, 0), 1e-4);   // 1/10 of lr
  EXPECT_DOUBLE_EQ(learning_rate(t, 4), 5e-4);   // 5/10
  EXPECT_DOUBLE_EQ(learning_rate(t, 9), 1e-3);   // end of warmup: lr
  EXPECT_DOUBLE_EQ(learning_rate(t, 10), 1e-3);  // start of the cosine: lr
  // Decay spans steps 10..109 (99 intervals); halfway the cosine is 0.
  TrainConfig h = t;
  h.steps = 111;                                     // 100 intervals: step 60 is the midpoint
  EXPECT_NEAR(learning_rate(h, 60), 5.5e-4, 1e-15);  // (lr + lr_min) / 2
  EXPECT_DOUBLE_EQ(learning_rate(t, 109), 1e-4);     // last step: the floor
  for (int s = 10; s < 109; ++s) EXPECT_GE(learning_rate(t, s), learning_rate(t, s + 1));
}

TEST(Schedule, NoWarmup) {
  TrainConfig t;
  t.lr = 2.0;
  t.lr_min = 0.0;
  t.warmup_steps = 0;
  t.steps = 3;
  EXPECT_DOUBLE_EQ(learning_rate(t, 0), 2.0);
  EXPECT_NEAR(learning_rate(t, 1), 1.0, 1e-15);
  EXPECT_NEAR(learning_rate(t, 2), 0.0, 1e-15);
}

TEST(Schedule, SingleStepRunUsesPeakRate) {
  TrainConfig t;
  t.lr = 0.5;
  t.lr_min = 0.1;
  t.warmup_steps = 0;
  t.steps = 1;
  EXPECT_DOUBLE_EQ(learning_rate(t, 0), 0.5);
}

// Warmup-stable-decay: the warmup, lr until the last ceil(f·steps) steps,
// then a straight line to lr_min at the last step; the rates before the
// decay do not depend on train.steps (a shorter run is a branch of a longer).
TEST(Schedule, WarmupStableDecay) {
  TrainConfig t;
  t.lr = 1.0;
  t.lr_min = 0.1;
  t.warmup_steps = 2;
  t.steps = 10;
  t.lr_schedule = "wsd";
  t.decay_fraction = 0.3;  // the last 3 steps decay: from step 7 (lr) to step 9 (lr_min)
  EXPECT_EQ(wsd_decay_start(t), 7);
  const double expect[] = {0.5, 1, 1, 1, 1, 1, 1, 1, 0.55, 0.1};
  for (int step = 0; step < 10; ++step) EXPECT_NEAR(learning_rate(t, step), expect[step], 1e-15) << step;
  TrainConfig longer = t;
  longer.steps = 40;  // decays from step 28
  for (int step = 0; step < 7; ++step) EXPECT_EQ(learning_rate(longer, step), learning_rate(t, step)) << step;
  EXPECT_EQ(learning_rate(longer, 27), 1.0);
  EXPECT_LT(learning_rate(longer, 29), 1.0);
  t.decay_fraction = 0;  // at least the last step decays
  EXPECT_EQ(wsd_decay_start(t), 9);
  EXPECT_EQ(learning_rate(t, 9), 0.1);
}

// The window warm-up: stages of W0, 2·W0, ... below N over the first S
// steps, each ⌊step·k / S⌋ with k = ceil(N / W0), then full attention (0).
TEST(Schedule, WindowWarmupGrowsInStagesToFullAttention) {
  TrainConfig t;
  EXPECT_EQ(attention_window_at(t, 128, 0), 0) << "off by default";
  t.window_start = 32;
  t.window_steps = 8;  // k = 4 stages: 32, 64, 96, then 128 = full
  const int expect[] = {32, 32, 64, 64, 96, 96, 0, 0, 0, 0};
  for (int step = 0; step < 10; ++step) EXPECT_EQ(attention_window_at(t, 128, step), expect[step]) << step;
  t.window_start = 48;  // k = 3: 48, 96, then 144 >= 128 = full
  t.window_steps = 3;
  EXPECT_EQ(attention_window_at(t, 128, 0), 48);
  EXPECT_EQ(attention_window_at(t, 128, 1), 96);
  EXPECT_EQ(attention_window_at(t, 128, 2), 0);
  t.window_start = 128;  // not below N: nothing to warm up
  EXPECT_EQ(attention_window_at(t, 128, 0), 0);
  EXPECT_EQ(stage_at(t, 128, 0), -1);
  EXPECT_TRUE(window_stages(t, 128).empty());
}

// The stages as train.grow_yarn grows the frequencies through them: the
// windows W0, 2·W0, ... below N, then N; the stage of each step indexes them.
TEST(Schedule, WindowStagesListTheWarmupWindows) {
  TrainConfig t;
  t.window_start = 48;
  t.window_steps = 6;
  EXPECT_EQ(window_stages(t, 128), (std::vector<int>{48, 96, 128}));
  const int expect[] = {0, 0, 1, 1, 2, 2, 2, 2};
  for (int step = 0; step < 8; ++step) {
    EXPECT_EQ(stage_at(t, 128, step), expect[step]) << step;
    const int w = window_stages(t, 128)[expect[step]];
    EXPECT_EQ(attention_window_at(t, 128, step), w < 128 ? w : 0) << step;
  }
  t.window_start = 32;
  EXPECT_EQ(window_stages(t, 128), (std::vector<int>{32, 64, 96, 128}));
  // The length schedule: lengths doubling from L0 to N, stage ⌊step·k / S⌋.
  TrainConfig l;
  l.length_start = 16;
  l.length_steps = 8;
  EXPECT_EQ(length_stages(l, 128), (std::vector<int>{16, 32, 64, 128}));
  EXPECT_EQ(growth_stages(l, 128), length_stages(l, 128));
  const int lengths[] = {16, 16, 32, 32, 64, 64, 128, 128, 128};
  for (int step = 0; step < 9; ++step) EXPECT_EQ(training_length_at(l, 128, step), lengths[step]) << step;
  EXPECT_EQ(attention_window_at(l, 128, 0), 0) << "the length schedule sets no window";
  EXPECT_EQ(training_length_at(t, 128, 0), 128) << "the window warm-up keeps the length";
}

}  // namespace
}  // namespace gpt
