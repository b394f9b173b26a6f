// QK-norm: each head's q and k RMS-normalised over its D channels with a
// shared gain (or none), each query head optionally times its learned scale,
// v copied; and the backward. Contracts:
// kernels/cuda/cuda_kernels.h; the math: kernels/cpu/qknorm.cpp and
// docs/blocks.md.
#include <cmath>

#include "core/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_syntax.h"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/cuda/reduce.cuh"

namespace gpt::cuda {

namespace {

// Row r = (n·2 + part)·NH + h of the q and k heads starts at
// n·3C + part·C + h·D of the (N, 3C) tensor; its rstd is rstd[r].
__device__ __forceinline__ size_t head_row(size_t r, int NH, int D) {
  const size_t h = r % NH, np = r / NH, part = np % 2, n = np / 2, C = size_t(NH) * D;
  return n * 3 * C + part * C + h * D;
}

// The learned scale of head row r: sq[h] for a query head, else 1.
__device__ __forceinline__ float row_scale(size_t r, int NH, const float* sq) {
  return (r / NH) % 2 == 0 && sq ? sq[r % NH] : 1.0f;
}

// One thread per head row (D is a head's size).
__global__ void __launch_bounds__(kThreads)
    qknorm_forward_kernel(float* out, float* rstd, const float* inp, const float* wq, const float* wk, const float* sq,
                          int N, int NH, int D, float eps) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(r, size_t(N) * 2 * NH) {
    const size_t o = head_row(r, NH, D);
    const float* w = (r / NH) % 2 ? wk : wq;
    const float hs = row_scale(r, NH, sq);
    float ss = 0.f;
    for (int d = 0; d < D; ++d) ss += inp[o + d] * inp[o + d];
    const float s = 1.0f / sqrtf(ss / D + eps);
    for (int d = 0; d < D; ++d) out[o + d] = inp[o + d] * s * ((w ? w[d] : 1.0f) * hs);
    if (rstd) rstd[r] = s;
  }
}

__global__ void __launch_bounds__(kThreads)
    copy_values_kernel(float* out, const float* inp, int N, int NH, int D, bool accumulate) {
  GPT_BLOCK_BOUND(kThreads);
  const size_t C = size_t(NH) * D;
  GPT_GRID_STRIDE(i, size_t(N) * C) {
    const size_t at = (i / C) * 3 * C + 2 * C + i % C;
    out[at] = accumulate ? out[at] + inp[at] : inp[at];
  }
}

__global__ void __launch_bounds__(kThreads)
    qknorm_backward_input_kernel(float* dinp, const float* dout, const float* inp, const float* wq, const float* wk,
                                 const float* sq, const float* rstd, int N, int NH, int D) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(r, size_t(N) * 2 * NH) {
    const size_t o = head_row(r, NH, D);
    const float* w = (r / NH) % 2 ? wk : wq;
    const float hs = row_scale(r, NH, sq);
    const float s = rstd[r];
    float gx = 0.f;
    for (int d = 0; d < D; ++d) gx += dout[o + d] * ((w ? w[d] : 1.0f) * hs) * inp[o + d] * s;
    gx /= D;
    for (int d = 0; d < D; ++d) dinp[o + d] += s * (dout[o + d] * ((w ? w[d] : 1.0f) * hs) - inp[o + d] * s * gx);
  }
}

// dsq[h] += Σ over tokens and channels of dout·x̂·wq for query head h: one
// block per head, tokens over the threads, the block's sum added once.
__global__ void __launch_bounds__(kThreads)
    qknorm_backward_scale_kernel(float* dsq, const float* dout, const float* inp, const float* wq, const float* rstd,
                                 int N, int NH, int D) {
  GPT_BLOCK_BOUND(kThreads);
  const int h = blockIdx.x;
  float acc = 0.f;
  for (int n = threadIdx.x; n < N; n += blockDim.x) {
    const size_t r = size_t(n) * 2 * NH + h, o = head_row(r, NH, D);
    float t = 0.f;
    for (int d = 0; d < D; ++d) t += dout[o + d] * inp[o + d] * (wq ? wq[d] : 1.0f);
    acc += t * rstd[r];
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) dsq[h] += acc;
}

// dw[d] += Σ over the part's head rows of dout·x̂, column blocks of 32
// channels, rows spread over threadIdx.y and blockIdx.y.
__global__ void __launch_bounds__(32 * kColRows)
    qknorm_backward_weight_kernel(float* dw, int part, const float* dout, const float* inp, const float* sq,
                                  const float* rstd, int N, int NH, int D) {
  GPT_BLOCK_BOUND(32 * kColRows);
  GPT_SHARED(float, sw, [kColRows][33]);
  const int d = blockIdx.x * 32 + threadIdx.x;
  const size_t rows = size_t(N) * NH;
  float acc = 0.f;
  if (d < D)
    for (size_t k = blockIdx.y * kColRows + threadIdx.y; k < rows; k += size_t(gridDim.y) * kColRows) {
      const size_t n = k / NH, h = k % NH, r = (n * 2 + part) * NH + h;
      const size_t o = head_row(r, NH, D) + d;
      acc += dout[o] * inp[o] * rstd[r] * row_scale(r, NH, sq);
    }
  sw[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && d < D) {
    for (int k = 1; k < kColRows; ++k) acc += sw[k][threadIdx.x];
    atomicAdd(dw + d, acc);
  }
}

}  // namespace

void qknorm_forward(float* out, float* rstd, const float* inp, const float* wq, const float* wk, const float* sq, int N,
                    int NH, int D, double eps, cudaStream_t stream) {
  const size_t rows = size_t(N) * 2 * NH, values = size_t(N) * NH * D;
  if (rows == 0) return;
  GPT_LAUNCH(grid_for(rows, kThreads), kThreads, stream, qknorm_forward_kernel)
  (out, rstd, inp, wq, wk, sq, N, NH, D, static_cast<float>(eps));
  GPT_CUDA_CHECK_LAUNCH("qknorm_forward_kernel");
  GPT_LAUNCH(grid_for(values, kThreads), kThreads, stream, copy_values_kernel)(out, inp, N, NH, D, false);
  GPT_CUDA_CHECK_LAUNCH("copy_values_kernel");
}

void qknorm_backward(float* dinp, float* dwq, float* dwk, float* dsq, const float* dout, const float* inp,
                     const float* wq, const float* wk, const float* sq, const float* rstd, int N, int NH, int D,
                     cudaStream_t stream) {
  const size_t rows = size_t(N) * 2 * NH, values = size_t(N) * NH * D;
  if (rows == 0) return;
  GPT_LAUNCH(grid_for(rows, kThreads), kThreads, stream, qknorm_backward_input_kernel)
  (dinp, dout, inp, wq, wk, sq, rstd, N, NH, D);
  GPT_CUDA_CHECK_LAUNCH("qknorm_backward_input_kernel");
  GPT_LAUNCH(grid_for(values, kThreads), kThreads, stream, copy_values_kernel)(dinp, dout, N, NH, D, true);
  GPT_CUDA_CHECK_LAUNCH("copy_values_kernel");
  const dim3 grid((D + 31) / 32, row_blocks(N * NH)), block(32, kColRows);
  if (dwq) {
    GPT_LAUNCH(grid, block, stream, qknorm_backward_weight_kernel)(dwq, 0, dout, inp, sq, rstd, N, NH, D);
    GPT_CUDA_CHECK_LAUNCH("qknorm_backward_weight_kernel");
  }
  if (dwk) {
    GPT_LAUNCH(grid, block, stream, qknorm_backward_weight_kernel)(dwk, 1, dout, inp, sq, rstd, N, NH, D);
    GPT_CUDA_CHECK_LAUNCH("qknorm_backward_weight_kernel");
  }
  if (dsq) {
    GPT_LAUNCH(NH, kThreads, stream, qknorm_backward_scale_kernel)(dsq, dout, inp, wq, rstd, N, NH, D);
    GPT_CUDA_CHECK_LAUNCH("qknorm_backward_scale_kernel");
  }
}

}  // namespace gpt::cuda
