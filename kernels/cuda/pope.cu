// PoPE's model-side ops (attn::pope): q, k and v into the kernels' heads of
// 2D channels and back, and the output's first D channels. One thread per
// element; the phase biases' gradient per channel summed over the rows in
// double by a block of row groups added in a fixed order (no atomics).
// Contracts: kernels/cuda/cuda_kernels.h (as cpu::pope_*).
#include <cmath>

#include "core/check.h"
#include "kernels/attention_spec.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_syntax.h"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/cuda/reduce.cuh"

namespace gpt::cuda {

__global__ void __launch_bounds__(kThreads)
    pope_kernel(float* qkv2, const float* qkv, const float* delta, const int32_t* pos, int Tn, int C, int NH,
                double theta, size_t N) {
  GPT_BLOCK_BOUND(kThreads);
  const int D = C / NH;
  GPT_GRID_STRIDE(e, N * C) {
    const size_t n = e / C;
    const int i = static_cast<int>(e % C), h = i / D, c = i % D, o = h * 2 * D + c;
    const float* in = qkv + n * 3 * C;
    float* out = qkv2 + n * 6 * C;
    const attn::pope::Channel ch(theta, attn::pope::row_position(pos, n, Tn), c, D, delta[i]);
    double qc, qs, kc, ks;
    ch.query(in[i], &qc, &qs);
    ch.key(in[C + i], &kc, &ks);
    out[o] = static_cast<float>(qc);
    out[o + D] = static_cast<float>(qs);
    out[2 * C + o] = static_cast<float>(kc);
    out[2 * C + o + D] = static_cast<float>(ks);
    out[4 * C + o] = in[2 * C + i];
    out[4 * C + o + D] = 0.0f;
  }
}

__global__ void __launch_bounds__(kThreads)
    pope_backward_kernel(float* dqkv, const float* dqkv2, const float* qkv, const float* delta, const int32_t* pos,
                         int Tn, int C, int NH, double theta, size_t N) {
  GPT_BLOCK_BOUND(kThreads);
  const int D = C / NH;
  GPT_GRID_STRIDE(e, N * C) {
    const size_t n = e / C;
    const int i = static_cast<int>(e % C), h = i / D, c = i % D, o = h * 2 * D + c;
    const float* in = qkv + n * 3 * C;
    const float* g = dqkv2 + n * 6 * C;
    float* d = dqkv + n * 3 * C;
    const attn::pope::Channel ch(theta, attn::pope::row_position(pos, n, Tn), c, D, delta[i]);
    d[i] += static_cast<float>(ch.query_grad(in[i], g[o], g[o + D]));
    d[C + i] += static_cast<float>(ch.key_grad(in[C + i], g[2 * C + o], g[2 * C + o + D]));
    d[2 * C + i] += g[4 * C + o];
  }
}

// dδ: a block per kDeltaChannels adjacent channels, its kDeltaRowGroups
// rows of threads each summing every kDeltaRowGroups-th row of the batch in
// double, then the row groups added in a fixed order: deterministic without
// atomics, coalesced reads, and kDeltaRowGroups times the threads of one
// thread per channel looping over every row (which ran C threads in all,
// a few blocks for a whole GPU, each looping over B·T rows).
constexpr int kDeltaChannels = 8, kDeltaRowGroups = kThreads / kDeltaChannels;

__global__ void __launch_bounds__(kThreads)
    pope_delta_backward_kernel(float* ddelta, const float* dqkv2, const float* qkv, const float* delta,
                               const int32_t* pos, int Tn, int C, int NH, double theta, size_t N) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_SHARED(double, part, [kDeltaRowGroups][kDeltaChannels]);
  const int D = C / NH;
  const int i = static_cast<int>(blockIdx.x) * kDeltaChannels + static_cast<int>(threadIdx.x);
  const bool live = i < C && attn::pope::bias_passes(delta[i]);
  double sum = 0;
  if (live) {
    const int h = i / D, c = i % D, o = h * 2 * D + c;
    for (size_t n = threadIdx.y; n < N; n += kDeltaRowGroups) {
      const attn::pope::Channel ch(theta, attn::pope::row_position(pos, n, Tn), c, D, delta[i]);
      const float* g = dqkv2 + n * 6 * C + 2 * C;
      sum += ch.bias_grad(qkv[n * 3 * C + C + i], g[o], g[o + D]);
    }
  }
  part[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && live) {
    double total = 0;
    for (int r = 0; r < kDeltaRowGroups; ++r) total += part[r][threadIdx.x];
    ddelta[i] += static_cast<float>(total);
  }
}

__global__ void __launch_bounds__(kThreads) pope_output_kernel(float* y, const float* y2, int C, int NH, size_t N) {
  GPT_BLOCK_BOUND(kThreads);
  const int D = C / NH;
  GPT_GRID_STRIDE(e, N * C) {
    const size_t n = e / C;
    const int i = static_cast<int>(e % C), h = i / D, c = i % D;
    y[e] = y2[n * 2 * C + h * 2 * D + c];
  }
}

__global__ void __launch_bounds__(kThreads)
    pope_output_backward_kernel(float* dy2, const float* dy, int C, int NH, size_t N) {
  GPT_BLOCK_BOUND(kThreads);
  const int D = C / NH;
  GPT_GRID_STRIDE(e, N * 2 * C) {
    const size_t n = e / (2 * C);
    const int j = static_cast<int>(e % (2 * C)), h = j / (2 * D), c = j % (2 * D);
    dy2[e] = c < D ? dy[n * C + h * D + c] : 0.0f;
  }
}

void pope_forward(float* qkv2, const float* qkv, const float* delta, int B, int Tn, int C, int NH, double theta,
                  const int32_t* pos, cudaStream_t stream) {
  const size_t N = size_t(B) * Tn;
  if (N * C == 0) return;
  GPT_LAUNCH(grid_for(N * C, kThreads), kThreads, stream, pope_kernel)(qkv2, qkv, delta, pos, Tn, C, NH, theta, N);
  GPT_CUDA_CHECK_LAUNCH("pope_kernel");
}

void pope_backward(float* dqkv, float* ddelta, const float* dqkv2, const float* qkv, const float* delta, int B, int Tn,
                   int C, int NH, double theta, const int32_t* pos, cudaStream_t stream) {
  const size_t N = size_t(B) * Tn;
  if (N * C == 0) return;
  GPT_LAUNCH(grid_for(N * C, kThreads), kThreads, stream, pope_backward_kernel)
  (dqkv, dqkv2, qkv, delta, pos, Tn, C, NH, theta, N);
  GPT_CUDA_CHECK_LAUNCH("pope_backward_kernel");
  GPT_LAUNCH(dim3((C + kDeltaChannels - 1) / kDeltaChannels), dim3(kDeltaChannels, kDeltaRowGroups), stream,
             pope_delta_backward_kernel)
  (ddelta, dqkv2, qkv, delta, pos, Tn, C, NH, theta, N);
  GPT_CUDA_CHECK_LAUNCH("pope_delta_backward_kernel");
}

void pope_output_forward(float* y, const float* y2, int N, int C, int NH, cudaStream_t stream) {
  const size_t n = size_t(N);
  if (n * C == 0) return;
  GPT_LAUNCH(grid_for(n * C, kThreads), kThreads, stream, pope_output_kernel)(y, y2, C, NH, n);
  GPT_CUDA_CHECK_LAUNCH("pope_output_kernel");
}

void pope_output_backward(float* dy2, const float* dy, int N, int C, int NH, cudaStream_t stream) {
  const size_t n = size_t(N);
  if (n * C == 0) return;
  GPT_LAUNCH(grid_for(n * 2 * C, kThreads), kThreads, stream, pope_output_backward_kernel)(dy2, dy, C, NH, n);
  GPT_CUDA_CHECK_LAUNCH("pope_output_backward_kernel");
}

}  // namespace gpt::cuda
