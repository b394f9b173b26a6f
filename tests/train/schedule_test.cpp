#include <gtest/gtest.h>

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
}

}  // namespace
}  // namespace gpt
