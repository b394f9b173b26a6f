// GELU, tanh approximation (Hendrycks & Gimpel 2016, as used by GPT-2):
// gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x³))), k = sqrt(2/pi).
#include "kernels/cpu/cpu_kernels.h"

#include <cmath>

namespace gpt::cpu {

namespace {
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kCubic = 0.044715;
// Loops over fewer elements than this run on the calling thread: waking the
// OpenMP team costs microseconds (and a scheduler tick on a busy machine).
constexpr size_t kMinParallelWork = size_t(1) << 15;
}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n) {
  const T k = T(kSqrt2OverPi), a = T(kCubic);
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) {
    const T x = inp[i];
    out[i] = T(0.5) * x * (T(1) + std::tanh(k * (x + a * x * x * x)));
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  const T k = T(kSqrt2OverPi), a = T(kCubic);
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T th = std::tanh(k * (x + a * x * x * x));
    // d/dx [0.5 x (1 + th)] = 0.5 (1 + th) + 0.5 x (1 - th²) k (1 + 3 a x²)
    const T grad = T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * k * (T(1) + T(3) * a * x * x);
    dinp[i] += grad * dout[i];
  }
}

template void gelu_forward<float>(float*, const float*, size_t);
template void gelu_forward<double>(double*, const double*, size_t);
template void gelu_backward<float>(float*, const float*, const float*, size_t);
template void gelu_backward<double>(double*, const double*, const double*, size_t);

}  // namespace gpt::cpu
