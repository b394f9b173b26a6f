// Element-wise ops: the residual add, accumulation, scaling, the sum of
// squares for gradient clipping, bf16 conversions, and the sigmoid output gate.
// Contracts: kernels/cuda/cuda_kernels.h.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/attention_spec.h"
#include "kernels/bf16_round.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_syntax.h"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/storage.cuh"

namespace gpt::cuda {

namespace {

// ---- element-wise --------------------------------------------------------------------------
// S: the storage type, float or bf16 (storage.cuh).
template <typename S>
__global__ void __launch_bounds__(kThreads) residual_kernel(S* out, const S* a, const S* b, size_t n) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, n) store(out, i, load(a, i) + load(b, i));
}

template <typename S>
__global__ void __launch_bounds__(kThreads) add_kernel(S* dst, const S* src, size_t n) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, n) store(dst, i, load(dst, i) + load(src, i));
}

template <typename S>
void residual_on(S* out, const S* a, const S* b, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, residual_kernel<S>)(out, a, b, n);
  GPT_CUDA_CHECK_LAUNCH("residual_kernel");
}
template <typename S>
void add_on(S* dst, const S* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, add_kernel<S>)(dst, src, n);
  GPT_CUDA_CHECK_LAUNCH("add_kernel");
}

__global__ void __launch_bounds__(kThreads) widen_bf16_kernel(float* dst, const uint16_t* src, size_t n) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, n) dst[i] = bf16_bits_to_float(src[i]);
}

__global__ void __launch_bounds__(kThreads) round_bf16_kernel(uint16_t* dst, const float* src, size_t n) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, n) dst[i] = round_to_bf16_bits(src[i]);
}

__global__ void __launch_bounds__(kThreads) scale_kernel(float* x, float s, size_t n) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, n) x[i] *= s;
}

__global__ void __launch_bounds__(kThreads) sum_squares_kernel(double* partial, const float* x, size_t n) {
  GPT_BLOCK_BOUND(kThreads);
  double s = 0.0;
  GPT_GRID_STRIDE(i, n) s += double(x[i]) * double(x[i]);
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

}  // namespace

__global__ void __launch_bounds__(kThreads)
    sigmoid_gate_forward_kernel(float* out, const float* y, const float* g, size_t n) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, n) { out[i] = y[i] * attn::sigmoid(g[i]); }
}

__global__ void __launch_bounds__(kThreads)
    sigmoid_gate_backward_kernel(float* dy, float* dg, const float* dout, const float* y, const float* g, size_t n) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, n) {
    const float s = attn::sigmoid(g[i]);
    dy[i] += dout[i] * s;
    dg[i] += dout[i] * y[i] * s * (1.0f - s);
  }
}

void sigmoid_gate_forward(float* out, const float* y, const float* g, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, sigmoid_gate_forward_kernel)(out, y, g, n);
  GPT_CUDA_CHECK_LAUNCH("sigmoid_gate_forward_kernel");
}

void sigmoid_gate_backward(float* dy, float* dg, const float* dout, const float* y, const float* g, size_t n,
                           cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, sigmoid_gate_backward_kernel)(dy, dg, dout, y, g, n);
  GPT_CUDA_CHECK_LAUNCH("sigmoid_gate_backward_kernel");
}

void residual_forward(float* out, const float* a, const float* b, size_t n, cudaStream_t stream) {
  residual_on(out, a, b, n, stream);
}
void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n, cudaStream_t stream) {
  residual_on(out, a, b, n, stream);
}

void bf16_to_float(float* dst, const uint16_t* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, widen_bf16_kernel)(dst, src, n);
  GPT_CUDA_CHECK_LAUNCH("widen_bf16_kernel");
}

void float_to_bf16(uint16_t* dst, const float* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, round_bf16_kernel)(dst, src, n);
  GPT_CUDA_CHECK_LAUNCH("round_bf16_kernel");
}

void add_inplace(float* dst, const float* src, size_t n, cudaStream_t stream) { add_on(dst, src, n, stream); }
void add_inplace(bf16* dst, const bf16* src, size_t n, cudaStream_t stream) { add_on(dst, src, n, stream); }

void scale_inplace(float* x, float s, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, scale_kernel)(x, s, n);
  GPT_CUDA_CHECK_LAUNCH("scale_kernel");
}

void sum_squares_partials(double* partial, const float* x, size_t n, cudaStream_t stream) {
  // Always kSumSquaresBlocks blocks (empty ones write 0), so the caller can
  // add a fixed number of partials.
  GPT_LAUNCH(kSumSquaresBlocks, kThreads, stream, sum_squares_kernel)(partial, x, n);
  GPT_CUDA_CHECK_LAUNCH("sum_squares_kernel");
}

}  // namespace gpt::cuda
