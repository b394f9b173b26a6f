// The token and position embedding: its forward (float or bf16 tables) and
// the backward into the two tables.
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

// ---- embedding ----------------------------------------------------------------------
// A table element as float32: as it is, or a bf16 bit pattern widened.
__device__ inline float table_value(float x) { return x; }

__device__ inline float table_value(uint16_t bits) { return bf16_bits_to_float(bits); }

// E: how the tables are stored (float, or bf16 bits for run.storage "bf16").
template <typename E>
__global__ void __launch_bounds__(kThreads)
    encoder_forward_kernel(float* out, const int32_t* tokens, const E* wte, const E* wpe, int Tn, int C, size_t total) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, total) {
    const size_t bt = i / C, c = i % C;
    float v = table_value(wte[size_t(tokens[bt]) * C + c]);
    if (wpe) v += table_value(wpe[(bt % Tn) * C + c]);
    out[i] = v;
  }
}

// dwte[tokens[bt], c] += dout[bt, c]: repeated tokens collide, hence atomicAdd.
__global__ void __launch_bounds__(kThreads)
    encoder_backward_wte_kernel(float* dwte, const float* dout, const int32_t* tokens, int C, size_t total) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, total) {
    const size_t bt = i / C, c = i % C;
    atomicAdd(dwte + size_t(tokens[bt]) * C + c, dout[i]);
  }
}

// dwpe[t, c] += Σ_b dout[b, t, c]: one thread per (t, c), b in order.
__global__ void __launch_bounds__(kThreads)
    encoder_backward_wpe_kernel(float* dwpe, const float* dout, int B, int Tn, int C) {
  GPT_BLOCK_BOUND(kThreads);
  const size_t total = size_t(Tn) * C;
  GPT_GRID_STRIDE(i, total) {
    float s = 0.f;
    for (int b = 0; b < B; ++b) s += dout[size_t(b) * total + i];
    dwpe[i] += s;
  }
}

template <typename E>
void encoder_forward_of(float* out, const int32_t* tokens, const E* wte, const E* wpe, int B, int Tn, int C,
                        cudaStream_t stream) {
  const size_t total = size_t(B) * Tn * C;
  if (total == 0) return;
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, encoder_forward_kernel<E>)
  (out, tokens, wte, wpe, Tn, C, total);
  GPT_CUDA_CHECK_LAUNCH("encoder_forward_kernel");
}

}  // namespace

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int Tn, int C,
                     cudaStream_t stream) {
  encoder_forward_of(out, tokens, wte, wpe, B, Tn, C, stream);
}

void encoder_forward(float* out, const int32_t* tokens, const uint16_t* wte, const uint16_t* wpe, int B, int Tn, int C,
                     cudaStream_t stream) {
  encoder_forward_of(out, tokens, wte, wpe, B, Tn, C, stream);
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int Tn, int C,
                      cudaStream_t stream) {
  const size_t total = size_t(B) * Tn * C;
  if (total == 0) return;
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, encoder_backward_wte_kernel)(dwte, dout, tokens, C, total);
  GPT_CUDA_CHECK_LAUNCH("encoder_backward_wte_kernel");
  if (dwpe) {
    GPT_LAUNCH(grid_for(size_t(Tn) * C, kThreads), kThreads, stream, encoder_backward_wpe_kernel)(dwpe, dout, B, Tn, C);
    GPT_CUDA_CHECK_LAUNCH("encoder_backward_wpe_kernel");
  }
}

}  // namespace gpt::cuda
