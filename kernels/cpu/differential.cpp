// Differential attention's model-side ops (attn::diff of
// kernels/attention_spec.h; contracts in kernels/cpu/cpu_kernels.h): the
// split of qkv into the kernel heads of the two maps, the combination of
// their outputs (z = y¹ − λ·y², RMSNorm, gain, 1 − λ_init), and the
// repetition of per-head inputs over a head's kernel heads. Rows run in
// parallel; the parameter gradients are summed per fixed chunk of rows and
// the chunks added in order, so no result depends on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

namespace gpt::cpu {

namespace {

constexpr long kMinParallelRows = 64;
constexpr long kChunkRows = 64;  // rows per partial sum of the parameter gradients

// Channel c of kernel head s of a (N, 3·2C) split row, part 0 (q), 1 (k), 2 (v).
inline size_t split_at(int part, int s, int c, int C, int d) {
  return static_cast<size_t>(part) * 2 * C + static_cast<size_t>(s) * d + c;
}

}  // namespace

template <typename T>
void diff_split_forward(T* qkv2, const T* qkv, int N, int C, int NH) {
  const int D = C / NH, d = D / 2;
#pragma omp parallel for if (N >= kMinParallelRows)
  for (long n = 0; n < N; ++n) {
    const T* in = qkv + n * 3 * static_cast<size_t>(C);
    T* out = qkv2 + n * 6 * static_cast<size_t>(C);
    for (int h = 0; h < NH; ++h)
      for (int m = 0; m < 2; ++m)
        for (int u = 0; u < 2; ++u) {
          const int s = attn::diff::kHeads * h + 2 * m + u;
          for (int c = 0; c < d; ++c) {
            out[split_at(0, s, c, C, d)] = in[h * D + m * d + c];
            out[split_at(1, s, c, C, d)] = in[C + h * D + m * d + c];
            out[split_at(2, s, c, C, d)] = in[2 * C + h * D + u * d + c];
          }
        }
  }
}

template <typename T>
void diff_split_backward(T* dqkv, const T* dqkv2, int N, int C, int NH) {
  const int D = C / NH, d = D / 2;
#pragma omp parallel for if (N >= kMinParallelRows)
  for (long n = 0; n < N; ++n) {
    const T* g = dqkv2 + n * 6 * static_cast<size_t>(C);
    T* out = dqkv + n * 3 * static_cast<size_t>(C);
    for (int h = 0; h < NH; ++h) {
      const int s0 = attn::diff::kHeads * h;
      for (int m = 0; m < 2; ++m)  // q^m, k^m: read by both value halves
        for (int c = 0; c < d; ++c) {
          out[h * D + m * d + c] += g[split_at(0, s0 + 2 * m, c, C, d)] + g[split_at(0, s0 + 2 * m + 1, c, C, d)];
          out[C + h * D + m * d + c] += g[split_at(1, s0 + 2 * m, c, C, d)] + g[split_at(1, s0 + 2 * m + 1, c, C, d)];
        }
      for (int u = 0; u < 2; ++u)  // the value half u: read by both maps
        for (int c = 0; c < d; ++c)
          out[2 * C + h * D + u * d + c] += g[split_at(2, s0 + u, c, C, d)] + g[split_at(2, s0 + 2 + u, c, C, d)];
    }
  }
}

template <typename T>
void diff_combine_forward(T* out, T* rstd, const T* y2, const T* lam, const T* gain, int N, int C, int NH,
                          double lambda_init) {
  const int D = C / NH, d = D / 2;
  const double l = attn::diff::lambda(lam, d, lambda_init).value, scale = 1.0 - lambda_init;
  std::vector<double> z(D);
#pragma omp parallel for if (N >= kMinParallelRows) firstprivate(z)
  for (long n = 0; n < N; ++n) {
    const T* y = y2 + n * 2 * static_cast<size_t>(C);
    for (int h = 0; h < NH; ++h) {
      const int s0 = attn::diff::kHeads * h;
      double ss = 0;
      for (int u = 0; u < 2; ++u)
        for (int c = 0; c < d; ++c) {
          const double v = static_cast<double>(y[(s0 + u) * d + c]) - l * static_cast<double>(y[(s0 + 2 + u) * d + c]);
          z[u * d + c] = v;
          ss += v * v;
        }
      const double r = 1.0 / std::sqrt(ss / D + attn::diff::kEps);
      rstd[n * NH + h] = static_cast<T>(r);
      for (int c = 0; c < D; ++c)
        out[n * static_cast<size_t>(C) + h * D + c] = static_cast<T>(scale * z[c] * r * static_cast<double>(gain[c]));
    }
  }
}

template <typename T>
void diff_combine_backward(T* dy2, T* dlam, T* dgain, const T* dout, const T* y2, const T* rstd, const T* lam,
                           const T* gain, int N, int C, int NH, double lambda_init) {
  const int D = C / NH, d = D / 2;
  const attn::diff::Lambda L = attn::diff::lambda(lam, d, lambda_init);
  const double l = L.value, scale = 1.0 - lambda_init;
  const long chunks = (N + kChunkRows - 1) / kChunkRows;
  std::vector<double> part_gain(static_cast<size_t>(chunks) * D, 0.0), part_lam(chunks, 0.0);
#pragma omp parallel for schedule(dynamic, 1) if (N >= kMinParallelRows)
  for (long k = 0; k < chunks; ++k) {
    std::vector<double> z(D), dn(D);
    double* pg = &part_gain[static_cast<size_t>(k) * D];
    double dl = 0;
    for (long n = k * kChunkRows; n < std::min<long>(N, (k + 1) * kChunkRows); ++n) {
      const T* y = y2 + n * 2 * static_cast<size_t>(C);
      T* dy = dy2 + n * 2 * static_cast<size_t>(C);
      const T* g = dout + n * static_cast<size_t>(C);
      for (int h = 0; h < NH; ++h) {
        const int s0 = attn::diff::kHeads * h;
        const double r = static_cast<double>(rstd[n * NH + h]);
        double dot = 0;  // Σ dn·n̂ over the head
        for (int u = 0; u < 2; ++u)
          for (int c = 0; c < d; ++c)
            z[u * d + c] = static_cast<double>(y[(s0 + u) * d + c]) - l * static_cast<double>(y[(s0 + 2 + u) * d + c]);
        for (int c = 0; c < D; ++c) {
          const double go = static_cast<double>(g[h * D + c]), nh = z[c] * r;
          pg[c] += scale * go * nh;
          dn[c] = scale * go * static_cast<double>(gain[c]);
          dot += dn[c] * nh;
        }
        dot /= D;
        for (int u = 0; u < 2; ++u)
          for (int c = 0; c < d; ++c) {
            const double dz = r * (dn[u * d + c] - z[u * d + c] * r * dot);
            dy[(s0 + u) * d + c] = static_cast<T>(dz);
            dy[(s0 + 2 + u) * d + c] = static_cast<T>(-l * dz);
            dl -= dz * static_cast<double>(y[(s0 + 2 + u) * d + c]);
          }
      }
    }
    part_lam[k] = dl;
  }
  double dl = 0;
  for (long k = 0; k < chunks; ++k) {
    dl += part_lam[k];
    for (int c = 0; c < D; ++c) dgain[c] += static_cast<T>(part_gain[static_cast<size_t>(k) * D + c]);
  }
  for (int k = 0; k < 4 * d; ++k) dlam[k] += static_cast<T>(dl * attn::diff::lambda_grad(lam, d, L, k));
}

template <typename T>
void head_repeat(T* dst, const T* src, size_t outer, int NH, size_t inner, int group) {
#pragma omp parallel for if (outer * NH * inner * group >= (1 << 16))
  for (long oh = 0; oh < static_cast<long>(outer) * NH; ++oh) {
    const T* s = src + oh * inner;
    for (int k = 0; k < group; ++k) std::copy(s, s + inner, dst + (oh * group + k) * inner);
  }
}

template <typename T>
void head_reduce(T* dst, const T* src, size_t outer, int NH, size_t inner, int group) {
#pragma omp parallel for if (outer * NH * inner * group >= (1 << 16))
  for (long oh = 0; oh < static_cast<long>(outer) * NH; ++oh) {
    T* o = dst + oh * inner;
    for (int k = 0; k < group; ++k) {
      const T* s = src + (oh * group + k) * inner;
      for (size_t i = 0; i < inner; ++i) o[i] += s[i];
    }
  }
}

#define GPT_DIFF_INSTANTIATE(T)                                                                                       \
  template void diff_split_forward<T>(T*, const T*, int, int, int);                                                   \
  template void diff_split_backward<T>(T*, const T*, int, int, int);                                                  \
  template void diff_combine_forward<T>(T*, T*, const T*, const T*, const T*, int, int, int, double);                 \
  template void diff_combine_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int, int, int, \
                                         double);                                                                     \
  template void head_repeat<T>(T*, const T*, size_t, int, size_t, int);                                               \
  template void head_reduce<T>(T*, const T*, size_t, int, size_t, int);
GPT_DIFF_INSTANTIATE(float)
GPT_DIFF_INSTANTIATE(double)
#undef GPT_DIFF_INSTANTIATE

}  // namespace gpt::cpu
