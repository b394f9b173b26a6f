// RMSNorm, one warp per row, and its backward (the input; the gain summed
// over rows in column blocks). Contracts: kernels/cuda/cuda_kernels.h; the
// math: kernels/cpu/rmsnorm.cpp and docs/blocks.md.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_syntax.h"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/cuda/reduce.cuh"

namespace gpt::cuda {

namespace {

__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_kernel(float* out, float* rstd, const float* inp, const float* w, int N, int C, float eps) {
  GPT_BLOCK_BOUND(kThreads);
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;  // the whole warp leaves together
  const float* x = inp + size_t(row) * C;
  float* y = out + size_t(row) * C;
  float ss = 0.f;
  for (int c = lane; c < C; c += 32) ss += x[c] * x[c];
  const float r = 1.0f / sqrtf(warp_sum(ss) / C + eps);
  for (int c = lane; c < C; c += 32) y[c] = x[c] * r * w[c];
  if (lane == 0 && rstd) rstd[row] = r;
}

// dinp += rstd · (g − x̂ · mean(g · x̂)), g = dout · w, x̂ = x · rstd.
__global__ void __launch_bounds__(kThreads)
    rmsnorm_backward_input_kernel(float* dinp, const float* dout, const float* inp, const float* w, const float* rstd,
                                  int N, int C) {
  GPT_BLOCK_BOUND(kThreads);
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + size_t(row) * C;
  const float* dy = dout + size_t(row) * C;
  float* dx = dinp + size_t(row) * C;
  const float r = rstd[row];
  float gx = 0.f;
  for (int c = lane; c < C; c += 32) gx += dy[c] * w[c] * x[c] * r;
  const float gx_mean = warp_sum(gx) / C;
  for (int c = lane; c < C; c += 32) dx[c] += r * (dy[c] * w[c] - x[c] * r * gx_mean);
}

__global__ void __launch_bounds__(32 * kColRows)
    rmsnorm_backward_weight_kernel(float* dw, const float* dout, const float* inp, const float* rstd, int N, int C) {
  GPT_BLOCK_BOUND(32 * kColRows);
  GPT_SHARED(float, sw, [kColRows][33]);
  const int c = blockIdx.x * 32 + threadIdx.x;
  float aw = 0.f;
  if (c < C)
    for (int n = blockIdx.y * kColRows + threadIdx.y; n < N; n += gridDim.y * kColRows)
      aw += dout[size_t(n) * C + c] * inp[size_t(n) * C + c] * rstd[n];
  sw[threadIdx.y][threadIdx.x] = aw;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < kColRows; ++k) aw += sw[k][threadIdx.x];
    atomicAdd(dw + c, aw);
  }
}

unsigned warp_rows_grid(int N) { return static_cast<unsigned>((N + kThreads / 32 - 1) / (kThreads / 32)); }

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, double eps,
                     cudaStream_t stream) {
  if (N <= 0) return;
  GPT_LAUNCH(warp_rows_grid(N), kThreads, stream, rmsnorm_forward_kernel)
  (out, rstd, inp, weight, N, C, static_cast<float>(eps));
  GPT_CUDA_CHECK_LAUNCH("rmsnorm_forward_kernel");
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C, cudaStream_t stream) {
  if (N <= 0) return;
  GPT_LAUNCH(warp_rows_grid(N), kThreads, stream, rmsnorm_backward_input_kernel)(dinp, dout, inp, weight, rstd, N, C);
  GPT_CUDA_CHECK_LAUNCH("rmsnorm_backward_input_kernel");
  const dim3 grid((C + 31) / 32, row_blocks(N)), block(32, kColRows);
  GPT_LAUNCH(grid, block, stream, rmsnorm_backward_weight_kernel)(dweight, dout, inp, rstd, N, C);
  GPT_CUDA_CHECK_LAUNCH("rmsnorm_backward_weight_kernel");
}

}  // namespace gpt::cuda
