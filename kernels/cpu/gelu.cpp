// GELU, tanh approximation (Hendrycks & Gimpel 2016, as used by GPT-2):
// gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x³))), k = sqrt(2/pi).
//
// double evaluates the formula with std::tanh (gradient checks). float uses
// the identity 0.5 (1 + tanh(u)) = sigmoid(2u), so gelu(x) = x / (1 + e^(-2u)),
// with a branch-free exp (kernels/cpu/vec_math.h) that the compiler
// vectorises; the loops are compiled for AVX-512, AVX2 and baseline x86-64 and
// the processor picks one at load time (target_clones). Element-wise, so the
// result does not depend on the thread count.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

namespace {
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kCubic = 0.044715;
// Elements per parallel work item of the float loops.
constexpr size_t kChunk = size_t(1) << 14;

GPT_VEC_CLONES void gelu_forward_range(float* out, const float* inp, size_t n) {
  const float k2 = float(2 * kSqrt2OverPi), a = float(kCubic);
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = x / (1.0f + vec_exp(-k2 * (x + a * x * x * x)));
  }
}

GPT_VEC_CLONES void gelu_backward_range(float* dinp, const float* inp, const float* dout, size_t n) {
  const float k = float(kSqrt2OverPi), a = float(kCubic);
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    // s = sigmoid(2u) = 0.5 (1 + tanh u); 1 - tanh² u = 4 s (1 - s), so
    // d/dx [0.5 x (1 + tanh u)] = s + 2 x s (1 - s) k (1 + 3 a x²).
    const float s = 1.0f / (1.0f + vec_exp(-2.0f * k * (x + a * x * x * x)));
    // Past |x| = 100 the second term is below 1e-30 (s(1 - s) < e^-87); the
    // clamp keeps x² finite there, where 0·inf would make a NaN.
    float xc = x > -100.0f ? x : -100.0f;
    xc = xc < 100.0f ? xc : 100.0f;
    const float grad = s + 2.0f * xc * s * (1.0f - s) * k * (1.0f + 3.0f * a * xc * xc);
    dinp[i] += grad * dout[i];
  }
}

}  // namespace

template <>
void gelu_forward<float>(float* out, const float* inp, size_t n) {
  const long chunks = static_cast<long>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (long c = 0; c < chunks; ++c) {
    const size_t lo = c * kChunk, len = std::min(kChunk, n - lo);
    gelu_forward_range(out + lo, inp + lo, len);
  }
}

template <>
void gelu_backward<float>(float* dinp, const float* inp, const float* dout, size_t n) {
  const long chunks = static_cast<long>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (long c = 0; c < chunks; ++c) {
    const size_t lo = c * kChunk, len = std::min(kChunk, n - lo);
    gelu_backward_range(dinp + lo, inp + lo, dout + lo, len);
  }
}

template <>
void gelu_forward<double>(double* out, const double* inp, size_t n) {
  const double k = kSqrt2OverPi, a = kCubic;
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) {
    const double x = inp[i];
    out[i] = 0.5 * x * (1.0 + std::tanh(k * (x + a * x * x * x)));
  }
}

template <>
void gelu_backward<double>(double* dinp, const double* inp, const double* dout, size_t n) {
  const double k = kSqrt2OverPi, a = kCubic;
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) {
    const double x = inp[i];
    const double th = std::tanh(k * (x + a * x * x * x));
    // d/dx [0.5 x (1 + th)] = 0.5 (1 + th) + 0.5 x (1 - th²) k (1 + 3 a x²)
    const double grad = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * a * x * x);
    dinp[i] += grad * dout[i];
  }
}

}  // namespace gpt::cpu
