// AdamW, one thread per parameter (grid-stride).
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

// ---- AdamW ---------------------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(float* param, const float* grad, float* m, float* v, size_t n, float b1, float b2, float one_m_b1,
                 float one_m_b2, float inv_c1, float inv_c2, float lr, float eps, float wd) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, n) {
    const float g = grad[i];
    const float mi = b1 * m[i] + one_m_b1 * g;
    const float vi = b2 * v[i] + one_m_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi * inv_c1, vhat = vi * inv_c2;
    param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * param[i]);
  }
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, double lr, double beta1, double beta2,
                  double eps, double weight_decay, long t, cudaStream_t stream) {
  GPT_CHECK(t >= 1, "adamw_update: step t must be >= 1 (1-based, for bias correction), got ", t);
  if (n == 0) return;
  const float inv_c1 = float(1.0 / (1.0 - std::pow(beta1, double(t))));
  const float inv_c2 = float(1.0 / (1.0 - std::pow(beta2, double(t))));
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, adamw_kernel)
  (param, grad, m, v, n, float(beta1), float(beta2), float(1.0 - beta1), float(1.0 - beta2), inv_c1, inv_c2, float(lr),
   float(eps), float(weight_decay));
  GPT_CUDA_CHECK_LAUNCH("adamw_kernel");
}

}  // namespace gpt::cuda
