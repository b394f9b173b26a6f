// Warp and block reductions shared by the row kernels (LayerNorm, the
// classifier, sum of squares). Block reductions assume blockDim.x is a
// multiple of 32 (at most 1024) and that every thread of the block calls them.
#pragma once
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_syntax.h"

namespace gpt::cuda {

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

template <typename T>
__device__ inline T warp_max(T v) {
  for (int off = 16; off > 0; off >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Sum (is_max = false) or maximum (true) over the block; every thread gets
// the result. Starts and ends with a barrier, so it may be called repeatedly.
template <typename T, bool is_max>
__device__ inline T block_reduce(T v) {
  GPT_SHARED(T, partial, [32]);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = is_max ? warp_max(v) : warp_sum(v);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T r = partial[0];
  for (int w = 1; w < nwarps; ++w) r = is_max ? fmax(r, partial[w]) : r + partial[w];
  return r;
}

template <typename T>
__device__ inline T block_sum(T v) {
  return block_reduce<T, false>(v);
}
template <typename T>
__device__ inline T block_max(T v) {
  return block_reduce<T, true>(v);
}

// Grid size for a grid-stride loop over n elements with `threads` per block.
inline unsigned grid_for(size_t n, int threads, size_t max_blocks = 65535 * 16) {
  size_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > max_blocks) blocks = max_blocks;
  return static_cast<unsigned>(blocks);
}

}  // namespace gpt::cuda
