// Finite-difference gradient checking in double precision, shared by the tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <random>
#include <vector>

namespace gpt::test {

inline std::vector<double> random_vector(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Max over i of |a-n| / max(|a|+|n|, floor): the relative error between an
// analytic gradient and a numeric one, with a floor so that entries that are
// both ~0 do not divide by zero.
inline double max_rel_error(const std::vector<double>& analytic, const std::vector<double>& numeric,
                            double floor = 1e-8) {
  double worst = 0.0;
  for (size_t i = 0; i < analytic.size(); ++i) {
    double a = analytic[i], n = numeric[i];
    double denom = std::max(std::abs(a) + std::abs(n), floor);
    worst = std::max(worst, std::abs(a - n) / denom);
  }
  return worst;
}

// Numeric gradient of a scalar loss with respect to every entry of x (x is
// perturbed in place and restored), by the five-point central stencil
//   g = (8 (f(x+h) - f(x-h)) - (f(x+2h) - f(x-2h))) / 12h,
// whose truncation error is O(h^4). With h = 1e-3 in double precision both
// truncation (~1e-12 times the fifth derivative) and rounding (~1e-16 |loss| / h)
// stay far below the 1e-6 relative bound the tests assert, even for entries
// whose gradient is small, where the two-point formula's O(h^2) error or its
// rounding error would dominate.
inline std::vector<double> numeric_gradient(std::vector<double>& x, const std::function<double()>& loss,
                                            double h = 1e-3) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    auto at = [&](double d) {
      x[i] = saved + d;
      return loss();
    };
    const double d1 = at(h) - at(-h), d2 = at(2 * h) - at(-2 * h);
    x[i] = saved;
    g[i] = (8 * d1 - d2) / (12 * h);
  }
  return g;
}

// Converts a double test vector to the kernel's scalar type.
template <typename T>
std::vector<T> cast(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}

// max_i |a_i - b_i|, for comparing a float or double result with a reference.
template <typename T>
double max_abs_diff(const std::vector<T>& a, const std::vector<double>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

// The scalar loss used to check a layer: L = Σ out[i] * weights[i] with fixed
// random weights, so that dL/dout = weights.
inline double weighted_sum(const std::vector<double>& out, const std::vector<double>& w) {
  double s = 0.0;
  for (size_t i = 0; i < out.size(); ++i) s += out[i] * w[i];
  return s;
}

// Prints "[gradcheck] LAYER NAME max_rel_err=..." (the figures the closing
// notes quote) and asserts the error is below 1e-6.
inline void expect_gradient(const char* layer, const char* name, const std::vector<double>& analytic,
                            const std::vector<double>& numeric) {
  const double err = max_rel_error(analytic, numeric);
  std::cout << "[gradcheck] " << layer << " " << name << " max_rel_err=" << err << "\n";
  EXPECT_LT(err, 1e-6) << layer << " " << name;
}

// As expect_gradient, with the floor of the relative error at 1e-5 of the
// largest gradient entry: for layers whose gradients span many orders of
// magnitude (sharp weights: cosine scores times 32, re-weighting with p = 15),
// the tiny entries' numeric values are rounding noise (~1e-16·|loss|/h), so
// they are compared absolutely, at 1e-11 of the largest entry, instead.
inline void expect_gradient_scaled(const char* layer, const char* name, const std::vector<double>& analytic,
                                   const std::vector<double>& numeric) {
  double largest = 0;
  for (double x : numeric) largest = std::max(largest, std::abs(x));
  const double err = max_rel_error(analytic, numeric, std::max(1e-5 * largest, 1e-12));
  std::cout << "[gradcheck] " << layer << " " << name << " max_rel_err=" << err << "\n";
  EXPECT_LT(err, 1e-6) << layer << " " << name;
}

}  // namespace gpt::test
