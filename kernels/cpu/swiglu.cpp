// The MLP activations beside GPT-2's tanh GELU (kernels/cpu/gelu.cpp).
// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"; the MLP of Llama,
// Mistral and Qwen): out = silu(gate) · up, silu(x) = x·σ(x), with gate and
// up the two halves of one (N, 2F) projection (gate first). docs/blocks.md.
//
// float uses the branch-free exp of kernels/cpu/vec_math.h (e^x capped near
// 1.7e38, so σ(x) underflows to 0 instead of dividing by inf); double calls
// std::exp (gradient checks). Element-wise over rows, so the result does not
// depend on the thread count.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec_math.h"

namespace gpt::cpu {

namespace {

inline float sigmoid(float x) { return 1.0f / (1.0f + vec_exp(-x)); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

GPT_VEC_CLONES void swiglu_forward_row(float* y, const float* gate, const float* up, int F) {
#pragma omp simd
  for (int f = 0; f < F; ++f) y[f] = gate[f] * sigmoid(gate[f]) * up[f];
}
void swiglu_forward_row(double* y, const double* gate, const double* up, int F) {
  for (int f = 0; f < F; ++f) y[f] = gate[f] * sigmoid(gate[f]) * up[f];
}

// d/dg [g σ(g)] = σ(g)(1 + g(1 − σ(g))); d/du = silu(g).
GPT_VEC_CLONES void swiglu_backward_row(float* dgate, float* dup, const float* gate, const float* up, const float* dy,
                                        int F) {
#pragma omp simd
  for (int f = 0; f < F; ++f) {
    const float g = gate[f], s = sigmoid(g);
    dgate[f] += dy[f] * up[f] * s * (1.0f + g * (1.0f - s));
    dup[f] += dy[f] * g * s;
  }
}
void swiglu_backward_row(double* dgate, double* dup, const double* gate, const double* up, const double* dy, int F) {
  for (int f = 0; f < F; ++f) {
    const double g = gate[f], s = sigmoid(g);
    dgate[f] += dy[f] * up[f] * s * (1.0 + g * (1.0 - s));
    dup[f] += dy[f] * g * s;
  }
}

}  // namespace

template <typename T>
void swiglu_forward(T* out, const T* inp, int N, int F) {
#pragma omp parallel for schedule(static) if (size_t(N) * F >= kMinParallelWork)
  for (int n = 0; n < N; ++n) {
    const T* h = inp + static_cast<size_t>(n) * 2 * F;
    swiglu_forward_row(out + static_cast<size_t>(n) * F, h, h + F, F);
  }
}

template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int N, int F) {
#pragma omp parallel for schedule(static) if (size_t(N) * F >= kMinParallelWork)
  for (int n = 0; n < N; ++n) {
    const T* h = inp + static_cast<size_t>(n) * 2 * F;
    T* dh = dinp + static_cast<size_t>(n) * 2 * F;
    swiglu_backward_row(dh, dh + F, h, h + F, dout + static_cast<size_t>(n) * F, F);
  }
}

// ReLU² (So et al. 2021, "Primer"; modded-nanogpt): relu(x)².
template <typename T>
void relu2_forward(T* out, const T* inp, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) {
    const T r = inp[i] > T(0) ? inp[i] : T(0);
    out[i] = r * r;
  }
}

template <typename T>
void relu2_backward(T* dinp, const T* inp, const T* dout, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) {
    const T r = inp[i] > T(0) ? inp[i] : T(0);
    dinp[i] += T(2) * r * dout[i];
  }
}

// Exact GELU (Hendrycks & Gimpel 2016, eq. 1; GPT-NeoX, Pythia, BERT):
// x·Φ(x) = 0.5·x·(1 + erf(x/√2)), derivative Φ(x) + x·φ(x). In T with std::erf
// (not vectorised: it serves imported models, not the training hot path).
template <typename T>
void gelu_erf_forward(T* out, const T* inp, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) {
    const T x = inp[i];
    out[i] = T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
  }
}

template <typename T>
void gelu_erf_backward(T* dinp, const T* inp, const T* dout, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
    const T pdf = std::exp(T(-0.5) * x * x) * T(0.39894228040143267794);  // 1/√(2π)
    dinp[i] += (cdf + x * pdf) * dout[i];
  }
}

template void swiglu_forward<float>(float*, const float*, int, int);
template void swiglu_forward<double>(double*, const double*, int, int);
template void swiglu_backward<float>(float*, const float*, const float*, int, int);
template void swiglu_backward<double>(double*, const double*, const double*, int, int);
template void relu2_forward<float>(float*, const float*, size_t);
template void relu2_forward<double>(double*, const double*, size_t);
template void relu2_backward<float>(float*, const float*, const float*, size_t);
template void relu2_backward<double>(double*, const double*, const double*, size_t);
template void gelu_erf_forward<float>(float*, const float*, size_t);
template void gelu_erf_forward<double>(double*, const double*, size_t);
template void gelu_erf_backward<float>(float*, const float*, const float*, size_t);
template void gelu_erf_backward<double>(double*, const double*, const double*, size_t);

}  // namespace gpt::cpu
