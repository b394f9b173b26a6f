// vec_exp against the double exponential: relative error within a few float
// ulps over the whole clamped range, and the documented clamps outside it.
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

TEST(VecMath, ExpClampsInsteadOfOverflowing) {
  EXPECT_NEAR(gpt::cpu::vec_exp(-1000.0f), std::exp(-87.0), 1e-44);
  EXPECT_GT(gpt::cpu::vec_exp(-1000.0f), 0.0f);
  EXPECT_TRUE(std::isfinite(gpt::cpu::vec_exp(1000.0f)));
  EXPECT_NEAR(gpt::cpu::vec_exp(1000.0f) / std::exp(88.0), 1.0, 1e-6);
}

}  // namespace
