// Rotary position embedding: the formula, its gradient, and the properties
// attention relies on (norms kept, identity at position 0, q·k depending on
// m - n only, backward = transpose).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "util/gradcheck.h"

namespace gpt::cpu {
namespace {

using gpt::test::max_rel_error;
using gpt::test::numeric_gradient;
using gpt::test::random_vector;
using gpt::test::weighted_sum;

constexpr double kTheta = 10000.0;

struct Shape {
  int B, T, C, NH;
  size_t size() const { return static_cast<size_t>(B) * T * 3 * C; }
  int D() const { return C / NH; }
};

template <typename T>
std::vector<T> rope(const std::vector<T>& x, const Shape& s, int pos0, double theta = kTheta) {
  std::vector<T> out(x.size());
  rope_forward(out.data(), x.data(), s.B, s.T, s.C, s.NH, RopeSpec{theta}, pos0);
  return out;
}

// qkv (B,T,3C) element (b, t, part, head h, d)
size_t index(const Shape& s, int b, int t, int part, int h, int d) {
  return (static_cast<size_t>(b) * s.T + t) * 3 * s.C + static_cast<size_t>(part) * s.C + h * s.D() + d;
}

double head_dot(const std::vector<double>& x, const Shape& s, int t1, int part1, int t2, int part2, int h) {
  double acc = 0.0;
  for (int d = 0; d < s.D(); ++d) acc += x[index(s, 0, t1, part1, h, d)] * x[index(s, 0, t2, part2, h, d)];
  return acc;
}

// Expects y to be x rotated ("half" layout, every channel of the head) with
// token t of sequence b at position pos(b, t): the formula of Su et al.
// 2021, Eq. 34 (angle m·θ_i, θ_i = θ^(−2i/D)); v passes through.
template <typename Pos>
void expect_rotated(const std::vector<double>& y, const std::vector<double>& x, const Shape& s, Pos pos, double tol) {
  const int half = s.D() / 2;
  for (int b = 0; b < s.B; ++b)
    for (int t = 0; t < s.T; ++t)
      for (int h = 0; h < s.NH; ++h) {
        for (int part = 0; part < 2; ++part)
          for (int i = 0; i < half; ++i) {
            const double a = pos(b, t) * std::pow(kTheta, -2.0 * i / s.D());
            const double x1 = x[index(s, b, t, part, h, i)], x2 = x[index(s, b, t, part, h, i + half)];
            EXPECT_NEAR(y[index(s, b, t, part, h, i)], x1 * std::cos(a) - x2 * std::sin(a), tol);
            EXPECT_NEAR(y[index(s, b, t, part, h, i + half)], x1 * std::sin(a) + x2 * std::cos(a), tol);
          }
        for (int d = 0; d < s.D(); ++d) EXPECT_EQ(y[index(s, b, t, 2, h, d)], x[index(s, b, t, 2, h, d)]);
      }
}

TEST(Rope, MatchesTheFormula) {
  const Shape s{2, 6, 16, 2};
  const int pos0 = 7;
  const std::vector<double> x = random_vector(s.size(), 1);
  expect_rotated(
      rope(x, s, pos0), x, s, [&](int, int t) { return pos0 + t; }, 1e-14);
}

// Interleaved pairs (GPT-J, RoFormer; Su et al. 2021, eq. 34: x_{2i} and
// x_{2i+1} turn by m·θ_i, θ_i = 10000^(−2i/d)), written from that formula,
// partial RoPE included (the first d_r channels, the rest passed through);
// and the same map as the half layout conjugated by the channel permutation
// that sends 2i to i and 2i + 1 to i + d_r/2. Backward by finite differences.
TEST(Rope, InterleavedPairsMatchTheFormulaAndArePermutedHalfPairs) {
  for (int d_r : {8, 4}) {
    const Shape s{2, 5, 16, 2};
    const int pos0 = 3, D = s.D(), half = d_r / 2;
    RopeSpec rs{kTheta};
    rs.rot_dims = d_r;
    rs.interleaved = true;
    const std::vector<double> x = random_vector(s.size(), 2);
    std::vector<double> y(s.size());
    rope_forward(y.data(), x.data(), s.B, s.T, s.C, s.NH, rs, pos0);
    // The permutation: interleaved channel c -> half-layout channel perm[c].
    std::vector<int> perm(D);
    for (int c = 0; c < D; ++c) perm[c] = c >= d_r ? c : (c % 2 == 0 ? c / 2 : c / 2 + half);
    std::vector<double> xp(s.size()), yp(s.size());
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < s.T; ++t)
        for (int part = 0; part < 3; ++part)
          for (int h = 0; h < s.NH; ++h)
            for (int c = 0; c < D; ++c) xp[index(s, b, t, part, h, perm[c])] = x[index(s, b, t, part, h, c)];
    RopeSpec half_rs = rs;
    half_rs.interleaved = false;
    rope_forward(yp.data(), xp.data(), s.B, s.T, s.C, s.NH, half_rs, pos0);
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < s.T; ++t)
        for (int h = 0; h < s.NH; ++h) {
          for (int part = 0; part < 2; ++part) {
            for (int i = 0; i < half; ++i) {
              const double a = (pos0 + t) * std::pow(kTheta, -2.0 * i / d_r);
              const double x1 = x[index(s, b, t, part, h, 2 * i)], x2 = x[index(s, b, t, part, h, 2 * i + 1)];
              EXPECT_NEAR(y[index(s, b, t, part, h, 2 * i)], x1 * std::cos(a) - x2 * std::sin(a), 1e-14);
              EXPECT_NEAR(y[index(s, b, t, part, h, 2 * i + 1)], x1 * std::sin(a) + x2 * std::cos(a), 1e-14);
            }
            for (int c = d_r; c < D; ++c) EXPECT_EQ(y[index(s, b, t, part, h, c)], x[index(s, b, t, part, h, c)]);
          }
          for (int part = 0; part < 3; ++part)
            for (int c = 0; c < D; ++c)
              EXPECT_NEAR(y[index(s, b, t, part, h, c)], yp[index(s, b, t, part, h, perm[c])], 1e-14);
        }
    std::vector<double> xv = x, w = random_vector(s.size(), 3), dx(s.size(), 0.0);
    rope_backward(dx.data(), w.data(), s.B, s.T, s.C, s.NH, rs, pos0);
    auto loss = [&] {
      rope_forward(y.data(), xv.data(), s.B, s.T, s.C, s.NH, rs, pos0);
      return weighted_sum(y, w);
    };
    EXPECT_LT(max_rel_error(dx, numeric_gradient(xv, loss)), 1e-8);
  }
}

TEST(Rope, Gradcheck) {
  const Shape s{2, 5, 12, 3};
  const int pos0 = 3;
  std::vector<double> x = random_vector(s.size(), 2);
  const std::vector<double> w = random_vector(s.size(), 3);
  std::vector<double> analytic(s.size(), 0.0);
  rope_backward(analytic.data(), w.data(), s.B, s.T, s.C, s.NH, RopeSpec{100.0}, pos0);
  // RoPE is linear, so a larger eps has no truncation error and less rounding.
  const std::vector<double> numeric = numeric_gradient(
      x, [&] { return weighted_sum(rope(x, s, pos0, 100.0), w); }, 1e-3);
  const double err = max_rel_error(analytic, numeric);
  std::printf("[gradcheck] rope dinp max_rel_err=%.3e\n", err);
  EXPECT_LT(err, 1e-6);
}

TEST(Rope, BackwardIsTheTransposeAndAccumulates) {
  const Shape s{2, 9, 24, 3};
  const int pos0 = 11;
  const std::vector<double> x = random_vector(s.size(), 4);
  const std::vector<double> g = random_vector(s.size(), 5);
  const std::vector<double> prior = random_vector(s.size(), 6);
  std::vector<double> dx = prior;
  rope_backward(dx.data(), g.data(), s.B, s.T, s.C, s.NH, RopeSpec{kTheta}, pos0);
  // <R x, g> = <x, Rᵀ g>
  double lhs = 0.0, rhs = 0.0;
  const std::vector<double> rx = rope(x, s, pos0);
  for (size_t i = 0; i < x.size(); ++i) {
    lhs += rx[i] * g[i];
    rhs += x[i] * (dx[i] - prior[i]);
  }
  EXPECT_NEAR(lhs, rhs, 1e-11);
  // Rᵀ undoes R exactly up to rounding.
  std::vector<double> back(s.size(), 0.0);
  rope_backward(back.data(), rx.data(), s.B, s.T, s.C, s.NH, RopeSpec{kTheta}, pos0);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], 1e-14);
}

TEST(Rope, KeepsEveryHeadNorm) {
  const Shape s{1, 20, 32, 4};
  const std::vector<double> x = random_vector(s.size(), 7);
  const std::vector<double> y = rope(x, s, 1000);
  for (int t = 0; t < s.T; ++t)
    for (int part = 0; part < 2; ++part)
      for (int h = 0; h < s.NH; ++h)
        EXPECT_NEAR(head_dot(y, s, t, part, t, part, h), head_dot(x, s, t, part, t, part, h), 1e-13);
}

TEST(Rope, PositionZeroIsIdentity) {
  const Shape s{1, 1, 16, 2};
  const std::vector<double> xd = random_vector(s.size(), 8);
  const std::vector<float> xf(xd.begin(), xd.end());
  EXPECT_EQ(rope(xf, s, 0), xf);
  EXPECT_EQ(rope(xd, s, 0), xd);
  EXPECT_NE(rope(xd, s, 1), xd);
}

TEST(Rope, DotProductDependsOnlyOnRelativePosition) {
  const Shape s{1, 12, 16, 2};
  // The same q and k vector at every position, so only the rotation differs.
  std::vector<double> x(s.size());
  const std::vector<double> qk = random_vector(2 * s.C, 9);
  for (int t = 0; t < s.T; ++t)
    for (int c = 0; c < 2 * s.C; ++c) x[static_cast<size_t>(t) * 3 * s.C + c] = qk[c];
  const std::vector<double> y = rope(x, s, 0);
  const std::vector<double> far = rope(x, s, 50000);
  for (int h = 0; h < s.NH; ++h) {
    const double d3 = head_dot(y, s, 3, 0, 0, 1, h);
    EXPECT_NEAR(head_dot(y, s, 7, 0, 4, 1, h), d3, 1e-12);
    EXPECT_NEAR(head_dot(y, s, 11, 0, 8, 1, h), d3, 1e-12);
    EXPECT_NEAR(head_dot(far, s, 11, 0, 8, 1, h), d3, 1e-9);
    // A different offset gives a different product (the check can fail).
    EXPECT_GT(std::abs(head_dot(y, s, 7, 0, 5, 1, h) - d3), 1e-6);
  }
}

TEST(Rope, FarPositionsKeepFloatAccuracy) {
  // At position ~6e4 a float angle would be off by up to ~4e-3 rad.
  const Shape s{1, 4, 16, 2};
  const std::vector<double> xd = random_vector(s.size(), 10);
  const std::vector<float> xf(xd.begin(), xd.end());
  const std::vector<double> yd = rope(xd, s, 60000);
  const std::vector<float> yf = rope(xf, s, 60000);
  for (size_t i = 0; i < yd.size(); ++i) EXPECT_NEAR(yf[i], yd[i], 1e-6);
}

// Position ids (training-time PoSE / randomised positions): token t of
// sequence b is rotated at pos0 + ids[b·T + t], checked against the formula
// (Su et al. 2021, Eq. 34: angle m·θ_i, here m the id); ids 0..T-1 give the
// plain rotation bit for bit; the backward with ids is their transpose
// (finite differences in double).
TEST(Rope, PositionIdsRotateEachTokenAtItsId) {
  const Shape s{2, 5, 16, 2};
  const int pos0 = 3;
  const std::vector<int32_t> ids = {0, 4, 5, 90, 91, 2, 3, 40, 41, 700};
  const std::vector<double> x = random_vector(s.size(), 21);
  std::vector<double> y(s.size());
  rope_forward(y.data(), x.data(), s.B, s.T, s.C, s.NH, RopeSpec{kTheta}, pos0, ids.data());
  expect_rotated(
      y, x, s, [&](int b, int t) { return pos0 + ids[b * s.T + t]; }, 1e-13);
  // Plain ids: the same floats as no ids.
  const std::vector<float> xf(x.begin(), x.end());
  std::vector<int32_t> plain(s.B * s.T);
  for (int i = 0; i < s.B * s.T; ++i) plain[i] = i % s.T;
  std::vector<float> a(s.size()), b(s.size());
  rope_forward(a.data(), xf.data(), s.B, s.T, s.C, s.NH, RopeSpec{kTheta}, pos0);
  rope_forward(b.data(), xf.data(), s.B, s.T, s.C, s.NH, RopeSpec{kTheta}, pos0, plain.data());
  EXPECT_EQ(a, b);
  // The backward with ids against finite differences of the forward.
  std::vector<double> xv = x, dx(s.size(), 0.0);
  const std::vector<double> w = random_vector(s.size(), 22);
  rope_backward(dx.data(), w.data(), s.B, s.T, s.C, s.NH, RopeSpec{kTheta}, pos0, ids.data());
  const std::vector<double> numeric = numeric_gradient(
      xv,
      [&] {
        rope_forward(y.data(), xv.data(), s.B, s.T, s.C, s.NH, RopeSpec{kTheta}, pos0, ids.data());
        return weighted_sum(y, w);
      },
      1e-3);
  const double err = max_rel_error(dx, numeric);
  std::printf("[gradcheck] rope with position ids dinp max_rel_err=%.3e\n", err);
  EXPECT_LT(err, 1e-6);
  // Not with the far copy of a distance remapping.
  RopeSpec far{kTheta};
  far.far_positions = true;
  EXPECT_THROW(rope_forward(y.data(), x.data(), s.B, s.T, s.C, s.NH, far, 0, ids.data()), gpt::Error);
}

TEST(Rope, RejectsOddHeadSize) {
  std::vector<float> x(3 * 6), y(3 * 6);
  EXPECT_THROW(rope_forward(y.data(), x.data(), 1, 1, 6, 2, RopeSpec{kTheta}, 0), gpt::Error);
}

}  // namespace
}  // namespace gpt::cpu
