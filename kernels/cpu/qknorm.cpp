// QK-norm (docs/blocks.md): each head's query and key vectors RMS-normalised
// over their D channels before RoPE, with a gain of D values shared by the
// heads (Qwen3's and Gemma 3's q_norm and k_norm; OLMo 2 normalises the
// whole projection instead), or without a gain (Llama 4's L2 norm, which
// also divides by the root of the mean square plus eps); optionally each
// query head times a learned scalar (its logits' scale). Values are copied.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

namespace {
// The factor of channel d of head h of part (0 q, 1 k): the gain, and for
// queries the head's scale.
template <typename T>
T gain_of(const T* w, const T* sq, int part, int h, int d) {
  return (w ? w[d] : T(1)) * (part == 0 && sq ? sq[h] : T(1));
}
}  // namespace

template <typename T>
void qknorm_forward(T* out, T* rstd, const T* inp, const T* wq, const T* wk, const T* sq, int N, int NH, int D,
                    double eps) {
  const size_t C = static_cast<size_t>(NH) * D;
#pragma omp parallel for schedule(static) if (size_t(N) * 3 * C >= kMinParallelWork)
  for (int n = 0; n < N; ++n) {
    const T* x = inp + n * 3 * C;
    T* y = out + n * 3 * C;
    for (int part = 0; part < 2; ++part) {  // q, k
      const T* w = part ? wk : wq;
      for (int h = 0; h < NH; ++h) {
        const T* xh = x + part * C + static_cast<size_t>(h) * D;
        T* yh = y + part * C + static_cast<size_t>(h) * D;
        T ss = 0;
        for (int d = 0; d < D; ++d) ss += xh[d] * xh[d];
        const T r = T(1) / std::sqrt(ss / D + static_cast<T>(eps));
        for (int d = 0; d < D; ++d) yh[d] = xh[d] * r * gain_of(w, sq, part, h, d);
        if (rstd) rstd[(static_cast<size_t>(n) * 2 + part) * NH + h] = r;
      }
    }
    for (size_t c = 2 * C; c < 3 * C; ++c) y[c] = x[c];  // v
  }
}

template <typename T>
void qknorm_backward(T* dinp, T* dwq, T* dwk, T* dsq, const T* dout, const T* inp, const T* wq, const T* wk,
                     const T* sq, const T* rstd, int N, int NH, int D) {
  const size_t C = static_cast<size_t>(NH) * D;
  // dinp += r·(g − x̂·mean(g·x̂)), g = dout·w·s, x̂ = x·r, per head; v copied.
#pragma omp parallel for schedule(static) if (size_t(N) * 3 * C >= kMinParallelWork)
  for (int n = 0; n < N; ++n) {
    const T* x = inp + n * 3 * C;
    const T* dy = dout + n * 3 * C;
    T* dx = dinp + n * 3 * C;
    for (int part = 0; part < 2; ++part) {
      const T* w = part ? wk : wq;
      for (int h = 0; h < NH; ++h) {
        const size_t o = part * C + static_cast<size_t>(h) * D;
        const T r = rstd[(static_cast<size_t>(n) * 2 + part) * NH + h];
        T gx = 0;
        for (int d = 0; d < D; ++d) gx += dy[o + d] * gain_of(w, sq, part, h, d) * x[o + d] * r;
        gx /= D;
        for (int d = 0; d < D; ++d) dx[o + d] += r * (dy[o + d] * gain_of(w, sq, part, h, d) - x[o + d] * r * gx);
      }
    }
    for (size_t c = 2 * C; c < 3 * C; ++c) dx[c] += dy[c];
  }
  // The gains: Σ over tokens and heads of dout·x̂ (times the query head's
  // scale); the scales: Σ over tokens and channels of dout·x̂·w. One thread
  // per part, in token and head order (D is a head's size: small).
  for (int part = 0; part < 2; ++part) {
    T* dw = part ? dwk : dwq;
    const T* w = part ? wk : wq;
    T* ds = part ? nullptr : dsq;
    if (!dw && !ds) continue;
    for (int n = 0; n < N; ++n)
      for (int h = 0; h < NH; ++h) {
        const size_t o = n * 3 * C + part * C + static_cast<size_t>(h) * D;
        const T r = rstd[(static_cast<size_t>(n) * 2 + part) * NH + h];
        const T s = part == 0 && sq ? sq[h] : T(1);
        T acc = 0;
        for (int d = 0; d < D; ++d) {
          const T g = dout[o + d] * inp[o + d] * r;
          if (dw) dw[d] += g * s;
          acc += g * (w ? w[d] : T(1));
        }
        if (ds) ds[h] += acc;
      }
  }
}

template void qknorm_forward<float>(float*, float*, const float*, const float*, const float*, const float*, int, int,
                                    int, double);
template void qknorm_forward<double>(double*, double*, const double*, const double*, const double*, const double*, int,
                                     int, int, double);
template void qknorm_backward<float>(float*, float*, float*, float*, const float*, const float*, const float*,
                                     const float*, const float*, const float*, int, int, int);
template void qknorm_backward<double>(double*, double*, double*, double*, const double*, const double*, const double*,
                                      const double*, const double*, const double*, int, int, int);

}  // namespace gpt::cpu
