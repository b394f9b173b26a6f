// AdamW: two steps on three parameters against arithmetic written out by
// hand, with and without decoupled weight decay.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cpu_kernels.h"

namespace {

// lr 0.1, beta1 0.9, beta2 0.999, eps 1e-8; start p = (1, -2, 0.5), m = v = 0.
constexpr double kLr = 0.1, kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;
const std::vector<double> kStart = {1.0, -2.0, 0.5};
const std::vector<double> kGrad1 = {0.1, -0.2, 0.4};
const std::vector<double> kGrad2 = {0.3, 0.1, -0.4};

// Moments: m = 0.9 m + 0.1 g, v = 0.999 v + 0.001 g².
//   step 1: m1 = 0.1 g1           = ( 0.01,  -0.02,   0.04)
//           v1 = 0.001 g1²        = ( 1e-5,   4e-5,   1.6e-4)
//   step 2: m2 = 0.9 m1 + 0.1 g2  = ( 0.009 + 0.03, -0.018 + 0.01, 0.036 - 0.04)
//                                 = ( 0.039, -0.008, -0.004)
//           v2 = 0.999 v1 + 0.001 g2² = (0.999e-5 + 9e-5, 3.996e-5 + 1e-5, 1.5984e-4 + 1.6e-4)
//                                     = ( 9.999e-5, 4.996e-5, 3.1984e-4)
const std::vector<double> kM2 = {0.039, -0.008, -0.004};
const std::vector<double> kV2 = {9.999e-5, 4.996e-5, 3.1984e-4};

// Adam directions d = mhat / (sqrt(vhat) + eps).
// Step 1: bias corrections 1 - 0.9 = 0.1 and 1 - 0.999 = 0.001 give
// mhat = g1, vhat = g1², so d1 = g1 / (|g1| + eps).
const std::vector<double> kD1 = {0.1 / (0.1 + kEps), -0.2 / (0.2 + kEps), 0.4 / (0.4 + kEps)};
// Step 2: corrections 1 - 0.9² = 0.19 and 1 - 0.999² = 0.001999.
const std::vector<double> kD2 = {
    (0.039 / 0.19) / (std::sqrt(9.999e-5 / 0.001999) + kEps),
    (-0.008 / 0.19) / (std::sqrt(4.996e-5 / 0.001999) + kEps),
    (-0.004 / 0.19) / (std::sqrt(3.1984e-4 / 0.001999) + kEps),
};

void run_two_steps(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v, double wd) {
  p = kStart;
  m.assign(3, 0.0);
  v.assign(3, 0.0);
  gpt::cpu::adamw_update(p.data(), kGrad1.data(), m.data(), v.data(), 3, kLr, kBeta1, kBeta2, kEps, wd, 1);
  gpt::cpu::adamw_update(p.data(), kGrad2.data(), m.data(), v.data(), 3, kLr, kBeta1, kBeta2, kEps, wd, 2);
}

TEST(AdamW, TwoStepsWithoutWeightDecay) {
  std::vector<double> p, m, v;
  run_two_steps(p, m, v, 0.0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(m[i], kM2[i], 1e-15);
    EXPECT_NEAR(v[i], kV2[i], 1e-17);
    // p2 = p0 - 0.1 d1 - 0.1 d2, e.g. p[0] = 1 - 0.1·0.9999999 - 0.1·0.91778… ≈ 0.80822
    EXPECT_NEAR(p[i], kStart[i] - kLr * kD1[i] - kLr * kD2[i], 1e-12) << "param " << i;
  }
  EXPECT_NEAR(p[0], 0.808222, 1e-6);  // the same number, spelled out
}

TEST(AdamW, TwoStepsWithDecoupledWeightDecay) {
  constexpr double wd = 0.1;
  std::vector<double> p, m, v;
  run_two_steps(p, m, v, wd);
  for (int i = 0; i < 3; ++i) {
    // Decay does not enter the moments.
    EXPECT_NEAR(m[i], kM2[i], 1e-15);
    EXPECT_NEAR(v[i], kV2[i], 1e-17);
    // p1 = p0 - 0.1 (d1 + 0.1 p0), p2 = p1 - 0.1 (d2 + 0.1 p1)
    const double p1 = kStart[i] - kLr * (kD1[i] + wd * kStart[i]);
    const double p2 = p1 - kLr * (kD2[i] + wd * p1);
    EXPECT_NEAR(p[i], p2, 1e-12) << "param " << i;
  }
  // p[0]: p1 = 1 - 0.1 (0.9999999 + 0.1) = 0.89000001,
  //       p2 = 0.89000001 - 0.1 (0.91778 + 0.089) ≈ 0.789322
  EXPECT_NEAR(p[0], 0.789322, 1e-6);
}

TEST(AdamW, FloatMatchesDouble) {
  std::vector<double> pd, md, vd;
  run_two_steps(pd, md, vd, 0.1);
  std::vector<float> p(kStart.begin(), kStart.end()), m(3, 0.0f), v(3, 0.0f);
  const std::vector<float> g1(kGrad1.begin(), kGrad1.end()), g2(kGrad2.begin(), kGrad2.end());
  gpt::cpu::adamw_update(p.data(), g1.data(), m.data(), v.data(), 3, kLr, kBeta1, kBeta2, kEps, 0.1, 1);
  gpt::cpu::adamw_update(p.data(), g2.data(), m.data(), v.data(), 3, kLr, kBeta1, kBeta2, kEps, 0.1, 2);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(p[i], pd[i], 1e-6);
}

TEST(AdamW, RejectsStepZero) {
  std::vector<double> p = kStart, m(3, 0.0), v(3, 0.0);
  EXPECT_THROW(
      gpt::cpu::adamw_update(p.data(), kGrad1.data(), m.data(), v.data(), 3, kLr, kBeta1, kBeta2, kEps, 0.0, 0),
      gpt::Error);
}

}  // namespace
