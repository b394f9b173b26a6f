// The forget gate's prefix sums c_t = Σ ln σ(g) per sequence and head, and
// their backward.
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

// One thread per (sequence, head): a sequential scan over t in double, as the
// CPU kernel sums.
__global__ void __launch_bounds__(128) forget_forward_kernel(float* c, const float* g, int B, int Tn, int NH) {
  GPT_BLOCK_BOUND(128);
  const int bh = blockIdx.x * blockDim.x + threadIdx.x;
  if (bh >= B * NH) return;
  const int b = bh / NH, h = bh % NH;
  double sum = 0;
  for (int t = 0; t < Tn; ++t) {
    sum += attn::log_sigmoid(static_cast<double>(g[(static_cast<size_t>(b) * Tn + t) * NH + h]));
    c[static_cast<size_t>(bh) * Tn + t] = static_cast<float>(sum);
  }
}

__global__ void __launch_bounds__(128)
    forget_backward_kernel(float* dg, const float* dc, const float* g, int B, int Tn, int NH) {
  GPT_BLOCK_BOUND(128);
  const int bh = blockIdx.x * blockDim.x + threadIdx.x;
  if (bh >= B * NH) return;
  const int b = bh / NH, h = bh % NH;
  double suffix = 0;
  for (int t = Tn - 1; t >= 0; --t) {
    suffix += static_cast<double>(dc[static_cast<size_t>(bh) * Tn + t]);
    const size_t k = (static_cast<size_t>(b) * Tn + t) * NH + h;
    dg[k] += static_cast<float>(attn::log_sigmoid_grad(static_cast<double>(g[k])) * suffix);
  }
}

void forget_forward(float* c, const float* g, int B, int Tn, int NH, cudaStream_t stream) {
  const int n = B * NH;
  if (n == 0 || Tn == 0) return;
  GPT_LAUNCH((n + 127) / 128, 128, stream, forget_forward_kernel)(c, g, B, Tn, NH);
  GPT_CUDA_CHECK_LAUNCH("forget_forward_kernel");
}

void forget_backward(float* dg, const float* dc, const float* g, int B, int Tn, int NH, cudaStream_t stream) {
  const int n = B * NH;
  if (n == 0 || Tn == 0) return;
  GPT_LAUNCH((n + 127) / 128, 128, stream, forget_backward_kernel)(dg, dc, g, B, Tn, NH);
  GPT_CUDA_CHECK_LAUNCH("forget_backward_kernel");
}

}  // namespace gpt::cuda
