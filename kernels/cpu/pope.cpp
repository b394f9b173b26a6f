// PoPE's model-side ops (attn::pope of kernels/attention/pope.h; contracts in
// kernels/cpu/cpu_kernels.h): q, k and v of each head into the kernels'
// heads of 2D channels and back, and the output's first D channels of each
// head. Rows run in parallel; the phase biases' gradient is summed per
// channel over the rows in order, so no result depends on the thread count.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"

namespace gpt::cpu {

namespace {
constexpr long kMinParallelRows = 64;
}  // namespace

template <typename T>
void pope_forward(T* qkv2, const T* qkv, const T* delta, int B, int Tn, int C, int NH, double theta,
                  const int32_t* pos) {
  const int D = C / NH;
  const long N = static_cast<long>(B) * Tn;
#pragma omp parallel for if (N >= kMinParallelRows)
  for (long n = 0; n < N; ++n) {
    const double t = attn::pope::row_position(pos, n, Tn);
    const T* in = qkv + n * 3 * static_cast<size_t>(C);
    T* out = qkv2 + n * 6 * static_cast<size_t>(C);
    for (int h = 0; h < NH; ++h)
      for (int c = 0; c < D; ++c) {
        const int i = h * D + c, o = h * 2 * D + c;
        const attn::pope::Channel ch(theta, t, c, D, static_cast<double>(delta[i]));
        double qc, qs, kc, ks;
        ch.query(static_cast<double>(in[i]), &qc, &qs);
        ch.key(static_cast<double>(in[C + i]), &kc, &ks);
        out[o] = static_cast<T>(qc);
        out[o + D] = static_cast<T>(qs);
        out[2 * C + o] = static_cast<T>(kc);
        out[2 * C + o + D] = static_cast<T>(ks);
        out[4 * C + o] = in[2 * C + i];
        out[4 * C + o + D] = T(0);
      }
  }
}

template <typename T>
void pope_backward(T* dqkv, T* ddelta, const T* dqkv2, const T* qkv, const T* delta, int B, int Tn, int C, int NH,
                   double theta, const int32_t* pos) {
  const int D = C / NH;
  const long N = static_cast<long>(B) * Tn;
#pragma omp parallel for if (N >= kMinParallelRows)
  for (long n = 0; n < N; ++n) {
    const double t = attn::pope::row_position(pos, n, Tn);
    const T* in = qkv + n * 3 * static_cast<size_t>(C);
    const T* g = dqkv2 + n * 6 * static_cast<size_t>(C);
    T* d = dqkv + n * 3 * static_cast<size_t>(C);
    for (int h = 0; h < NH; ++h)
      for (int c = 0; c < D; ++c) {
        const int i = h * D + c, o = h * 2 * D + c;
        const attn::pope::Channel ch(theta, t, c, D, static_cast<double>(delta[i]));
        d[i] += static_cast<T>(ch.query_grad(static_cast<double>(in[i]), g[o], g[o + D]));
        d[C + i] += static_cast<T>(ch.key_grad(static_cast<double>(in[C + i]), g[2 * C + o], g[2 * C + o + D]));
        d[2 * C + i] += g[4 * C + o];
      }
  }
  // dδ_{h,c} = Σ_rows μ_k (−dk′_c sin ψ + dk′_{D+c} cos ψ), where δ is inside its range.
#pragma omp parallel for if (N >= kMinParallelRows)
  for (int i = 0; i < C; ++i) {
    const int h = i / D, c = i % D, o = h * 2 * D + c;
    if (!attn::pope::bias_passes(static_cast<double>(delta[i]))) continue;
    double sum = 0;
    for (long n = 0; n < N; ++n) {
      const attn::pope::Channel ch(theta, attn::pope::row_position(pos, n, Tn), c, D, static_cast<double>(delta[i]));
      const T* g = dqkv2 + n * 6 * static_cast<size_t>(C) + 2 * C;
      sum += ch.bias_grad(static_cast<double>(qkv[n * 3 * static_cast<size_t>(C) + C + i]), g[o], g[o + D]);
    }
    ddelta[i] += static_cast<T>(sum);
  }
}

template <typename T>
void pope_output_forward(T* y, const T* y2, int N, int C, int NH) {
  const int D = C / NH;
#pragma omp parallel for if (N >= kMinParallelRows)
  for (long n = 0; n < N; ++n)
    for (int h = 0; h < NH; ++h)
      for (int c = 0; c < D; ++c) y[n * C + h * D + c] = y2[n * 2 * C + h * 2 * D + c];
}

template <typename T>
void pope_output_backward(T* dy2, const T* dy, int N, int C, int NH) {
  const int D = C / NH;
#pragma omp parallel for if (N >= kMinParallelRows)
  for (long n = 0; n < N; ++n)
    for (int h = 0; h < NH; ++h)
      for (int c = 0; c < D; ++c) {
        dy2[n * 2 * C + h * 2 * D + c] = dy[n * C + h * D + c];
        dy2[n * 2 * C + h * 2 * D + D + c] = T(0);
      }
}

#define GPT_INSTANTIATE(T)                                                                                          \
  template void pope_forward<T>(T*, const T*, const T*, int, int, int, int, double, const int32_t*);                \
  template void pope_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int, double, const int32_t*); \
  template void pope_output_forward<T>(T*, const T*, int, int, int);                                                \
  template void pope_output_backward<T>(T*, const T*, int, int, int);
GPT_INSTANTIATE(float)
GPT_INSTANTIATE(double)
#undef GPT_INSTANTIATE

}  // namespace gpt::cpu
