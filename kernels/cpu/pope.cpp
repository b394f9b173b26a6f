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
void pope_forward(T* qkv2, const T* qkv, const T* delta, int B, int Tn, int C, int NH, double theta) {
  const int D = C / NH;
  const long N = static_cast<long>(B) * Tn;
#pragma omp parallel for if (N >= kMinParallelRows)
  for (long n = 0; n < N; ++n) {
    const double t = static_cast<double>(n % Tn);
    const T* in = qkv + n * 3 * static_cast<size_t>(C);
    T* out = qkv2 + n * 6 * static_cast<size_t>(C);
    for (int h = 0; h < NH; ++h)
      for (int c = 0; c < D; ++c) {
        const int i = h * D + c, o = h * 2 * D + c;
        const double phi = t * attn::pope::freq(theta, c, D);
        const double psi = phi + attn::pope::phase_bias(static_cast<double>(delta[i]));
        const double mq = attn::pope::kQueryGain * attn::pope::magnitude(static_cast<double>(in[i]));
        const double mk = attn::pope::magnitude(static_cast<double>(in[C + i]));
        out[o] = static_cast<T>(mq * std::cos(phi));
        out[o + D] = static_cast<T>(mq * std::sin(phi));
        out[2 * C + o] = static_cast<T>(mk * std::cos(psi));
        out[2 * C + o + D] = static_cast<T>(mk * std::sin(psi));
        out[4 * C + o] = in[2 * C + i];
        out[4 * C + o + D] = T(0);
      }
  }
}

template <typename T>
void pope_backward(T* dqkv, T* ddelta, const T* dqkv2, const T* qkv, const T* delta, int B, int Tn, int C, int NH,
                   double theta) {
  const int D = C / NH;
  const long N = static_cast<long>(B) * Tn;
#pragma omp parallel for if (N >= kMinParallelRows)
  for (long n = 0; n < N; ++n) {
    const double t = static_cast<double>(n % Tn);
    const T* in = qkv + n * 3 * static_cast<size_t>(C);
    const T* g = dqkv2 + n * 6 * static_cast<size_t>(C);
    T* d = dqkv + n * 3 * static_cast<size_t>(C);
    for (int h = 0; h < NH; ++h)
      for (int c = 0; c < D; ++c) {
        const int i = h * D + c, o = h * 2 * D + c;
        const double phi = t * attn::pope::freq(theta, c, D);
        const double psi = phi + attn::pope::phase_bias(static_cast<double>(delta[i]));
        const double gq = attn::pope::kQueryGain * attn::pope::magnitude_grad(static_cast<double>(in[i]));
        const double gk = attn::pope::magnitude_grad(static_cast<double>(in[C + i]));
        d[i] += static_cast<T>(gq * (g[o] * std::cos(phi) + g[o + D] * std::sin(phi)));
        d[C + i] += static_cast<T>(gk * (g[2 * C + o] * std::cos(psi) + g[2 * C + o + D] * std::sin(psi)));
        d[2 * C + i] += g[4 * C + o];
      }
  }
  // dδ_{h,c} = Σ_rows μ_k (−dk′_c sin ψ + dk′_{D+c} cos ψ), where δ is inside its range.
#pragma omp parallel for if (N >= kMinParallelRows)
  for (int i = 0; i < C; ++i) {
    const int h = i / D, c = i % D, o = h * 2 * D + c;
    if (!attn::pope::bias_passes(static_cast<double>(delta[i]))) continue;
    const double db = attn::pope::phase_bias(static_cast<double>(delta[i])), w = attn::pope::freq(theta, c, D);
    double sum = 0;
    for (long n = 0; n < N; ++n) {
      const double psi = static_cast<double>(n % Tn) * w + db;
      const double mk = attn::pope::magnitude(static_cast<double>(qkv[n * 3 * static_cast<size_t>(C) + C + i]));
      const T* g = dqkv2 + n * 6 * static_cast<size_t>(C) + 2 * C;
      sum += mk * (-static_cast<double>(g[o]) * std::sin(psi) + static_cast<double>(g[o + D]) * std::cos(psi));
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

#define GPT_INSTANTIATE(T)                                                                          \
  template void pope_forward<T>(T*, const T*, const T*, int, int, int, int, double);                \
  template void pope_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int, double); \
  template void pope_output_forward<T>(T*, const T*, int, int, int);                                \
  template void pope_output_backward<T>(T*, const T*, int, int, int);
GPT_INSTANTIATE(float)
GPT_INSTANTIATE(double)
#undef GPT_INSTANTIATE

}  // namespace gpt::cpu
