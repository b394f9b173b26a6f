// Compiles the attention stage math of kernels/attention_spec.h for the
// device, so that a change which makes it host-only (STL, exceptions, a
// missing GPT_HD) fails the build here, before the CUDA attention kernels
// that will use it exist. The kernel evaluates every stage function once per
// thread; nothing launches it yet.
#include <cuda_runtime.h>

#include "kernels/attention_spec.h"
#include "kernels/cuda/cuda_syntax.h"

namespace gpt::cuda {

__global__ void __launch_bounds__(256) attention_spec_device_check(AttentionSpec s, const float* x, float* out, int n) {
  GPT_BLOCK_BOUND(256);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int row = i + 1;
  const float lambda = static_cast<float>(attn::row_scale(s, row, 64, 0.5) * attn::score_factor(s, 64));
  const float u = attn::positivity(s.positivity, lambda * x[i] + static_cast<float>(s.bias));
  const float du = attn::positivity_grad(s.positivity, x[i], u);
  const float st[4] = {0.f, 1.f + u, 0.5f, 1.f};
  const attn::Row<float> r = attn::row_from_stats(s, row, st);
  const float a = r.a(s, x[i]);
  const float w = r.w_from_a(a);
  const float h = attn::grad_a(r, a, w, 1.f, 0.5f);
  out[i] = w + du + attn::grad_x(s, r, x[i], h, 0.25f) +
           static_cast<float>(attn::alibi_slope(i % 8, 8) + attn::row_scale_grad(s, row, 64));
}

}  // namespace gpt::cuda
