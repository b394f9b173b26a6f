// The element-wise rows of the CPU attention kernel (kernels/cpu/attention_rows.h):
// scalar rows over the attn:: functions of kernels/attention_spec.h, and
// float rows vectorised over blocks of kRowLanes keys with vec_math.h's exp
// and log, compiled three times (AVX-512, AVX2+FMA, baseline x86-64) and
// picked at run time.
//
// The vector rows compute the same chain as the scalar ones, operation for
// operation, except that φ, log1p and pow use vec_math.h (a few ulp; exp
// gives 0 below e^-87 and saturates at e^88 instead of inf, and pow flushes
// results below e^-87 to 0) and that sums run in kRowLanes partial sums.
#include "kernels/cpu/attention_rows.h"

#include <algorithm>
#include <cfloat>
#include <vector>

#include "kernels/cpu/vec_math.h"

namespace gpt::cpu::attn_rows {

// ---- scalar ---------------------------------------------------------------------

namespace {

// Stick-breaking rows (attn::sb_*): the kept columns from the row's own key
// back, acc summing softplus(x) of those already passed. The last column is
// the row's own key (every row keeps it, mask or not); it takes the rest.
// w[c] = A of column c, x[c] (if not null) = its logit.
template <typename T>
T sb_row_weights(const T* qk, T* x, T* w, const RowArgs<T>& a) {
  const int n = a.n;
  T acc = 0;
  for (int c = n - 2; c >= 0; --c) {
    if (!a.kept(c)) {
      w[c] = 0;
      if (x) x[c] = 0;
      continue;
    }
    const T xc = a.logit(qk[c], c);
    if (x) x[c] = xc;
    w[c] = attn::sb_weight(xc, acc);
    acc += attn::sb_taken(xc);
  }
  w[n - 1] = attn::sb_rest(acc);
  if (x) x[n - 1] = 0;
  return acc;
}

// What a row's dx_j feed besides dσ: Σ f·σ·dx (the ssmax scale), KERPLE's
// Σ dx·∂b/∂r, the forget gate's dL/dc (the row's Σ dx at i − 1, −dx at each
// key) and FIRE's dL/db per distance.
template <typename T>
struct DxSums {
  const RowArgs<T>& a;
  T lambda_f, f;
  bool want_sigma_dx;
  double sigma_dx = 0, k1 = 0, k2 = 0;
  T row_dx = 0;
  DxSums(const RowArgs<T>& a_, T lambda_f_, T f_, bool want) : a(a_), lambda_f(lambda_f_), f(f_), want_sigma_dx(want) {}
  // Column j's dx, with σ_j = qk; returns dL/dσ_j = λ_i f dx.
  T add(int j, T qk, T dx) {
    if (want_sigma_dx) sigma_dx += static_cast<double>(f * qk * dx);
    if (a.kg1) {
      const int d = a.i - 1 - a.key(j);
      k1 += static_cast<double>(dx * a.kg1[d]);
      k2 += static_cast<double>(dx * a.kg2[d]);
    }
    if (a.dfc) {
      row_dx += dx;
      a.dfc[a.key(j)] -= dx;
    }
    if (a.dkb) a.dkb[a.i - 1 - a.key(j)] += dx;
    return lambda_f * dx;
  }
  double finish(double* kerple_out) {
    if (a.dfc) a.dfc[a.i - 1] += row_dx;
    if (kerple_out) kerple_out[0] = k1, kerple_out[1] = k2;
    return sigma_dx;
  }
};

// Stick-breaking's backward of a row: x (the logits) and w as
// sb_row_weights left them, g = dL/dw; the keys in order, P (attn::sb_grad_x)
// summed in double from the own key's A_ii·g_i up. The own key's dx is 0.
template <typename T>
double sb_backward_grad_row(const T* qk, const T* x, const T* w, T* g, const RowArgs<T>& a, T lambda_f, T f,
                            bool want_sigma_dx, double* kerple_out) {
  const int n = a.n;
  DxSums<T> sums(a, lambda_f, f, want_sigma_dx);
  double P = static_cast<double>(w[n - 1]) * g[n - 1];
  for (int j = 0; j < n - 1; ++j) {
    if (!a.kept(j)) {
      g[j] = 0;
      continue;
    }
    const T wg = w[j] * g[j];
    g[j] = sums.add(j, qk[j], attn::sb_grad_x(x[j], w[j], g[j], static_cast<T>(P)) * attn::softcap_grad(a.cap, x[j]));
    P += static_cast<double>(wg);
  }
  g[n - 1] = 0;
  return sums.finish(kerple_out);
}

}  // namespace

template <typename T>
void forward_row_scalar(T* row, const RowArgs<T>& a, const AttentionSpec& s, T* st) {
  const int n = a.n;
  if (attn::stick_breaking(s)) {  // the row's σ in place of its weights
    st[0] = sb_row_weights<T>(row, nullptr, row, a);
    st[1] = 1;
    st[2] = st[3] = 0;
    return;
  }
  for (int j = 0; j < n; ++j) row[j] = a.logit(row[j], j);
  T shift = 0;
  if (attn::shifted(s)) {
    bool first = true;
    for (int j = 0; j < n; ++j)
      if (a.kept(j)) {
        shift = first ? row[j] : std::max(shift, row[j]);
        first = false;
      }
    shift = attn::row_shift(s, shift, a.zeta);
  }
  const T c = attn::zero_level(s, shift);  // softpick's level, else 0
  T z = 0;
  for (int j = 0; j < n; ++j) {
    const T u = a.kept(j) ? attn::positivity(s.positivity, row[j] - shift) : T(0);
    row[j] = a.kept(j) && u - c > T(0) ? u - c : T(0);
    z += a.kept(j) ? std::abs(u - c) : T(0);
  }
  z += attn::norm_extra(s, shift, a.zeta);
  const T inv_z = attn::inv_norm(s, z);
  T a_max = 0;
  for (int j = 0; j < n; ++j) a_max = std::max(a_max, row[j] *= inv_z);
  st[0] = shift;
  st[1] = z;
  st[2] = a_max;
  st[3] = 0;
  const attn::Row<T> r = attn::row_from_stats(s, a.i, st);
  if (!r.sharpen) return;  // w = a (a uniform row under re-weighting keeps a)
  T sum = 0;
  for (int j = 0; j < n; ++j)
    sum += (row[j] = a.kept(j) ? attn::sharpen_value(attn::sharpen_t(r.i, row[j], r.offset), r.t_max, r.p) : T(0));
  st[3] = sum;
  const T inv = T(1) / sum;  // sum >= 1: the largest t contributes (t/t_max)^p = 1
  for (int j = 0; j < n; ++j) row[j] *= inv;
}

template <typename T>
void backward_weights_row_scalar(const T* qk, T* u, T* w, const RowArgs<T>& a, const AttentionSpec& s,
                                 const attn::Row<T>& r) {
  if (attn::stick_breaking(s)) {  // u keeps the logits x
    sb_row_weights(qk, u, w, a);
    return;
  }
  for (int j = 0; j < a.n; ++j) {
    const T x = a.logit(qk[j], j);
    u[j] = r.u(s, x);
    w[j] = a.kept(j) ? r.w_from_a(r.numer(u[j]) * r.inv_z) : T(0);
  }
}

template <typename T>
double backward_grad_row_scalar(const T* qk, const T* u, const T* w, T* g, const RowArgs<T>& a, const AttentionSpec& s,
                                const attn::Row<T>& r, T D, T lambda_f, T f, bool want_sigma_dx, T* S_out,
                                double* kerple_out) {
  const int n = a.n;
  if (attn::stick_breaking(s)) {
    if (S_out) *S_out = 0;
    return sb_backward_grad_row(qk, u, w, g, a, lambda_f, f, want_sigma_dx, kerple_out);
  }
  T S = 0;
  if (r.sharpen) {
    for (int j = 0; j < n; ++j) {
      const T av = r.numer(u[j]) * r.inv_z;
      g[j] = a.kept(j) ? attn::grad_a(r, av, w[j], g[j], D) : T(0);
      S += a.kept(j) ? av * g[j] : T(0);
    }
  } else {
    S = D;  // w = a, h = g: Σ a h = Σ w g = dy·y
  }
  if (S_out) *S_out = S;
  DxSums<T> sums(a, lambda_f, f, want_sigma_dx);
  for (int j = 0; j < n; ++j) {
    if (!a.kept(j)) {
      g[j] = 0;
      continue;
    }
    const T x = a.logit(qk[j], j);
    g[j] = sums.add(j, qk[j], attn::grad_x_u(s, r, x, u[j], g[j], S) * attn::softcap_grad(a.cap, x));
  }
  return sums.finish(kerple_out);
}

template void forward_row_scalar<float>(float*, const RowArgs<float>&, const AttentionSpec&, float*);
template void forward_row_scalar<double>(double*, const RowArgs<double>&, const AttentionSpec&, double*);
template void backward_weights_row_scalar<float>(const float*, float*, float*, const RowArgs<float>&,
                                                 const AttentionSpec&, const attn::Row<float>&);
template void backward_weights_row_scalar<double>(const double*, double*, double*, const RowArgs<double>&,
                                                  const AttentionSpec&, const attn::Row<double>&);
template double backward_grad_row_scalar<float>(const float*, const float*, const float*, float*, const RowArgs<float>&,
                                                const AttentionSpec&, const attn::Row<float>&, float, float, float,
                                                bool, float*, double*);
template double backward_grad_row_scalar<double>(const double*, const double*, const double*, double*,
                                                 const RowArgs<double>&, const AttentionSpec&, const attn::Row<double>&,
                                                 double, double, double, bool, double*, double*);

// ---- vector (float) ------------------------------------------------------------------
namespace {

constexpr int L = kRowLanes;
#define GPT_ALWAYS_INLINE [[gnu::always_inline]] inline

// φ and φ' of attention_spec.h, branch-free.
GPT_ALWAYS_INLINE float sigmoid_v(float x) {
  const float e = vec_exp(x < 0.0f ? x : -x);  // e^-|x|
  const float r = 1.0f / (1.0f + e);
  return x >= 0.0f ? r : e * r;
}
template <Positivity P>
GPT_ALWAYS_INLINE float phi_v(float x) {
  if constexpr (P == Positivity::Exp) {
    return vec_exp(x);
  } else if constexpr (P == Positivity::Softplus) {
    return (x > 0.0f ? x : 0.0f) + vec_log1p(vec_exp(x < 0.0f ? x : -x));
  } else if constexpr (P == Positivity::Sigmoid) {
    return sigmoid_v(x);
  } else {
    return x > 0.0f ? x : 0.0f;
  }
}
template <Positivity P>
GPT_ALWAYS_INLINE float phi_grad_v(float x, float u) {
  if constexpr (P == Positivity::Exp) {
    return u;
  } else if constexpr (P == Positivity::Softplus) {
    return sigmoid_v(x);
  } else if constexpr (P == Positivity::Sigmoid) {
    return u * (1.0f - u);
  } else {
    return x > 0.0f ? 1.0f : 0.0f;
  }
}
// attn::softcap branch-free for c > 0: c·tanh(x/c), tanh(y) = sgn(y)·(1 − e^(−2|y|)) / (1 + e^(−2|y|)).
GPT_ALWAYS_INLINE float softcap_v(float c, float x) {
  const float y = x / c;
  const float e = vec_exp(-2.0f * (y < 0.0f ? -y : y));
  const float t = (1.0f - e) / (1.0f + e);
  return c * (y < 0.0f ? -t : t);
}
// The column terms a row's logits carry: none beyond the distance (plain),
// a learned bias (KERPLE, the forget gate, FIRE; or zeros), and that plus
// the logit soft-cap.
constexpr int kPlainColumns = 0, kBiasColumns = 1, kCappedColumns = 2;

// y^p for 0 < y <= 1 (stage 5's (t/t_max)^p).
GPT_ALWAYS_INLINE float pow01_v(float y, float p) {
  const float e = p * vec_log(y);
  return e < -87.0f ? 0.0f : vec_exp(e);
}

GPT_ALWAYS_INLINE float lane_sum(const float* v) {
  float s = v[0];
  for (int l = 1; l < L; ++l) s += v[l];
  return s;
}
GPT_ALWAYS_INLINE float lane_max(const float* v) {
  float m = v[0];
  for (int l = 1; l < L; ++l) m = std::max(m, v[l]);
  return m;
}

// The distance term and whether the row keeps column c (RowArgs::key,
// kept). M = false (no context mask): key c, kept below n, computed in the
// loops. M = true: both precomputed per row into per-thread arrays, so the
// vector loops read them like any other row (the two-segment key map with
// its selects defeated GCC's vectoriser: 3-4x slower rows).
template <bool M>
struct ColMap;
template <>
struct ColMap<false> {
  int n;
  static constexpr float cap = 0.0f;  // plain rows are never capped (kCappedColumns maps its columns)
  explicit ColMap(const RowArgs<float>& a) : n(a.n) {}
  GPT_ALWAYS_INLINE float dist(int im1, int c) const { return static_cast<float>(im1 - c); }
  GPT_ALWAYS_INLINE bool in(int c) const { return c < n; }
};
template <>
struct ColMap<true> {
  const float* d;
  const float* k;
  const float* b;   // the learned position bias of each column (RowArgs::bias_at), or zeros
  const float* q1;  // KERPLE's derivatives (RowArgs::kg1, kg2), or zeros
  const float* q2;
  float* dxs;  // the backward's dx of each column (the forget gate's dL/dc)
  float cap;   // the logit soft-cap (RowArgs::cap), 0 without one
  explicit ColMap(const RowArgs<float>& a) : cap(a.cap) {
    static thread_local std::vector<float> dist, keep, bias, bg1, bg2, dxv;
    const int nb = padded_keys(a.n);
    if (static_cast<int>(dist.size()) < nb) dist.resize(nb), keep.resize(nb), bias.resize(nb);
    const int n = a.n, ns = a.ns, off = a.off, lo = a.lo, sinks = a.sinks, im1 = a.i - 1;
    float* dp = dist.data();
    float* kp = keep.data();
#pragma omp simd
    for (int c = 0; c < nb; ++c) {  // RowArgs::key and kept, as selects
      const int key = c + (c < ns ? 0 : off);
      dp[c] = static_cast<float>(im1 - key);
      kp[c] = c < n && (key < sinks || key >= lo) ? 1.0f : 0.0f;
    }
    d = dp;
    k = kp;
    b = q1 = q2 = nullptr;
    dxs = nullptr;
    if (!a.mapped()) return;
    // The bias table at each column's distance (columns past n, whose
    // distance may be negative, read 0), and in the backward (kg1, dfc or dkb
    // given) its derivatives (zeros without KERPLE: the sums of dx·∂b/∂r then
    // come out 0); the forward reads only the bias. Capped rows keep the
    // backward's tables whichever pass runs (zeros and a dx store).
    const bool backward = a.kg1 || a.dfc || a.dkb || a.cap > 0.0f;
    if (static_cast<int>(bg1.size()) < nb) bg1.resize(nb), bg2.resize(nb), dxv.resize(nb);
    float* bp = bias.data();
    float* g1p = bg1.data();
    float* g2p = bg2.data();
    std::fill(bp + n, bp + nb, 0.0f);
    if (backward) {
      std::fill(g1p, g1p + nb, 0.0f);
      std::fill(g2p, g2p + nb, 0.0f);
    }
    if (!a.masked) {  // column c is key c at distance im1 − c: reversed reads the compiler vectorises
      if (a.kb && !a.fc) {
#pragma omp simd
        for (int c = 0; c < n; ++c) bp[c] = a.kb[im1 - c];
      } else if (a.fc && !a.kb) {
        const float* fc = a.fc;
        const float ci = fc[im1];
#pragma omp simd
        for (int c = 0; c < n; ++c) bp[c] = 0.0f + (ci - fc[c]);  // RowArgs::bias_at's (0) + (c_i − c_j)
      } else {
        for (int c = 0; c < n; ++c) bp[c] = a.bias_at(c);
      }
      if (a.kg1) {
        const float* k1 = a.kg1;
        const float* k2 = a.kg2;
#pragma omp simd
        for (int c = 0; c < n; ++c) {
          g1p[c] = k1[im1 - c];
          g2p[c] = k2[im1 - c];
        }
      }
    } else {
      for (int c = 0; c < n; ++c) {
        bp[c] = a.bias_at(c);
        if (!a.kg1) continue;
        const int dd = im1 - (c + (c < ns ? 0 : off));
        g1p[c] = a.kg1[dd];
        g2p[c] = a.kg2[dd];
      }
    }
    b = bp;
    if (backward) q1 = g1p, q2 = g2p, dxs = dxv.data();
  }
  GPT_ALWAYS_INLINE float dist(int, int c) const { return d[c]; }
  GPT_ALWAYS_INLINE bool in(int c) const { return k[c] != 0.0f; }
  GPT_ALWAYS_INLINE float extra(int c) const { return b[c]; }
  GPT_ALWAYS_INLINE float g1(int c) const { return q1[c]; }
  GPT_ALWAYS_INLINE float g2(int c) const { return q2[c]; }
};

// x of column c: lf·σ + bias − slope·dist, plus the learned bias with KB,
// capped with kCappedColumns (RowArgs::logit of the scalar rows).
template <bool M, int KB>
GPT_ALWAYS_INLINE float col_logit(const ColMap<M>& cm, float lf, float sigma, float bias, float slope, int im1, int c) {
  float x = lf * sigma + bias - slope * cm.dist(im1, c);
  if constexpr (KB != kPlainColumns) x += cm.extra(c);
  if constexpr (KB == kCappedColumns) x = softcap_v(cm.cap, x);
  return x;
}
// dx from dL/d(capped x): × 1 − (x/c)² with kCappedColumns (attn::softcap_grad).
template <int KB>
GPT_ALWAYS_INLINE float uncap(float cap, float x, float dx) {
  if constexpr (KB == kCappedColumns) return dx * attn::softcap_grad(cap, x);
  return dx;
}

template <Positivity P, bool M, int KB = kPlainColumns>
GPT_ALWAYS_INLINE void forward_row_body(float* row, const RowArgs<float>& a, const AttentionSpec& s, float* st) {
  const int n = a.n, nb = padded_keys(n), im1 = a.i - 1;
  const float lf = a.lf, bias = a.bias, slope = a.slope;
  const ColMap<M> cm(a);
  float mx[L];
  for (int l = 0; l < L; ++l) mx[l] = -FLT_MAX;
  for (int j0 = 0; j0 < nb; j0 += L) {
    float* x = row + j0;
#pragma omp simd
    for (int l = 0; l < L; ++l) {
      const float v = col_logit<M, KB>(cm, lf, x[l], bias, slope, im1, j0 + l);
      x[l] = v;
      mx[l] = cm.in(j0 + l) && v > mx[l] ? v : mx[l];
    }
  }
  const float shift = attn::shifted(s) ? attn::row_shift(s, lane_max(mx), a.zeta) : 0.0f;
  const float c = attn::zero_level(s, shift);  // softpick's level (libm, as row_from_stats), else 0
  float z[L] = {}, um[L] = {};
  for (int j0 = 0; j0 < nb; j0 += L) {
    float* x = row + j0;
#pragma omp simd
    for (int l = 0; l < L; ++l) {
      const bool in = cm.in(j0 + l);
      const float u = phi_v<P>(x[l] - shift);
      const float num = u - c > 0.0f ? u - c : 0.0f;  // = u where c = 0
      x[l] = M && !in ? 0.0f : num;                   // masked columns inside the row get weight 0
      z[l] += in ? std::fabs(u - c) : 0.0f;
      um[l] = in && num > um[l] ? num : um[l];
    }
  }
  const float zs = lane_sum(z) + attn::norm_extra(s, shift, a.zeta);
  const float inv_z = attn::inv_norm(s, zs);
  st[0] = shift;
  st[1] = zs;
  st[2] = lane_max(um) * inv_z;  // = max_j u_j·inv_z (rounding is monotonic)
  st[3] = 0;
  const attn::Row<float> r = attn::row_from_stats(s, a.i, st);
  if (!r.sharpen) {
    for (int j0 = 0; j0 < nb; j0 += L) {
#pragma omp simd
      for (int l = 0; l < L; ++l) row[j0 + l] *= inv_z;
    }
    return;
  }
  const float ri = r.i, off = r.offset, t_max = r.t_max, p = r.p;
  float rs[L] = {};
  for (int j0 = 0; j0 < nb; j0 += L) {
    float* x = row + j0;
#pragma omp simd
    for (int l = 0; l < L; ++l) {
      const float t = attn::sharpen_t(ri, x[l] * inv_z, off);
      const float v = cm.in(j0 + l) && t > 0.0f ? pow01_v(t / t_max, p) : 0.0f;
      x[l] = v;
      rs[l] += v;
    }
  }
  const float sum = lane_sum(rs);
  st[3] = sum;
  const float inv = 1.0f / sum;
  for (int j0 = 0; j0 < nb; j0 += L) {
#pragma omp simd
    for (int l = 0; l < L; ++l) row[j0 + l] *= inv;
  }
}

template <Positivity P, bool M, int KB = kPlainColumns>
GPT_ALWAYS_INLINE void backward_weights_row_body(const float* qk, float* u, float* w, const RowArgs<float>& a,
                                                 const attn::Row<float>& r) {
  const int n = a.n, nb = padded_keys(n), im1 = a.i - 1;
  const ColMap<M> cm(a);
  const float lf = a.lf, bias = a.bias, slope = a.slope, shift = r.shift, inv_z = r.inv_z, c = r.zero;
  const float ri = r.i, off = r.offset, t_max = r.t_max, p = r.p, inv_r = r.inv_r;
  for (int j0 = 0; j0 < nb; j0 += L) {
    if (r.sharpen) {
#pragma omp simd
      for (int l = 0; l < L; ++l) {
        const float x = col_logit<M, KB>(cm, lf, qk[j0 + l], bias, slope, im1, j0 + l);
        const float uu = phi_v<P>(x - shift);
        u[j0 + l] = uu;
        const float t = attn::sharpen_t(ri, (uu - c > 0.0f ? uu - c : 0.0f) * inv_z, off);
        w[j0 + l] = cm.in(j0 + l) && t > 0.0f ? pow01_v(t / t_max, p) * inv_r : 0.0f;
      }
    } else {
#pragma omp simd
      for (int l = 0; l < L; ++l) {
        const float x = col_logit<M, KB>(cm, lf, qk[j0 + l], bias, slope, im1, j0 + l);
        const float uu = phi_v<P>(x - shift);
        u[j0 + l] = uu;
        w[j0 + l] = cm.in(j0 + l) ? (uu - c > 0.0f ? uu - c : 0.0f) * inv_z : 0.0f;
      }
    }
  }
}

// The end of a row's backward: the forget gate's and FIRE's gradients from
// the columns' dx (KB), KERPLE's sums and Σ f·σ·dx from the lane sums.
template <bool M, int KB>
GPT_ALWAYS_INLINE double finish_grad_row(const ColMap<M>& cm, const RowArgs<float>& a, const float* sd,
                                         const float* kd1, const float* kd2, bool want_sigma_dx, double* kerple_out) {
  const int n = a.n;
  if constexpr (KB) {
    if (a.dfc) {  // the forget gate: dL/dc_{i-1} += Σ dx, dL/dc_key −= dx (each column its own key)
      float row_dx = 0;
      for (int c = 0; c < n; ++c) {
        row_dx += cm.dxs[c];
        a.dfc[a.key(c)] -= cm.dxs[c];
      }
      a.dfc[a.i - 1] += row_dx;
    }
    if (a.dkb)  // FIRE: dL/db(i, Δ) += dx at each column's distance
      for (int c = 0; c < n; ++c) a.dkb[a.i - 1 - a.key(c)] += cm.dxs[c];
  }
  if (kerple_out) {
    double k1 = 0, k2 = 0;
    for (int l = 0; l < L; ++l) k1 += kd1[l], k2 += kd2[l];
    kerple_out[0] = k1;
    kerple_out[1] = k2;
  }
  if (!want_sigma_dx) return 0.0;
  double sum = 0;
  for (int l = 0; l < L; ++l) sum += sd[l];
  return sum;
}

template <Positivity P, bool M, int KB = kPlainColumns>
GPT_ALWAYS_INLINE double backward_grad_row_body(const float* qk, const float* u, const float* w, float* g,
                                                const RowArgs<float>& a, const AttentionSpec& s,
                                                const attn::Row<float>& r, float D, float lambda_f, float f,
                                                bool want_sigma_dx, float* S_out, double* kerple_out) {
  const int n = a.n, nb = padded_keys(n), im1 = a.i - 1;
  const ColMap<M> cm(a);
  const float lf = a.lf, bias = a.bias, slope = a.slope, shift = r.shift, inv_z = r.inv_z, c = r.zero;
  float S = D;  // without sharpening w = a, h = g: Σ a h = Σ w g = dy·y
  if (r.sharpen) {
    const float ri = r.i, off = r.offset, p = r.p;
    float sl[L] = {};
    for (int j0 = 0; j0 < nb; j0 += L) {
#pragma omp simd
      for (int l = 0; l < L; ++l) {
        const float uc = u[j0 + l] - c;
        const float av = (uc > 0.0f ? uc : 0.0f) * inv_z;
        const float t = attn::sharpen_t(ri, av, off);
        const bool in = cm.in(j0 + l);
        const float h = in && t > 0.0f ? ri * (p * w[j0 + l] / t * (g[j0 + l] - D)) : 0.0f;
        g[j0 + l] = h;
        sl[l] += in ? av * h : 0.0f;  // (past n, av may be inf: inv_z only bounds the row's own u)
      }
    }
    S = lane_sum(sl);
  }
  if (S_out) *S_out = S;
  const float S_l1 = attn::row_normalised(s) ? S : 0.0f;
  float sd[L] = {}, kd1[L] = {}, kd2[L] = {};
  // Two loops rather than one with a selected h − S: merged (a select, or a
  // lambda over both), the compiler orders the float arithmetic of the
  // masked and plain instantiations differently and they stop agreeing bit
  // for bit (ContextExtension.WindowOfTheWholeRowIsTheUnmaskedKernel).
  if (attn::softpick(s)) {  // attn::grad_x_u's 1[u > c]·h − sgn(u − c)·S
    for (int j0 = 0; j0 < nb; j0 += L) {
#pragma omp simd
      for (int l = 0; l < L; ++l) {
        const bool in = cm.in(j0 + l);
        const float x = col_logit<M, KB>(cm, lf, qk[j0 + l], bias, slope, im1, j0 + l);
        const float uu = u[j0 + l];
        const float hs = uu > c ? g[j0 + l] - S : (uu < c ? S : 0.0f);
        const float dx = uncap<KB>(cm.cap, x, phi_grad_v<P>(x - shift, uu) * inv_z * hs);
        sd[l] += in ? f * qk[j0 + l] * dx : 0.0f;
        if constexpr (KB) {
          kd1[l] += in ? dx * cm.g1(j0 + l) : 0.0f;
          kd2[l] += in ? dx * cm.g2(j0 + l) : 0.0f;
          cm.dxs[j0 + l] = in ? dx : 0.0f;
        }
        g[j0 + l] = in ? lambda_f * dx : 0.0f;
      }
    }
  } else {
    for (int j0 = 0; j0 < nb; j0 += L) {
#pragma omp simd
      for (int l = 0; l < L; ++l) {
        const bool in = cm.in(j0 + l);
        const float x = col_logit<M, KB>(cm, lf, qk[j0 + l], bias, slope, im1, j0 + l);
        const float dx = uncap<KB>(cm.cap, x, phi_grad_v<P>(x - shift, u[j0 + l]) * inv_z * (g[j0 + l] - S_l1));
        sd[l] += in ? f * qk[j0 + l] * dx : 0.0f;
        if constexpr (KB) {
          kd1[l] += in ? dx * cm.g1(j0 + l) : 0.0f;
          kd2[l] += in ? dx * cm.g2(j0 + l) : 0.0f;
          cm.dxs[j0 + l] = in ? dx : 0.0f;
        }
        g[j0 + l] = in ? lambda_f * dx : 0.0f;
      }
    }
  }
  return finish_grad_row<M, KB>(cm, a, sd, kd1, kd2, want_sigma_dx, kerple_out);
}

// Stick-breaking rows (attn::sb_*), the scalar rows' chain: the logits and
// both softplus terms vectorised (one e^(−|x|) and one log1p give
// softplus(x) and ln σ(x) = −softplus(−x)), the running sum from the own key
// back sequential, in the scalar rows' order, then the weights vectorised.
// x (if not null) receives the logits, w the weights; returns the row's total
// Σ softplus (−ln A_ii).
template <bool M, int KB>
GPT_ALWAYS_INLINE float sb_weights_body(const float* qk, float* x, float* w, const RowArgs<float>& a) {
  const int n = a.n, nb = padded_keys(n), im1 = a.i - 1;
  const float lf = a.lf, bias = a.bias, slope = a.slope;
  const ColMap<M> cm(a);
  static thread_local std::vector<float> sp_store, ls_store;
  if (static_cast<int>(sp_store.size()) < nb) sp_store.resize(nb), ls_store.resize(nb);
  float* sp = sp_store.data();
  float* ls = ls_store.data();
  for (int j0 = 0; j0 < nb; j0 += L) {
#pragma omp simd
    for (int l = 0; l < L; ++l) {
      const int c = j0 + l;
      const float v = col_logit<M, KB>(cm, lf, qk[c], bias, slope, im1, c);
      const float e = vec_log1p(vec_exp(v < 0.0f ? v : -v));  // ln(1 + e^(−|x|))
      sp[c] = cm.in(c) && c < n - 1 ? (v > 0.0f ? v : 0.0f) + e : 0.0f;
      ls[c] = (v < 0.0f ? v : 0.0f) - e;
      if (x) x[c] = v;
    }
  }
  float acc = 0;  // sp[c] becomes the sum over the kept columns after c (a hidden one adds 0)
  for (int c = n - 2; c >= 0; --c) {
    const float t = sp[c];
    sp[c] = acc;
    acc += t;
  }
  for (int j0 = 0; j0 < nb; j0 += L) {
#pragma omp simd
    for (int l = 0; l < L; ++l) {
      const int c = j0 + l;
      w[c] = cm.in(c) && c < n - 1 ? vec_exp(ls[c] - sp[c]) : 0.0f;
    }
  }
  w[n - 1] = vec_exp(-acc);
  return acc;
}

// dx of each column (attn::sb_grad_x) from x and w as sb_weights_body left
// them, g = dL/dw; P summed in double over the columns in order, from the own
// key's A_ii·g_i. The own key's dx is 0.
template <bool M, int KB>
GPT_ALWAYS_INLINE double sb_grad_row_body(const float* qk, const float* x, const float* w, float* g,
                                          const RowArgs<float>& a, float lambda_f, float f, bool want_sigma_dx,
                                          double* kerple_out) {
  const int n = a.n, nb = padded_keys(n);
  const ColMap<M> cm(a);
  static thread_local std::vector<float> p_store;
  if (static_cast<int>(p_store.size()) < nb) p_store.resize(nb);
  float* P = p_store.data();
  double run = static_cast<double>(w[n - 1]) * g[n - 1];
  for (int c = 0; c < n - 1; ++c) {
    P[c] = static_cast<float>(run);
    run += static_cast<double>(w[c] * g[c]);
  }
  float sd[L] = {}, kd1[L] = {}, kd2[L] = {};
  for (int j0 = 0; j0 < nb; j0 += L) {
#pragma omp simd
    for (int l = 0; l < L; ++l) {
      const int c = j0 + l;
      const bool in = cm.in(c) && c < n - 1;
      const float xc = x[c];
      const float dx = in ? uncap<KB>(cm.cap, xc, w[c] * sigmoid_v(-xc) * g[c] - sigmoid_v(xc) * P[c]) : 0.0f;
      sd[l] += in ? f * qk[c] * dx : 0.0f;
      if constexpr (KB) {
        kd1[l] += in ? dx * cm.g1(c) : 0.0f;
        kd2[l] += in ? dx * cm.g2(c) : 0.0f;
        cm.dxs[c] = dx;
      }
      g[c] = lambda_f * dx;
    }
  }
  return finish_grad_row<M, KB>(cm, a, sd, kd1, kd2, want_sigma_dx, kerple_out);
}

// One set of entry points per instruction set; each switches to the
// positivity's instantiation, so the loops carry no per-element branches.
#define GPT_ATTN_POSITIVITY_SWITCH(CALL) \
  switch (s.positivity) {                \
    case Positivity::Exp:                \
      return CALL(Positivity::Exp);      \
    case Positivity::Softplus:           \
      return CALL(Positivity::Softplus); \
    case Positivity::Sigmoid:            \
      return CALL(Positivity::Sigmoid);  \
    case Positivity::Relu:               \
      return CALL(Positivity::Relu);     \
  }

#define GPT_ATTN_ROWS_FOR_ISA(SUFFIX, ATTR)                                                                       \
  ATTR void forward_row_##SUFFIX(float* row, const RowArgs<float>& a, const AttentionSpec& s, float* st) {        \
    if (attn::stick_breaking(s)) {                                                                                \
      st[0] = SB_CALL(sb_weights_body, row, nullptr, row, a);                                                     \
      st[1] = 1, st[2] = st[3] = 0;                                                                               \
      return;                                                                                                     \
    }                                                                                                             \
    GPT_ATTN_POSITIVITY_SWITCH(FWD_CALL)                                                                          \
  }                                                                                                               \
  ATTR void backward_weights_row_##SUFFIX(const float* qk, float* u, float* w, const RowArgs<float>& a,           \
                                          const AttentionSpec& s, const attn::Row<float>& r) {                    \
    if (attn::stick_breaking(s)) {                                                                                \
      SB_CALL(sb_weights_body, qk, u, w, a);                                                                      \
      std::fill(w + a.n, w + padded_keys(a.n), 0.0f);                                                             \
      return;                                                                                                     \
    }                                                                                                             \
    GPT_ATTN_POSITIVITY_SWITCH(BW_CALL)                                                                           \
  }                                                                                                               \
  ATTR double backward_grad_row_##SUFFIX(                                                                         \
      const float* qk, const float* u, const float* w, float* g, const RowArgs<float>& a, const AttentionSpec& s, \
      const attn::Row<float>& r, float D, float lambda_f, float f, bool want, float* S_out, double* kerple_out) { \
    if (attn::stick_breaking(s)) {                                                                                \
      if (S_out) *S_out = 0;                                                                                      \
      return SB_CALL(sb_grad_row_body, qk, u, w, g, a, lambda_f, f, want, kerple_out);                            \
    }                                                                                                             \
    GPT_ATTN_POSITIVITY_SWITCH(BG_CALL)                                                                           \
    return 0.0;                                                                                                   \
  }

// Three column maps: plain, masked (ColMap<true>), and with a learned bias
// (KERPLE; masked or not, through ColMap<true>'s tables).
#define FWD_CALL(P)                                                             \
  a.cap > 0.0f       ? forward_row_body<P, true, kCappedColumns>(row, a, s, st) \
  : a.learned_bias() ? forward_row_body<P, true, kBiasColumns>(row, a, s, st)   \
  : a.masked         ? forward_row_body<P, true>(row, a, s, st)                 \
                     : forward_row_body<P, false>(row, a, s, st)
#define BW_CALL(P)                                                                        \
  a.cap > 0.0f       ? backward_weights_row_body<P, true, kCappedColumns>(qk, u, w, a, r) \
  : a.learned_bias() ? backward_weights_row_body<P, true, kBiasColumns>(qk, u, w, a, r)   \
  : a.masked         ? backward_weights_row_body<P, true>(qk, u, w, a, r)                 \
                     : backward_weights_row_body<P, false>(qk, u, w, a, r)
#define BG_CALL(P)                                                                                                     \
  a.cap > 0.0f                                                                                                         \
      ? backward_grad_row_body<P, true, kCappedColumns>(qk, u, w, g, a, s, r, D, lambda_f, f, want, S_out, kerple_out) \
  : a.learned_bias()                                                                                                   \
      ? backward_grad_row_body<P, true, kBiasColumns>(qk, u, w, g, a, s, r, D, lambda_f, f, want, S_out, kerple_out)   \
  : a.masked ? backward_grad_row_body<P, true>(qk, u, w, g, a, s, r, D, lambda_f, f, want, S_out, kerple_out)          \
             : backward_grad_row_body<P, false>(qk, u, w, g, a, s, r, D, lambda_f, f, want, S_out, kerple_out)

// Stick-breaking's three column maps likewise.
#define SB_CALL(BODY, ...)                                      \
  (a.cap > 0.0f       ? BODY<true, kCappedColumns>(__VA_ARGS__) \
   : a.learned_bias() ? BODY<true, kBiasColumns>(__VA_ARGS__)   \
   : a.masked         ? BODY<true, kPlainColumns>(__VA_ARGS__)  \
                      : BODY<false, kPlainColumns>(__VA_ARGS__))

GPT_ATTN_ROWS_FOR_ISA(avx512, __attribute__((target("avx512f"))))
GPT_ATTN_ROWS_FOR_ISA(avx2, __attribute__((target("avx2,fma"))))
GPT_ATTN_ROWS_FOR_ISA(base, )

#undef SB_CALL
#undef FWD_CALL
#undef BW_CALL
#undef BG_CALL
#undef GPT_ATTN_ROWS_FOR_ISA
#undef GPT_ATTN_POSITIVITY_SWITCH

}  // namespace

void forward_row_vec(GemmKernel isa, float* row, const RowArgs<float>& a, const AttentionSpec& s, float* st) {
  switch (isa) {
    case GemmKernel::Avx512:
      return forward_row_avx512(row, a, s, st);
    case GemmKernel::Avx2:
      return forward_row_avx2(row, a, s, st);
    default:
      return forward_row_base(row, a, s, st);
  }
}

void backward_weights_row_vec(GemmKernel isa, const float* qk, float* u, float* w, const RowArgs<float>& a,
                              const AttentionSpec& s, const attn::Row<float>& r) {
  switch (isa) {
    case GemmKernel::Avx512:
      return backward_weights_row_avx512(qk, u, w, a, s, r);
    case GemmKernel::Avx2:
      return backward_weights_row_avx2(qk, u, w, a, s, r);
    default:
      return backward_weights_row_base(qk, u, w, a, s, r);
  }
}

double backward_grad_row_vec(GemmKernel isa, const float* qk, const float* u, const float* w, float* g,
                             const RowArgs<float>& a, const AttentionSpec& s, const attn::Row<float>& r, float D,
                             float lambda_f, float f, bool want_sigma_dx, float* S_out, double* kerple_out) {
  switch (isa) {
    case GemmKernel::Avx512:
      return backward_grad_row_avx512(qk, u, w, g, a, s, r, D, lambda_f, f, want_sigma_dx, S_out, kerple_out);
    case GemmKernel::Avx2:
      return backward_grad_row_avx2(qk, u, w, g, a, s, r, D, lambda_f, f, want_sigma_dx, S_out, kerple_out);
    default:
      return backward_grad_row_base(qk, u, w, g, a, s, r, D, lambda_f, f, want_sigma_dx, S_out, kerple_out);
  }
}

}  // namespace gpt::cpu::attn_rows
