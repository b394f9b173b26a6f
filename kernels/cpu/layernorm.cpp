// LayerNorm over the last dimension: y = (x - mean) * rstd * w + b with
// rstd = 1/sqrt(var + 1e-5), var the biased (1/C) variance, as in GPT-2.
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <cmath>

namespace gpt::cpu {

namespace {
constexpr double kEps = 1e-5;  // GPT-2 / PyTorch nn.LayerNorm default
constexpr int kChannelBlock = 32;
}  // namespace

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int N, int C) {
#pragma omp parallel for schedule(static) if (size_t(N) * C >= kMinParallelWork)
  for (int n = 0; n < N; ++n) {
    // (N,C) row n
    const T* x = inp + static_cast<size_t>(n) * C;
    T* y = out + static_cast<size_t>(n) * C;
    // Two passes (mean, then squared deviations) avoid the cancellation of
    // E[x²] - E[x]² when |mean| >> std.
    T m = 0;
    for (int c = 0; c < C; ++c) m += x[c];
    m /= C;
    T var = 0;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= C;
    const T s = T(1) / std::sqrt(var + T(kEps));
    for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c] + bias[c];
    if (mean) mean[n] = m;
    if (rstd) rstd[n] = s;
  }
}

namespace {

// dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w.
template <typename T>
void layernorm_backward_inputs(T* dinp, const T* dout, const T* inp, const T* weight, const T* mean, const T* rstd,
                               int N, int C) {
#pragma omp parallel for schedule(static) if (size_t(N) * C >= kMinParallelWork)
  for (int n = 0; n < N; ++n) {
    // (N,C) row n
    const T* x = inp + static_cast<size_t>(n) * C;
    const T* dy = dout + static_cast<size_t>(n) * C;
    T* dx = dinp + static_cast<size_t>(n) * C;
    const T m = mean[n], s = rstd[n];
    T g_mean = 0, gx_mean = 0;
    for (int c = 0; c < C; ++c) {
      const T g = dy[c] * weight[c];
      g_mean += g;
      gx_mean += g * (x[c] - m) * s;
    }
    g_mean /= C;
    gx_mean /= C;
    for (int c = 0; c < C; ++c) {
      const T xhat = (x[c] - m) * s;
      dx[c] += s * (dy[c] * weight[c] - g_mean - xhat * gx_mean);
    }
  }
}

// dweight += Σ_n dout * xhat, dbias += Σ_n dout. Parallel over channel
// blocks so each element is summed over n in order by one thread.
template <typename T>
void layernorm_backward_params(T* dweight, T* dbias, const T* dout, const T* inp, const T* mean, const T* rstd, int N,
                               int C) {
  const int nblocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (size_t(N) * C >= kMinParallelWork)
  for (int blk = 0; blk < nblocks; ++blk) {
    const int c0 = blk * kChannelBlock;
    const int c1 = std::min(C, c0 + kChannelBlock);
    for (int n = 0; n < N; ++n) {
      // (N,C) row n, channels c0..c1-1
      const T* x = inp + static_cast<size_t>(n) * C;
      const T* dy = dout + static_cast<size_t>(n) * C;
      const T m = mean[n], s = rstd[n];
      for (int c = c0; c < c1; ++c) {
        dweight[c] += dy[c] * (x[c] - m) * s;
        dbias[c] += dy[c];
      }
    }
  }
}

}  // namespace

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int N, int C) {
  layernorm_backward_inputs(dinp, dout, inp, weight, mean, rstd, N, C);
  layernorm_backward_params(dweight, dbias, dout, inp, mean, rstd, N, C);
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, int, int);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*, const double*, int,
                                        int);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                                        const float*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const double*, int, int);

}  // namespace gpt::cpu
