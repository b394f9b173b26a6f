// vec_exp, vec_log and vec_log1p against the double functions: errors within
// a few float ulps over their ranges, and vec_exp's documented clamps.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "kernels/cpu/vec_math.h"

namespace {

TEST(VecMath, ExpIsWithinTwoUlpOverTheRange) {
  double worst = 0;
  for (double x = -87.0; x <= 88.0; x += 0.000731) {
    const float xf = static_cast<float>(x);
    const double ref = std::exp(static_cast<double>(xf));
    worst = std::max(worst, std::abs(gpt::cpu::vec_exp(xf) - ref) / ref);
  }
  std::cout << "[vec_exp] max relative error " << worst << "\n";
  EXPECT_LT(worst, 2.5e-7);  // 2 ulp of float is 2.4e-7 at worst
  EXPECT_EQ(gpt::cpu::vec_exp(0.0f), 1.0f);
}

// Below −87 (the last normal e^x) exp is 0, never a denormal; at −87 it is
// e^−87; above 88 it clamps instead of overflowing.
TEST(VecMath, ExpFlushesBelowTheNormalRangeAndClampsAbove) {
  EXPECT_EQ(gpt::cpu::vec_exp(-1000.0f), 0.0f);
  EXPECT_EQ(gpt::cpu::vec_exp(-87.5f), 0.0f);
  EXPECT_NEAR(gpt::cpu::vec_exp(-87.0f), std::exp(-87.0), 1e-44);
  EXPECT_GT(gpt::cpu::vec_exp(-87.0f), 0.0f);
  EXPECT_TRUE(std::isfinite(gpt::cpu::vec_exp(1000.0f)));
  EXPECT_NEAR(gpt::cpu::vec_exp(1000.0f) / std::exp(88.0), 1.0, 1e-6);
}

TEST(VecMath, LogIsWithinAFewUlpOverTheNormalRange) {
  double worst = 0;
  for (double e = -125.5; e <= 127.5; e += 0.000371) {
    const float x = static_cast<float>(std::exp2(e));
    const double ref = std::log(static_cast<double>(x));
    // absolute error near x = 1 (ln x -> 0), relative elsewhere
    worst = std::max(worst, std::abs(gpt::cpu::vec_log(x) - ref) / std::max(std::abs(ref), 1.0));
  }
  std::cout << "[vec_log] max error " << worst << "\n";
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(gpt::cpu::vec_log(1.0f), 0.0f);
}

TEST(VecMath, Log1pIsAccurateForTinyAndLargeArguments) {
  double worst = 0;
  for (double e = -40; e <= 20; e += 0.0013) {
    const float y = static_cast<float>(std::exp2(e));
    const double ref = std::log1p(static_cast<double>(y));
    worst = std::max(worst, std::abs(gpt::cpu::vec_log1p(y) - ref) / ref);
  }
  std::cout << "[vec_log1p] max relative error " << worst << "\n";
  EXPECT_LT(worst, 4e-7);
  EXPECT_EQ(gpt::cpu::vec_log1p(0.0f), 0.0f);
  EXPECT_EQ(gpt::cpu::vec_log1p(1e-30f), 1e-30f);
}

}  // namespace
