// LayerNorm, one warp per row, and its backward (the input; the gain and
// bias summed over rows in column blocks).
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

constexpr float kLayerNormEps = 1e-5f;  // as kernels/cpu/layernorm.cpp

// ---- LayerNorm: one warp per row ----------------------------------------------------
// S: the storage type of the activations and the weights, float or bf16
// (storage.cuh); the statistics and the weights' gradients are float32.
template <typename S>
__global__ void __launch_bounds__(kThreads)
    layernorm_forward_kernel(S* out, float* mean, float* rstd, const S* inp, const S* w, const S* b, int N, int C) {
  GPT_BLOCK_BOUND(kThreads);
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;  // the whole warp leaves together
  const S* x = inp + size_t(row) * C;
  S* y = out + size_t(row) * C;
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += load(x, c);
  const float m = warp_sum(s) / C;
  float v = 0.f;  // two passes, as the CPU kernel: no E[x²] - E[x]² cancellation
  for (int c = lane; c < C; c += 32) v += (load(x, c) - m) * (load(x, c) - m);
  const float r = 1.0f / sqrtf(warp_sum(v) / C + kLayerNormEps);
  for (int c = lane; c < C; c += 32) store(y, c, (load(x, c) - m) * r * load(w, c) + load(b, c));
  if (lane == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = r;
  }
}

// dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w.
template <typename S>
__global__ void __launch_bounds__(kThreads)
    layernorm_backward_input_kernel(S* dinp, const S* dout, const S* inp, const S* w, const float* mean,
                                    const float* rstd, int N, int C) {
  GPT_BLOCK_BOUND(kThreads);
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const S* x = inp + size_t(row) * C;
  const S* dy = dout + size_t(row) * C;
  S* dx = dinp + size_t(row) * C;
  const float m = mean[row], r = rstd[row];
  float g_sum = 0.f, gx_sum = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float g = load(dy, c) * load(w, c);
    g_sum += g;
    gx_sum += g * (load(x, c) - m) * r;
  }
  const float g_mean = warp_sum(g_sum) / C, gx_mean = warp_sum(gx_sum) / C;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (load(x, c) - m) * r;
    store(dx, c, load(dx, c) + r * (load(dy, c) * load(w, c) - g_mean - xhat * gx_mean));
  }
}

template <typename S>
__global__ void __launch_bounds__(32 * kColRows)
    layernorm_backward_params_kernel(float* dw, float* db, const S* dout, const S* inp, const float* mean,
                                     const float* rstd, int N, int C) {
  GPT_BLOCK_BOUND(32 * kColRows);
  GPT_SHARED(float, sw, [kColRows][33]);
  GPT_SHARED(float, sb, [kColRows][33]);
  const int c = blockIdx.x * 32 + threadIdx.x;
  float aw = 0.f, ab = 0.f;
  if (c < C)
    for (int n = blockIdx.y * kColRows + threadIdx.y; n < N; n += gridDim.y * kColRows) {
      const float dy = load(dout, size_t(n) * C + c);
      aw += dy * (load(inp, size_t(n) * C + c) - mean[n]) * rstd[n];
      ab += dy;
    }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < kColRows; ++k) {
      aw += sw[k][threadIdx.x];
      ab += sb[k][threadIdx.x];
    }
    atomicAdd(dw + c, aw);
    atomicAdd(db + c, ab);
  }
}

unsigned warp_rows_grid(int N) { return static_cast<unsigned>((N + kThreads / 32 - 1) / (kThreads / 32)); }

template <typename S>
void layernorm_forward_on(S* out, float* mean, float* rstd, const S* inp, const S* weight, const S* bias, int N, int C,
                          cudaStream_t stream) {
  if (N <= 0) return;
  GPT_LAUNCH(warp_rows_grid(N), kThreads, stream, layernorm_forward_kernel<S>)
  (out, mean, rstd, inp, weight, bias, N, C);
  GPT_CUDA_CHECK_LAUNCH("layernorm_forward_kernel");
}

template <typename S>
void layernorm_backward_on(S* dinp, float* dweight, float* dbias, const S* dout, const S* inp, const S* weight,
                           const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
  if (N <= 0) return;
  GPT_LAUNCH(warp_rows_grid(N), kThreads, stream, layernorm_backward_input_kernel<S>)
  (dinp, dout, inp, weight, mean, rstd, N, C);
  GPT_CUDA_CHECK_LAUNCH("layernorm_backward_input_kernel");
  const dim3 grid((C + 31) / 32, row_blocks(N)), block(32, kColRows);
  GPT_LAUNCH(grid, block, stream, layernorm_backward_params_kernel<S>)(dweight, dbias, dout, inp, mean, rstd, N, C);
  GPT_CUDA_CHECK_LAUNCH("layernorm_backward_params_kernel");
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C, cudaStream_t stream) {
  layernorm_forward_on(out, mean, rstd, inp, weight, bias, N, C, stream);
}
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight, const bf16* bias,
                       int N, int C, cudaStream_t stream) {
  layernorm_forward_on(out, mean, rstd, inp, weight, bias, N, C, stream);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
  layernorm_backward_on(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, stream);
}
void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
  layernorm_backward_on(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, stream);
}

}  // namespace gpt::cuda
