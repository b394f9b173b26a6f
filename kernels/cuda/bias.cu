// The linear layers' bias: added to the rows, and its gradient summed over
// rows in column blocks (float or bf16 dout).
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

namespace gpt::cuda {

namespace {

// dout as float32, or bf16 bit patterns (bf16 storage).
__device__ inline float widen_value(float x) { return x; }

__device__ inline float widen_value(uint16_t b) { return bf16_bits_to_float(b); }

template <typename In>
__global__ void __launch_bounds__(32 * kColRows) bias_backward_kernel(float* dbias, const In* dout, int N, int OC) {
  GPT_BLOCK_BOUND(32 * kColRows);
  GPT_SHARED(float, sb, [kColRows][33]);
  const int o = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.f;
  if (o < OC)
    for (int n = blockIdx.y * kColRows + threadIdx.y; n < N; n += gridDim.y * kColRows)
      acc += widen_value(dout[size_t(n) * OC + o]);
  sb[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && o < OC) {
    for (int k = 1; k < kColRows; ++k) acc += sb[k][threadIdx.x];
    atomicAdd(dbias + o, acc);
  }
}

__global__ void __launch_bounds__(kThreads) bias_add_kernel(float* out, const float* bias, int OC, size_t total) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, total) out[i] += bias[i % OC];
}

}  // namespace

void bias_add(float* out, const float* bias, int N, int OC, cudaStream_t stream) {
  const size_t total = size_t(N) * OC;
  if (total == 0) return;
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, bias_add_kernel)(out, bias, OC, total);
  GPT_CUDA_CHECK_LAUNCH("bias_add_kernel");
}

namespace {

template <typename In>
void bias_backward_of(float* dbias, const In* dout, int N, int OC, cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  const dim3 grid((OC + 31) / 32, row_blocks(N)), block(32, kColRows);
  GPT_LAUNCH(grid, block, stream, bias_backward_kernel<In>)(dbias, dout, N, OC);
  GPT_CUDA_CHECK_LAUNCH("bias_backward_kernel");
}

}  // namespace

void bias_backward(float* dbias, const float* dout, int N, int OC, cudaStream_t stream) {
  bias_backward_of(dbias, dout, N, OC, stream);
}

void bias_backward(float* dbias, const uint16_t* dout, int N, int OC, cudaStream_t stream) {
  bias_backward_of(dbias, dout, N, OC, stream);
}

}  // namespace gpt::cuda
