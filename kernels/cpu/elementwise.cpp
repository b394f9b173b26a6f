// Element-wise helpers: residual add, gradient accumulation, and the sum of
// squares / scaling used for global-norm gradient clipping.
#include "core/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <vector>

namespace gpt::cpu {

namespace {
// sum_squares splits x into chunks of this many elements whatever the thread
// count, so the partial sums and the order they are added in are fixed.
constexpr size_t kSumChunk = 1 << 14;
}  // namespace

template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void add_inplace(T* dst, const T* src, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

template <typename T>
double sum_squares(const T* x, size_t n) {
  const size_t nchunks = (n + kSumChunk - 1) / kSumChunk;
  std::vector<double> partial(nchunks, 0.0);
#pragma omp parallel for schedule(static) if (nchunks > 1)
  for (size_t k = 0; k < nchunks; ++k) {
    const size_t lo = k * kSumChunk, hi = std::min(n, lo + kSumChunk);
    double s = 0.0;
    for (size_t i = lo; i < hi; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    partial[k] = s;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

template <typename T>
void scale_inplace(T* x, T s, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

template <typename T>
void forget_forward(T* c, const T* g, int B, int Tn, int NH) {
#pragma omp parallel for schedule(static) if (static_cast <size_t>(B) * Tn * NH >= kMinParallelWork)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    double sum = 0;
    for (int t = 0; t < Tn; ++t) {
      sum += attn::log_sigmoid(static_cast<double>(g[(static_cast<size_t>(b) * Tn + t) * NH + h]));
      c[static_cast<size_t>(bh) * Tn + t] = static_cast<T>(sum);
    }
  }
}

template <typename T>
void forget_backward(T* dg, const T* dc, const T* g, int B, int Tn, int NH) {
#pragma omp parallel for schedule(static) if (static_cast <size_t>(B) * Tn * NH >= kMinParallelWork)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    double suffix = 0;  // Σ_{t' >= t} dc
    for (int t = Tn - 1; t >= 0; --t) {
      suffix += static_cast<double>(dc[static_cast<size_t>(bh) * Tn + t]);
      const size_t k = (static_cast<size_t>(b) * Tn + t) * NH + h;
      dg[k] += static_cast<T>(attn::log_sigmoid_grad(static_cast<double>(g[k])) * suffix);
    }
  }
}

template <typename T>
void sigmoid_gate_forward(T* out, const T* y, const T* g, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) out[i] = y[i] * attn::sigmoid(g[i]);
}

template <typename T>
void sigmoid_gate_backward(T* dy, T* dg, const T* dout, const T* y, const T* g, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) {
    const T s = attn::sigmoid(g[i]);
    dy[i] += dout[i] * s;
    dg[i] += dout[i] * y[i] * s * (T(1) - s);
  }
}

template void sigmoid_gate_forward<float>(float*, const float*, const float*, size_t);
template void sigmoid_gate_forward<double>(double*, const double*, const double*, size_t);
template void sigmoid_gate_backward<float>(float*, float*, const float*, const float*, const float*, size_t);
template void sigmoid_gate_backward<double>(double*, double*, const double*, const double*, const double*, size_t);
template <typename T>
void fire_forward(T* table, const T* p, int Tn, int NH, double L0) {
  const size_t TT = static_cast<size_t>(Tn) * Tn;
#pragma omp parallel for schedule(dynamic, 16) if (TT * NH >= kMinParallelWork)
  for (int i0 = 0; i0 < Tn; ++i0) {
    T* row = table + static_cast<size_t>(i0) * Tn;
    for (int d = 0; d <= i0; ++d)
      attn::fire::biases(p, NH, attn::fire::input_of(p, NH, L0, i0, d).u, row + d, static_cast<long>(TT));
    for (int h = 0; h < NH; ++h) std::fill(row + h * TT + i0 + 1, row + h * TT + Tn, T(0));
  }
}

template <typename T>
void fire_backward(T* dp, const T* dtable, const T* p, int B, int Tn, int NH, double L0) {
  const size_t TT = static_cast<size_t>(Tn) * Tn, total = TT * NH;
  std::vector<double> g(total, 0.0);  // Σ_b dtable[b], in order of b
#pragma omp parallel for schedule(static) if (total * B >= kMinParallelWork)
  for (long e = 0; e < static_cast<long>(total); ++e)
    for (int b = 0; b < B; ++b) g[e] += static_cast<double>(dtable[static_cast<size_t>(b) * total + e]);
  std::vector<attn::fire::Input> in(TT);
  for (int i0 = 0; i0 < Tn; ++i0)
    for (int d = 0; d <= i0; ++d) in[static_cast<size_t>(i0) * Tn + d] = attn::fire::input_of(p, NH, L0, i0, d);
  const int np = attn::fire::count(NH);
  // One parameter per iteration, its pairs summed in order.
#pragma omp parallel for schedule(dynamic, 1) if (TT * np >= kMinParallelWork)
  for (int k = 0; k < np; ++k) {
    double s = 0;
    for (int i0 = 0; i0 < Tn; ++i0)
      for (int d = 0; d <= i0; ++d) {
        const size_t e = static_cast<size_t>(i0) * Tn + d;
        s += attn::fire::param_grad(p, NH, k, in[e], g.data() + e, static_cast<long>(TT));
      }
    dp[k] += static_cast<T>(s);
  }
}

// The pair (b, i0, Δ) of the table's lower triangles: its query's id and distance.
namespace {
struct IdPair {
  int pi, dist;
};
inline IdPair id_pair(const int32_t* pos, int b, int Tn, int i0, int d) {
  const int32_t* row = pos + static_cast<size_t>(b) * Tn;
  return {row[i0], attn::position_table::distance(row[i0], row[i0 - d])};
}
}  // namespace

template <typename T>
void position_table_forward(T* table, const T* p, const int32_t* pos, int B, int Tn, int NH, const AttentionSpec& s) {
  GPT_CHECK(attn::position_table::applies(s), "position_table_forward: the layer has no distance bias");
  const size_t TT = static_cast<size_t>(Tn) * Tn;
  if (s.fire()) {  // the MLP gives every head at once
#pragma omp parallel for schedule(dynamic, 16) if (TT * NH * B >= kMinParallelWork)
    for (long r = 0; r < static_cast<long>(B) * Tn; ++r) {
      const int b = static_cast<int>(r / Tn), i0 = static_cast<int>(r % Tn);
      T* row = table + static_cast<size_t>(b) * NH * TT + static_cast<size_t>(i0) * Tn;
      for (int d = 0; d <= i0; ++d) {
        const IdPair q = id_pair(pos, b, Tn, i0, d);
        attn::position_table::biases(s, p, NH, q.pi, q.dist, row + d, static_cast<long>(TT));
      }
      for (int h = 0; h < NH; ++h) std::fill(row + h * TT + i0 + 1, row + h * TT + Tn, T(0));
    }
    return;
  }
  std::vector<attn::position_table::HeadBias> hb(NH);
  for (int h = 0; h < NH; ++h) hb[h] = attn::position_table::head_bias(s, p, NH, h);
#pragma omp parallel for schedule(dynamic, 16) if (TT * NH * B >= kMinParallelWork)
  for (long r = 0; r < static_cast<long>(B) * NH * Tn; ++r) {  // row (b, h, i0)
    const int b = static_cast<int>(r / (static_cast<long>(NH) * Tn)), h = static_cast<int>(r / Tn % NH);
    const int i0 = static_cast<int>(r % Tn);
    T* row = table + static_cast<size_t>(r) * Tn;
    for (int d = 0; d <= i0; ++d)
      row[d] = static_cast<T>(attn::position_table::distance_bias(s, hb[h], id_pair(pos, b, Tn, i0, d).dist));
    std::fill(row + i0 + 1, row + Tn, T(0));
  }
}

template <typename T>
void position_table_backward(T* dp, const T* dtable, const T* p, const int32_t* pos, int B, int Tn, int NH,
                             const AttentionSpec& s) {
  const int np = attn::position_table::param_count(s, NH);
  if (np == 0) return;
  const size_t TT = static_cast<size_t>(Tn) * Tn;
  std::vector<attn::position_table::Pair> pairs(static_cast<size_t>(B) * TT);
  for (int b = 0; b < B; ++b)
    for (int i0 = 0; i0 < Tn; ++i0)
      for (int d = 0; d <= i0; ++d) {
        const IdPair q = id_pair(pos, b, Tn, i0, d);
        pairs[b * TT + static_cast<size_t>(i0) * Tn + d] = attn::position_table::pair(s, p, NH, q.pi, q.dist);
      }
  // One parameter per iteration, its pairs summed in order.
#pragma omp parallel for schedule(dynamic, 1) if (TT * B * np >= kMinParallelWork)
  for (int k = 0; k < np; ++k) {
    const attn::position_table::HeadBias hb =
        s.kerple() ? attn::position_table::head_bias(s, p, NH, k / 2) : attn::position_table::HeadBias{};
    double sum = 0;
    for (int b = 0; b < B; ++b)
      for (int i0 = 0; i0 < Tn; ++i0)
        for (int d = 0; d <= i0; ++d) {
          const size_t e = static_cast<size_t>(i0) * Tn + d;
          sum += attn::position_table::param_grad(s, p, NH, k, pairs[b * TT + e], hb,
                                                  dtable + static_cast<size_t>(b) * NH * TT + e, static_cast<long>(TT));
        }
    dp[k] += static_cast<T>(sum);
  }
}

template void position_table_forward<float>(float*, const float*, const int32_t*, int, int, int,
                                            const AttentionSpec&);
template void position_table_forward<double>(double*, const double*, const int32_t*, int, int, int,
                                             const AttentionSpec&);
template void position_table_backward<float>(float*, const float*, const float*, const int32_t*, int, int, int,
                                             const AttentionSpec&);
template void position_table_backward<double>(double*, const double*, const double*, const int32_t*, int, int, int,
                                              const AttentionSpec&);
template void fire_forward<float>(float*, const float*, int, int, double);
template void fire_forward<double>(double*, const double*, int, int, double);
template void fire_backward<float>(float*, const float*, const float*, int, int, int, double);
template void fire_backward<double>(double*, const double*, const double*, int, int, int, double);
template void forget_forward<float>(float*, const float*, int, int, int);
template void forget_forward<double>(double*, const double*, int, int, int);
template void forget_backward<float>(float*, const float*, const float*, int, int, int);
template void forget_backward<double>(double*, const double*, const double*, int, int, int);
template void residual_forward<float>(float*, const float*, const float*, size_t);
template void residual_forward<double>(double*, const double*, const double*, size_t);
template void add_inplace<float>(float*, const float*, size_t);
template void add_inplace<double>(double*, const double*, size_t);
template double sum_squares<float>(const float*, size_t);
template double sum_squares<double>(const double*, size_t);
template void scale_inplace<float>(float*, float, size_t);
template void scale_inplace<double>(double*, double, size_t);

}  // namespace gpt::cpu
