// Differential attention's ops: qkv split into the kernel heads and back,
// the heads' combination (λ, RMSNorm, gain) and its backward, and the
// per-head inputs repeated over a head's kernel heads and reduced back.
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

// Differential attention (attn::diff): the split and its backward one thread
// per element of the wider tensor; the combination one thread per (row,
// head), in double as the CPU kernel; the gain's gradient by column blocks
// as LayerNorm's parameters, λ's by a sum over every (row, head) in one block.
__global__ void __launch_bounds__(kThreads) diff_split_kernel(float* qkv2, const float* qkv, int N, int C, int NH) {
  GPT_BLOCK_BOUND(kThreads);
  const int D = C / NH, d = D / 2;
  const size_t W = 6 * size_t(C), total = size_t(N) * W;
  GPT_GRID_STRIDE(e, total) {
    const size_t n = e / W;
    const int r = static_cast<int>(e % W), part = r / (2 * C), w = r % (2 * C), s = w / d, c = w % d;
    const int h = s / attn::diff::kHeads, m = (s % attn::diff::kHeads) / 2, u = s % 2;
    qkv2[e] = qkv[n * 3 * C + (part == 2 ? 2 * C + h * D + u * d + c : part * C + h * D + m * d + c)];
  }
}

__global__ void __launch_bounds__(kThreads)
    diff_split_backward_kernel(float* dqkv, const float* dqkv2, int N, int C, int NH) {
  GPT_BLOCK_BOUND(kThreads);
  const int D = C / NH, d = D / 2;
  const size_t W = 3 * size_t(C), total = size_t(N) * W;
  GPT_GRID_STRIDE(e, total) {
    const size_t n = e / W;
    const int r = static_cast<int>(e % W), part = r / C, w = r % C, h = w / D, half = (w % D) / d, c = w % d;
    const float* g = dqkv2 + n * 6 * C + part * 2 * C;
    const int s0 = attn::diff::kHeads * h;
    // q, k half m: kernel heads 4h + 2m + {0, 1}; v half u: 4h + u and 4h + 2 + u
    dqkv[e] += part < 2 ? g[(s0 + 2 * half) * d + c] + g[(s0 + 2 * half + 1) * d + c]
                        : g[(s0 + half) * d + c] + g[(s0 + 2 + half) * d + c];
  }
}

// z of head h of row n into z[0..D) (double), from y2 and λ.
__device__ inline void diff_z(double* z, const float* y, int h, int d, double l) {
  const int s0 = attn::diff::kHeads * h;
  for (int u = 0; u < 2; ++u)
    for (int c = 0; c < d; ++c)
      z[u * d + c] = static_cast<double>(y[(s0 + u) * d + c]) - l * static_cast<double>(y[(s0 + 2 + u) * d + c]);
}

constexpr int kDiffMaxD = 512;  // head sizes the combination kernels hold in registers or local memory

__global__ void __launch_bounds__(128)
    diff_combine_kernel(float* out, float* rstd, const float* y2, const float* lam, const float* gain, int N, int C,
                        int NH, double lambda_init) {
  GPT_BLOCK_BOUND(128);
  const int D = C / NH, d = D / 2;
  const double l = attn::diff::lambda(lam, d, lambda_init).value, scale = 1.0 - lambda_init;
  double z[kDiffMaxD];
  GPT_GRID_STRIDE(e, size_t(N) * NH) {
    const size_t n = e / NH;
    const int h = static_cast<int>(e % NH);
    diff_z(z, y2 + n * 2 * C, h, d, l);
    double ss = 0;
    for (int c = 0; c < D; ++c) ss += z[c] * z[c];
    const double r = 1.0 / sqrt(ss / D + attn::diff::kEps);
    rstd[e] = static_cast<float>(r);
    for (int c = 0; c < D; ++c) out[n * C + h * D + c] = static_cast<float>(scale * z[c] * r * gain[c]);
  }
}

// dy2 of each (row, head), and its share of dL/dλ into dl[row·NH + head].
__global__ void __launch_bounds__(128)
    diff_combine_backward_kernel(float* dy2, double* dl, const float* dout, const float* y2, const float* rstd,
                                 const float* lam, const float* gain, int N, int C, int NH, double lambda_init) {
  GPT_BLOCK_BOUND(128);
  const int D = C / NH, d = D / 2;
  const double l = attn::diff::lambda(lam, d, lambda_init).value, scale = 1.0 - lambda_init;
  double z[kDiffMaxD];
  GPT_GRID_STRIDE(e, size_t(N) * NH) {
    const size_t n = e / NH;
    const int h = static_cast<int>(e % NH), s0 = attn::diff::kHeads * h;
    const float* y = y2 + n * 2 * C;
    diff_z(z, y, h, d, l);
    const double r = static_cast<double>(rstd[e]);
    double dot = 0;
    for (int c = 0; c < D; ++c) dot += scale * dout[n * C + h * D + c] * static_cast<double>(gain[c]) * (z[c] * r);
    dot /= D;
    double acc = 0;
    for (int u = 0; u < 2; ++u)
      for (int c = 0; c < d; ++c) {
        const int k = u * d + c;
        const double dn = scale * dout[n * C + h * D + k] * static_cast<double>(gain[k]);
        const double dz = r * (dn - z[k] * r * dot);
        dy2[n * 2 * C + (s0 + u) * d + c] = static_cast<float>(dz);
        dy2[n * 2 * C + (s0 + 2 + u) * d + c] = static_cast<float>(-l * dz);
        acc -= dz * static_cast<double>(y[(s0 + 2 + u) * d + c]);
      }
    dl[e] = acc;
  }
}

// dgain[c] += Σ over (row, head) of (1 − λ_init)·dout·z·rstd: blocks (32
// columns × kColRows) striding over the rows, as layernorm_backward_params_kernel.
__global__ void __launch_bounds__(32 * kColRows)
    diff_gain_kernel(float* dgain, const float* dout, const float* y2, const float* rstd, const float* lam, int N,
                     int C, int NH, double lambda_init) {
  GPT_BLOCK_BOUND(32 * kColRows);
  GPT_SHARED(double, part, [kColRows][33]);
  const int D = C / NH, d = D / 2, c = blockIdx.x * 32 + threadIdx.x;
  const double l = attn::diff::lambda(lam, d, lambda_init).value, scale = 1.0 - lambda_init;
  double a = 0;
  if (c < D) {
    const int u = c / d, cc = c % d;
    for (size_t e = blockIdx.y * size_t(kColRows) + threadIdx.y; e < size_t(N) * NH;
         e += gridDim.y * size_t(kColRows)) {
      const size_t n = e / NH;
      const int h = static_cast<int>(e % NH), s0 = attn::diff::kHeads * h;
      const float* y = y2 + n * 2 * C;
      const double z = static_cast<double>(y[(s0 + u) * d + cc]) - l * static_cast<double>(y[(s0 + 2 + u) * d + cc]);
      a += scale * dout[n * C + h * D + c] * z * static_cast<double>(rstd[e]);
    }
  }
  part[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.y == 0 && c < D) {
    for (int k = 1; k < kColRows; ++k) a += part[k][threadIdx.x];
    atomicAdd(dgain + c, static_cast<float>(a));
  }
}

// One block: Σ dl (each thread a fixed stride, then the block sum), and
// dlam[k] += that times dλ/dp_k.
__global__ void __launch_bounds__(kThreads)
    diff_lambda_grad_kernel(float* dlam, const double* dl, size_t rows, const float* lam, int d, double lambda_init) {
  GPT_BLOCK_BOUND(kThreads);
  double s = 0;
  for (size_t e = threadIdx.x; e < rows; e += blockDim.x) s += dl[e];
  s = block_sum(s);
  const attn::diff::Lambda L = attn::diff::lambda(lam, d, lambda_init);
  for (int k = threadIdx.x; k < 4 * d; k += blockDim.x)
    dlam[k] += static_cast<float>(s * attn::diff::lambda_grad(lam, d, L, k));
}

__global__ void __launch_bounds__(kThreads)
    head_repeat_kernel(float* dst, const float* src, size_t outer_heads, size_t inner, int group) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(e, outer_heads * group * inner) {
    const size_t i = e % inner, ohk = e / inner;
    dst[e] = src[(ohk / group) * inner + i];
  }
}

__global__ void __launch_bounds__(kThreads)
    head_reduce_kernel(float* dst, const float* src, size_t outer_heads, size_t inner, int group) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(e, outer_heads * inner) {
    const size_t i = e % inner, oh = e / inner;
    float acc = dst[e];
    for (int k = 0; k < group; ++k) acc += src[(oh * group + k) * inner + i];
    dst[e] = acc;
  }
}

void diff_split_forward(float* qkv2, const float* qkv, int N, int C, int NH, cudaStream_t stream) {
  const size_t total = size_t(N) * 6 * C;
  if (total == 0) return;
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, diff_split_kernel)(qkv2, qkv, N, C, NH);
  GPT_CUDA_CHECK_LAUNCH("diff_split_kernel");
}

void diff_split_backward(float* dqkv, const float* dqkv2, int N, int C, int NH, cudaStream_t stream) {
  const size_t total = size_t(N) * 3 * C;
  if (total == 0) return;
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, diff_split_backward_kernel)(dqkv, dqkv2, N, C, NH);
  GPT_CUDA_CHECK_LAUNCH("diff_split_backward_kernel");
}

void diff_combine_forward(float* out, float* rstd, const float* y2, const float* lam, const float* gain, int N, int C,
                          int NH, double lambda_init, cudaStream_t stream) {
  const size_t rows = size_t(N) * NH;
  if (rows == 0) return;
  GPT_CHECK(C / NH <= kDiffMaxD, "cuda::diff_combine_forward: head size ", C / NH, " exceeds ", kDiffMaxD);
  GPT_LAUNCH(grid_for(rows, 128), 128, stream, diff_combine_kernel)(out, rstd, y2, lam, gain, N, C, NH, lambda_init);
  GPT_CUDA_CHECK_LAUNCH("diff_combine_kernel");
}

void diff_combine_backward(float* dy2, float* dlam, float* dgain, const float* dout, const float* y2, const float* rstd,
                           const float* lam, const float* gain, int N, int C, int NH, double lambda_init,
                           cudaStream_t stream) {
  const size_t rows = size_t(N) * NH;
  if (rows == 0) return;
  const int D = C / NH;
  GPT_CHECK(D <= kDiffMaxD, "cuda::diff_combine_backward: head size ", D, " exceeds ", kDiffMaxD);
  double* dl = nullptr;
  GPT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&dl), rows * sizeof(double), stream));
  GPT_LAUNCH(grid_for(rows, 128), 128, stream, diff_combine_backward_kernel)
  (dy2, dl, dout, y2, rstd, lam, gain, N, C, NH, lambda_init);
  GPT_CUDA_CHECK_LAUNCH("diff_combine_backward_kernel");
  const dim3 grid((D + 31) / 32, row_blocks(static_cast<int>(std::min<size_t>(rows, 1u << 30)))), block(32, kColRows);
  GPT_LAUNCH(grid, block, stream, diff_gain_kernel)(dgain, dout, y2, rstd, lam, N, C, NH, lambda_init);
  GPT_CUDA_CHECK_LAUNCH("diff_gain_kernel");
  GPT_LAUNCH(1, kThreads, stream, diff_lambda_grad_kernel)(dlam, dl, rows, lam, D / 2, lambda_init);
  GPT_CUDA_CHECK_LAUNCH("diff_lambda_grad_kernel");
  GPT_CUDA_CHECK(cudaFreeAsync(dl, stream));
}

void head_repeat(float* dst, const float* src, size_t outer, int NH, size_t inner, int group, cudaStream_t stream) {
  const size_t total = outer * NH * group * inner;
  if (total == 0) return;
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, head_repeat_kernel)(dst, src, outer * NH, inner, group);
  GPT_CUDA_CHECK_LAUNCH("head_repeat_kernel");
}

void head_reduce(float* dst, const float* src, size_t outer, int NH, size_t inner, int group, cudaStream_t stream) {
  const size_t total = outer * NH * inner;
  if (total == 0) return;
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, head_reduce_kernel)(dst, src, outer * NH, inner, group);
  GPT_CUDA_CHECK_LAUNCH("head_reduce_kernel");
}

}  // namespace gpt::cuda
