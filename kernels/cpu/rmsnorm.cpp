// RMSNorm over the last dimension (Zhang & Sennrich 2019; the norm of Llama,
// Mistral and Qwen): y = x · rstd · w, rstd = 1/sqrt(mean(x²) + eps). No mean
// is subtracted and there is no bias. docs/blocks.md states it and its
// gradient; the sums run in T (float32 for training, as Hugging Face's
// LlamaRMSNorm computes its variance in float32).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

namespace {
constexpr int kChannelBlock = 32;
}  // namespace

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, double eps) {
#pragma omp parallel for schedule(static) if (size_t(N) * C >= kMinParallelWork)
  for (int n = 0; n < N; ++n) {
    // (N,C) row n
    const T* x = inp + static_cast<size_t>(n) * C;
    T* y = out + static_cast<size_t>(n) * C;
    T ss = 0;
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const T s = T(1) / std::sqrt(ss / C + static_cast<T>(eps));
    for (int c = 0; c < C; ++c) y[c] = x[c] * s * weight[c];
    if (rstd) rstd[n] = s;
  }
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int N, int C) {
  // dinp += rstd · (g − x̂ · mean(g · x̂)), g = dout · w, x̂ = x · rstd.
#pragma omp parallel for schedule(static) if (size_t(N) * C >= kMinParallelWork)
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<size_t>(n) * C;
    const T* dy = dout + static_cast<size_t>(n) * C;
    T* dx = dinp + static_cast<size_t>(n) * C;
    const T s = rstd[n];
    T gx_mean = 0;
    for (int c = 0; c < C; ++c) gx_mean += dy[c] * weight[c] * x[c] * s;
    gx_mean /= C;
    for (int c = 0; c < C; ++c) dx[c] += s * (dy[c] * weight[c] - x[c] * s * gx_mean);
  }
  // dweight += Σ_n dout · x̂, over channel blocks so that each element is
  // summed over n in order by one thread.
  const int nblocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (size_t(N) * C >= kMinParallelWork)
  for (int blk = 0; blk < nblocks; ++blk) {
    const int c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
    for (int n = 0; n < N; ++n) {
      const T* x = inp + static_cast<size_t>(n) * C;
      const T* dy = dout + static_cast<size_t>(n) * C;
      const T s = rstd[n];
      for (int c = c0; c < c1; ++c) dweight[c] += dy[c] * x[c] * s;
    }
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int, int, double);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int, int, double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*, const float*, int, int);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*, const double*, const double*,
                                       int, int);

}  // namespace gpt::cpu
