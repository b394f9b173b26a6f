// Muon's CPU kernels (kernels/cpu/muon.cpp) against the plain double
// reference of tests/util/muon_reference.h, and the Newton–Schulz iteration
// against its scalar polynomial on a matrix whose singular values are known.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/muon_spec.h"
#include "util/gradcheck.h"
#include "util/muon_reference.h"

namespace gpt {
namespace {

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// Wide, tall and square matrices (the tall ones run transposed).
TEST(Muon, NewtonSchulzMatchesThePlainReference) {
  for (auto [rows, cols] : {std::pair{5, 9}, std::pair{9, 5}, std::pair{7, 7}, std::pair{1, 6}, std::pair{32, 96}}) {
    const auto g = test::random_vector(static_cast<size_t>(rows) * cols, 3 + rows, -2.0, 2.0);
    const auto ref = test::ref_newton_schulz(g, rows, cols);
    std::vector<double> x = g, work(muon::work_size(rows, cols));
    cpu::newton_schulz(x.data(), rows, cols, muon::kSteps, work.data());
    const double err = max_abs_diff(x, ref);
    std::vector<float> xf(g.begin(), g.end()), workf(work.size());
    cpu::newton_schulz(xf.data(), rows, cols, muon::kSteps, workf.data());
    const double errf = max_abs_diff(std::vector<double>(xf.begin(), xf.end()), ref);
    std::printf("[muon] newton_schulz %dx%d: double max error %.3g, float %.3g\n", rows, cols, err, errf);
    EXPECT_LT(err, 1e-12) << rows << "x" << cols;
    EXPECT_LT(errf, 2e-5) << rows << "x" << cols;
  }
}

// On G = s·Q with orthonormal rows Q (m × n), G/‖G‖_F = Q/√m: every singular
// value is 1/√m, and each step maps a singular value σ to aσ + bσ³ + cσ⁵. So
// the result is φ⁵(1/√m)·Q, φ the scalar polynomial: a check of the matrix
// products that shares nothing with them.
TEST(Muon, NewtonSchulzActsOnSingularValuesAsItsPolynomial) {
  const int m = 4, n = 10;
  std::vector<double> q(static_cast<size_t>(m) * n, 0.0);
  for (int i = 0; i < m; ++i) q[i * n + (3 * i + 1) % n] = (i % 2 ? -1.0 : 1.0);  // distinct columns
  std::vector<double> g = q;
  for (double& v : g) v *= 7.5;
  double sigma = 1.0 / (std::sqrt(static_cast<double>(m)) + 1e-7 / 7.5);  // (‖G‖ + eps) guard
  for (int s = 0; s < 5; ++s) sigma = 3.4445 * sigma - 4.7750 * std::pow(sigma, 3) + 2.0315 * std::pow(sigma, 5);
  std::vector<double> work(muon::work_size(m, n));
  cpu::newton_schulz(g.data(), m, n, muon::kSteps, work.data());
  for (size_t k = 0; k < g.size(); ++k) EXPECT_NEAR(g[k], sigma * q[k], 1e-12) << k;
  // The reference's claim: singular values end up within about (0.5, 1.5).
  EXPECT_GT(sigma, 0.5);
  EXPECT_LT(sigma, 1.5);
  std::printf("[muon] singular value 1/sqrt(%d) -> %.6f after 5 steps\n", m, sigma);
}

// Nesterov momentum (muon.py's momentum.lerp_(g, 1-β); g.lerp_(momentum, β))
// and the update p ← p·(1 − lr·wd) − lr·scale·O, two steps by hand.
TEST(Muon, MomentumAndUpdateFollowTheReference) {
  const double beta = 0.95;
  std::vector<double> m = {0.0, 0.0, 0.0};
  const std::vector<double> g1 = {0.2, -0.4, 1.0}, g2 = {-0.6, 0.1, 0.3};
  std::vector<double> u = g1;
  cpu::muon_momentum(u.data(), m.data(), 3, beta);
  for (int i = 0; i < 3; ++i) {
    const double mi = 0.05 * g1[i];  // 0 + (1 − β)(g − 0)
    EXPECT_NEAR(m[i], mi, 1e-15);
    EXPECT_NEAR(u[i], g1[i] + beta * (mi - g1[i]), 1e-15);
  }
  u = g2;
  const std::vector<double> m1 = m;
  cpu::muon_momentum(u.data(), m.data(), 3, beta);
  for (int i = 0; i < 3; ++i) {
    const double mi = m1[i] + 0.05 * (g2[i] - m1[i]);
    EXPECT_NEAR(m[i], mi, 1e-15);
    EXPECT_NEAR(u[i], g2[i] + beta * (mi - g2[i]), 1e-15);
  }
  std::vector<double> p = {1.0, -2.0, 0.5};
  const std::vector<double> o = {0.3, -0.1, 0.7};
  cpu::muon_apply(p.data(), o.data(), 3, 0.02, 1.5, 0.1);
  const std::vector<double> want = {1.0 * (1 - 0.002) - 0.02 * 1.5 * 0.3, -2.0 * (1 - 0.002) + 0.02 * 1.5 * 0.1,
                                    0.5 * (1 - 0.002) - 0.02 * 1.5 * 0.7};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(p[i], want[i], 1e-15);
  EXPECT_DOUBLE_EQ(muon::update_scale(96, 32), std::sqrt(3.0));
  EXPECT_DOUBLE_EQ(muon::update_scale(32, 96), 1.0);
  std::vector<double> w(4);
  EXPECT_THROW(cpu::newton_schulz(w.data(), 0, 4, 5, w.data()), Error);
}

}  // namespace
}  // namespace gpt
