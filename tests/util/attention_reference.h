// Plain double-precision forms of attention.md's stage 2 and stage 3, written
// from the doc's formulas (not from kernels/attention_spec.h), for the T×T
// references of the attention tests.
#pragma once
#include <algorithm>
#include <cmath>

#include "kernels/attention_spec.h"

namespace gpt::test {

// λ_i of row index i (1-based; d the head size, s_h the learned ssmax scale).
inline double ref_lambda(const AttentionSpec& s, double i, int d, double s_h) {
  const double N = s.trained_context;
  switch (s.scale) {
    case Scale::None:
      return 1;
    case Scale::Logn:
      return std::max(1.0, std::log(i) / std::log(N));
    case Scale::Ssmax:
      return s_h * std::log(i);
    case Scale::Infoscale:
      return std::max(1.0, std::sqrt(1 - std::pow(i, -2.0 / d)) / std::sqrt(1 - std::pow(N, -2.0 / d)));
    case Scale::Lssa:
      return std::log(d) * std::log(i);
    case Scale::Fixed:
      return s.scale_value;
  }
  return NAN;
}

// φ(x).
inline double ref_phi(Positivity k, double x) {
  switch (k) {
    case Positivity::Exp:
      return std::exp(x);
    case Positivity::Softplus:
      return std::log1p(std::exp(x));
    case Positivity::Sigmoid:
      return 1 / (1 + std::exp(-x));
    case Positivity::Relu:
      return std::max(0.0, x);
  }
  return NAN;
}

}  // namespace gpt::test
