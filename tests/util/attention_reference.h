// Plain double-precision forms of docs/attention.md's stage 2 and stage 3, written
// from the doc's formulas (not from kernels/attention_spec.h), for the T×T
// references of the attention tests.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention_spec.h"

namespace gpt::test {

// λ_i of row index i (1-based; d the head size, s_h the learned ssmax scale,
// or with HeadScale the head's temperature τ_h).
inline double ref_lambda_scale(const AttentionSpec& s, double i, int d, double s_h);
inline double ref_lambda(const AttentionSpec& s, double i, int d, double s_h) {
  // HeadScale (Wang et al. 2024, arXiv 2404.12224, the head-based scale; the
  // authors' ScaleMixin.query_scale in AntNLP/nope_head_scale): the head's
  // queries are multiplied by τ_h/√d instead of 1/√d, so every q·k logit by τ_h.
  return s.head_temperature ? s_h * ref_lambda_scale(s, i, d, s_h) : ref_lambda_scale(s, i, d, s_h);
}
inline double ref_lambda_scale(const AttentionSpec& s, double i, int d, double s_h) {
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
    case Scale::ScaleInvariant:  // its factor depends on the key: tests/kernels/cpu/scale_invariant_test.cpp
      return 1;
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

// Stage 4 on one row: a holds φ(x_j) of the row's keys and becomes the
// weights a_j, from the formulas of docs/attention.md (l1, none, fixed) and
// docs/contenders.md: off_by_one  φ(x_j) / (φ(0) + Σ_k φ(x_k))   (e^x / (1 + Σ e^x));
// sink  φ(x_j) / (φ(ζ) + Σ_k φ(x_k)), ζ the head's sink logit;
// softpick  relu(φ(x_j) − φ(0)) / (Σ_k |φ(x_k) − φ(0)| + 1e-6)
// (relu(e^x − 1) / (Σ |e^x − 1| + ε), ε = 1e-6); stick_breaking (a holds the
// break fractions β_j = σ(x_j), the row's own key last): β_j·Π_{j<k<i}(1 − β_k)
// for the keys before it, direct products, and 1 minus their sum for the own
// key (the paper's code adds that remainder times v_i).
inline void ref_normalize(const AttentionSpec& s, std::vector<double>& a, double zeta) {
  double z = 0;
  for (double v : a) z += v;
  const double phi0 = ref_phi(s.positivity, 0.0);
  switch (s.normalize) {
    case Normalize::L1:
      for (double& v : a) v = z > 0 ? v / z : 0;
      return;
    case Normalize::None:
      return;
    case Normalize::Fixed:
      for (double& v : a) v /= s.norm_const;
      return;
    case Normalize::OffByOne:
      for (double& v : a) v /= phi0 + z;
      return;
    case Normalize::Sink: {
      const double zs = ref_phi(s.positivity, zeta) + z;
      for (double& v : a) v /= zs;
      return;
    }
    case Normalize::StickBreaking: {
      const size_t n = a.size();
      std::vector<double> w(n, 0.0);
      double taken = 0;
      for (size_t j = 0; j + 1 < n; ++j) {
        double left = 1;  // what the later keys k (j < k < own key) leave
        for (size_t k = j + 1; k + 1 < n; ++k) left *= 1 - a[k];
        taken += (w[j] = a[j] * left);
      }
      w[n - 1] = 1 - taken;
      a = w;
      return;
    }
    case Normalize::Softpick: {
      double zp = 1e-6;
      for (double v : a) zp += std::abs(v - phi0);
      for (double& v : a) v = std::max(0.0, v - phi0) / zp;
      return;
    }
  }
}

}  // namespace gpt::test
