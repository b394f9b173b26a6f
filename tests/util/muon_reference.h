// Muon's update written out plainly in double from the reference
// implementation's formulas (KellerJordan/Muon, muon.py: muon_update and
// zeropower_via_newtonschulz5), not from kernels/muon_spec.h: the constants
// are spelled again here, so a typo on either side fails the tests.
#pragma once
#include <cmath>
#include <vector>

namespace gpt::test {

// The quintic Newton–Schulz iteration on g (rows × cols, row-major): X = g
// (transposed when rows > cols) divided by (‖g‖_F + 1e-7), then `steps` times
// A = X·Xᵀ, B = b·A + c·A·A, X = a·X + B·X with (a, b, c) = (3.4445, −4.7750,
// 2.0315); the result transposed back.
inline std::vector<double> ref_newton_schulz(const std::vector<double>& g, int rows, int cols, int steps = 5) {
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  const bool tall = rows > cols;
  const int m = tall ? cols : rows, n = tall ? rows : cols;
  double norm = 0;
  for (double v : g) norm += v * v;
  norm = std::sqrt(norm) + 1e-7;
  std::vector<double> X(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) X[i * n + j] = (tall ? g[j * cols + i] : g[i * cols + j]) / norm;
  for (int s = 0; s < steps; ++s) {
    std::vector<double> A(static_cast<size_t>(m) * m, 0.0), B(A.size(), 0.0), next(X.size(), 0.0);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j)
        for (int k = 0; k < n; ++k) A[i * m + j] += X[i * n + k] * X[j * n + k];
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) {
        double aa = 0;
        for (int k = 0; k < m; ++k) aa += A[i * m + k] * A[k * m + j];
        B[i * m + j] = b * A[i * m + j] + c * aa;
      }
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double bx = 0;
        for (int k = 0; k < m; ++k) bx += B[i * m + k] * X[k * n + j];
        next[i * n + j] = a * X[i * n + j] + bx;
      }
    X = next;
  }
  std::vector<double> out(g.size());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) (tall ? out[j * cols + i] : out[i * cols + j]) = X[i * n + j];
  return out;
}

}  // namespace gpt::test
