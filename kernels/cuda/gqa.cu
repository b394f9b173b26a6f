// Grouped-query attention's repeat of the key/value heads over their group,
// and its adjoint. Contracts: kernels/cuda/cuda_kernels.h; the layout:
// kernels/cpu/gqa.cpp and docs/blocks.md.
#include "core/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_syntax.h"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/cuda/reduce.cuh"

namespace gpt::cuda {

namespace {

// One element (n, c) of the (N, 3C) expanded tensor per thread.
__global__ void __launch_bounds__(kThreads)
    gqa_expand_kernel(float* qkv, const float* grouped, int N, int NH, int NKV, int D) {
  GPT_BLOCK_BOUND(kThreads);
  const size_t C = size_t(NH) * D, KV = size_t(NKV) * D;
  const int group = NH / NKV;
  GPT_GRID_STRIDE(i, size_t(N) * 3 * C) {
    const size_t n = i / (3 * C), c = i % (3 * C);
    const float* g = grouped + n * (C + 2 * KV);
    if (c < C) {
      qkv[i] = g[c];
    } else {
      const size_t part = c / C, h = (c % C) / D, d = c % D;
      qkv[i] = g[C + (part - 1) * KV + (h / group) * D + d];
    }
  }
}

// One element of the (N, C + 2·KV) grouped gradient per thread: the query
// part copied, a key/value element the sum of its group's, in head order.
__global__ void __launch_bounds__(kThreads)
    gqa_reduce_kernel(float* dgrouped, const float* dqkv, int N, int NH, int NKV, int D) {
  GPT_BLOCK_BOUND(kThreads);
  const size_t C = size_t(NH) * D, KV = size_t(NKV) * D, W = C + 2 * KV;
  const int group = NH / NKV;
  GPT_GRID_STRIDE(i, size_t(N) * W) {
    const size_t n = i / W, c = i % W;
    const float* o = dqkv + n * 3 * C;
    if (c < C) {
      dgrouped[i] += o[c];
    } else {
      const size_t part = 1 + (c - C) / KV, k = ((c - C) % KV) / D, d = (c - C) % D;
      float s = 0.f;
      for (int j = 0; j < group; ++j) s += o[part * C + (k * group + j) * D + d];
      dgrouped[i] += s;
    }
  }
}

}  // namespace

void gqa_expand(float* qkv, const float* grouped, int N, int NH, int NKV, int D, cudaStream_t stream) {
  const size_t n = size_t(N) * 3 * NH * D;
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, gqa_expand_kernel)(qkv, grouped, N, NH, NKV, D);
  GPT_CUDA_CHECK_LAUNCH("gqa_expand_kernel");
}

void gqa_reduce(float* dgrouped, const float* dqkv, int N, int NH, int NKV, int D, cudaStream_t stream) {
  const size_t n = size_t(N) * (size_t(NH) + 2 * size_t(NKV)) * D;
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, gqa_reduce_kernel)(dgrouped, dqkv, N, NH, NKV, D);
  GPT_CUDA_CHECK_LAUNCH("gqa_reduce_kernel");
}

}  // namespace gpt::cuda
