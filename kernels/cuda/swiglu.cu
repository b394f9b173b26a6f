// SwiGLU, ReLU² and exact GELU, the MLP activations of the modern blocks,
// and their backward. Contracts: kernels/cuda/cuda_kernels.h; the math:
// kernels/cpu/swiglu.cpp and docs/blocks.md.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_syntax.h"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/cuda/reduce.cuh"

namespace gpt::cuda {

namespace {

// σ(x) without inf: e^(−x) saturates in float for x < −88, and 1/(1 + inf) = 0.
__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// One element (n, f) of the (N, F) output per thread; row n of inp holds
// [gate (F) | up (F)].
__global__ void __launch_bounds__(kThreads) swiglu_forward_kernel(float* out, const float* inp, int N, int F) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, size_t(N) * F) {
    const size_t n = i / F, f = i % F;
    const float g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f];
    out[i] = g * sigmoidf(g) * u;
  }
}

__global__ void __launch_bounds__(kThreads)
    swiglu_backward_kernel(float* dinp, const float* inp, const float* dout, int N, int F) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, size_t(N) * F) {
    const size_t n = i / F, f = i % F;
    const float g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f], s = sigmoidf(g), dy = dout[i];
    dinp[n * 2 * F + f] += dy * u * s * (1.0f + g * (1.0f - s));
    dinp[n * 2 * F + F + f] += dy * g * s;
  }
}

__global__ void __launch_bounds__(kThreads) relu2_forward_kernel(float* out, const float* inp, size_t n) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, n) {
    const float r = fmaxf(inp[i], 0.f);
    out[i] = r * r;
  }
}

__global__ void __launch_bounds__(kThreads)
    relu2_backward_kernel(float* dinp, const float* inp, const float* dout, size_t n) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, n) { dinp[i] += 2.0f * fmaxf(inp[i], 0.f) * dout[i]; }
}

__global__ void __launch_bounds__(kThreads) gelu_erf_forward_kernel(float* out, const float* inp, size_t n) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, n) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
  }
}

__global__ void __launch_bounds__(kThreads)
    gelu_erf_backward_kernel(float* dinp, const float* inp, const float* dout, size_t n) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, n) {
    const float x = inp[i];
    const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752440f));
    const float pdf = expf(-0.5f * x * x) * 0.39894228040143267794f;
    dinp[i] += (cdf + x * pdf) * dout[i];
  }
}

}  // namespace

void swiglu_forward(float* out, const float* inp, int N, int F, cudaStream_t stream) {
  const size_t n = size_t(N) * F;
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, swiglu_forward_kernel)(out, inp, N, F);
  GPT_CUDA_CHECK_LAUNCH("swiglu_forward_kernel");
}

void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F, cudaStream_t stream) {
  const size_t n = size_t(N) * F;
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, swiglu_backward_kernel)(dinp, inp, dout, N, F);
  GPT_CUDA_CHECK_LAUNCH("swiglu_backward_kernel");
}

void relu2_forward(float* out, const float* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, relu2_forward_kernel)(out, inp, n);
  GPT_CUDA_CHECK_LAUNCH("relu2_forward_kernel");
}

void relu2_backward(float* dinp, const float* inp, const float* dout, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, relu2_backward_kernel)(dinp, inp, dout, n);
  GPT_CUDA_CHECK_LAUNCH("relu2_backward_kernel");
}

void gelu_erf_forward(float* out, const float* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, gelu_erf_forward_kernel)(out, inp, n);
  GPT_CUDA_CHECK_LAUNCH("gelu_erf_forward_kernel");
}

void gelu_erf_backward(float* dinp, const float* inp, const float* dout, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, gelu_erf_backward_kernel)(dinp, inp, dout, n);
  GPT_CUDA_CHECK_LAUNCH("gelu_erf_backward_kernel");
}

}  // namespace gpt::cuda
