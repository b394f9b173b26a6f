// What the CUDA element-wise and per-row ops (kernels/cuda/*.cu) share: the
// block size, the grid-stride loop, and the column blocks of the sums over
// rows.
#pragma once
#include <algorithm>
#include <cstddef>

#include "kernels/cuda/cuda_syntax.h"

namespace gpt::cuda {
namespace {

constexpr int kThreads = 256;

#define GPT_GRID_STRIDE(i, n) \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (n); i += size_t(gridDim.x) * blockDim.x)

// Column sums over rows, shared by the LayerNorm parameters and the bias
// gradient. Block (32, 8): threadIdx.x is the column within a block of 32,
// threadIdx.y and blockIdx.y stride over the rows; the 8 partial sums of a
// column are added in shared memory and the block adds its total with
// atomicAdd (gridDim.y blocks per column).
constexpr int kColRows = 8;

inline unsigned row_blocks(int N) { return static_cast<unsigned>(std::min(64, std::max(1, N / 256))); }

}  // namespace
}  // namespace gpt::cuda
