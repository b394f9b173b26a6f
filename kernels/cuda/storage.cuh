// Tensor elements as the ops store them: float32, or bf16 (kernels/bf16_round.h)
// read widened (exact) and written rounded to nearest even. An op written
// with load and store runs on either: its bf16 form reads and writes what
// the bf16-storage adapter (src/backend/bf16_backend.cpp) would have widened
// and rounded around the float32 form, with the same float32 math between,
// so the two give the same bits (tests/kernels/cuda/cuda_bf16_native_test.cpp).
#pragma once
#include <cstddef>

#include "kernels/bf16_round.h"
#include "kernels/cuda/cuda_syntax.h"

namespace gpt::cuda {

__device__ __forceinline__ float load(const float* p, size_t i) { return p[i]; }
__device__ __forceinline__ float load(const bf16* p, size_t i) { return bf16_bits_to_float(p[i].bits); }
__device__ __forceinline__ void store(float* p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(bf16* p, size_t i, float v) { p[i].bits = round_to_bf16_bits(v); }

}  // namespace gpt::cuda
