// Causal self-attention on the CPU for every stage combination of
// kernels/attention_spec.h, streamed in blocks of query rows so that memory
// stays linear in T (evaluation runs far past the training context): no T×T
// matrix, only per-thread tiles of kRowBlock·T scalars.
//
// The stage math (λ_i, φ, normalisation, sharpening and their derivatives)
// comes from attention_spec.h; this file only orders the loops. The forward
// saves four statistics per row (shift, Z, max a, Σr); the backward
// recomputes the row's weights from them and walks the chain back:
//   g_ij = dy_i·v_j,  D_i = Σ_j w_ij g_ij = dy_i·y_i,
//   h_ij = dL/da_ij (sharpening's backward, or g),  S_i = Σ_j a_ij h_ij (l1),
//   dx_ij = φ'(x_ij)·(h_ij − S_i)/Z_i,  dσ_ij = λ_i dx_ij,  ds_h += Σ σ dx · dλ/ds.
// Per row block (kRowBlock query rows) the scores σ = Q·Kᵀ and the weighted
// sum Y = W·V are GEMMs (kernels/cpu/gemm.h) on the block's panels, the
// backward's four products likewise; the stages in between run row by row
// (kernels/cpu/attention_rows.h: vectorised for float). Both passes work on
// a head-major copy of qkv (and the backward on head-major gradients, added
// into dqkv at the end). Cosine scores normalise q and k in that copy and
// project the gradients back onto the sphere's tangent at the end.
#include "kernels/cpu/cpu_kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "core/check.h"
#include "kernels/attention_check.h"
#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/gemm.h"

namespace gpt::cpu {

namespace {

// Denormal results flush to zero while the kernel runs on a thread (the MXCSR
// FTZ and DAZ bits, restored on exit). Weights of keys far below the row's
// maximum (a strong position bias at long range: the forget gate, KERPLE,
// ALiBi) times 1/Z land below float's normal range, and denormal arithmetic
// made those rows 2-3x slower still; such values (< 1.2e-38) change no result
// at float precision. Per thread: MXCSR is thread state.
class FlushDenormals {
 public:
#if defined(__SSE2__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }  // FTZ (bit 15) | DAZ (bit 6)
  ~FlushDenormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

// Query rows per block: each k_j, v_j row read (and packed by the GEMM)
// serves this many queries, and the forward's work items stay small enough
// to balance the triangular cost. 64 measured 10–20% faster than 32 at
// T = 4096 and equal at T = 256 (docs/performance.md).
constexpr int kRowBlock = 64;
constexpr int kStats = AttentionSpec::kStatsPerRow;

// Below this many score multiply-adds a call runs on one thread: starting a
// parallel region costs more than the work (gradient checks make thousands
// of tiny calls, and on a busy machine each region can stall for ms).
constexpr double kMinParallelWork = 1 << 16;

// Multiply-adds of one score pass: B·NH·T(T+1)/2·D.
double score_work(int B, int Tn, int C) { return 0.5 * B * static_cast<double>(Tn) * (Tn + 1) * C; }

// One (b,h) slice of q, k, v: row t of q, k, v at q + t*stride (k, v
// likewise); D = head size. The kernels read a head-major copy (to_heads),
// where each head's rows are contiguous (stride D): in qkv's own layout a
// head's consecutive rows lie 3C scalars (6 KiB at C = 512) apart, one page
// per row, and the panel GEMMs spent their time on TLB misses at long T.
template <typename T>
struct HeadView {
  T* q;
  T* k;
  T* v;
  size_t stride;
  int D;

  // Slice (b,h) of a head-major buffer (B,NH,3,T,D).
  HeadView(T* heads, int b, int h, int Tn, int NH, int D_) : stride(D_), D(D_) {
    q = heads + (static_cast<size_t>(b) * NH + h) * 3 * Tn * D;
    k = q + static_cast<size_t>(Tn) * D;
    v = k + static_cast<size_t>(Tn) * D;
  }
  T* q_row(int t) const { return q + t * stride; }
  T* k_row(int t) const { return k + t * stride; }
  T* v_row(int t) const { return v + t * stride; }
};

// Offset of (b, h, part, t) in the head-major buffer.
inline size_t head_offset(int b, int h, int part, int t, int Tn, int NH, int D) {
  return (((static_cast<size_t>(b) * NH + h) * 3 + part) * Tn + t) * D;
}

// A distance remapping needs the far copy of q and k, and only it does.
void check_far(const AttentionSpec& spec, bool has_far) {
  GPT_CHECK(remap::on(spec.rope) == has_far, "attention: ",
            has_far ? "a far copy of qkv was given without a distance remapping"
                    : "the distance remapping needs the far copy of qkv (rotated at the remapped positions)");
  GPT_CHECK(!has_far || spec.rope.remap_window >= 1, "attention: the remap window must be >= 1, got ",
            spec.rope.remap_window);
  GPT_CHECK(spec.rope.remap != RemapKind::DualChunk ||
                (spec.rope.remap_local >= 0 && spec.rope.remap_local < remap::dca_chunk(spec.rope)),
            "attention: dual_chunk needs 0 <= w < s = remap_window - w, got remap_window ", spec.rope.remap_window,
            ", w ", spec.rope.remap_local);
}

template <typename T>
inline T dot(const T* a, const T* b, int n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// ---- cosine scores: q̂ = q / sqrt(‖q‖² + eps²) per head --------------------------------
template <typename T>
T head_norm(const T* x, int D) {
  return static_cast<T>(std::sqrt(static_cast<double>(dot(x, x, D)) + attn::kNormEps * attn::kNormEps));
}

// heads (B,NH,3,T,D) = qkv (B,T,3C) rearranged head-major; with normalize,
// every head of q and k L2-normalised (cosine scores), v copied.
template <typename T>
void to_heads(T* heads, const T* qkv, int B, int Tn, int C, int NH, bool normalize) {
  const int D = C / NH;
  const long rows = static_cast<long>(B) * Tn;
#pragma omp parallel for if (rows * C > (1 << 16))
  for (long r = 0; r < rows; ++r) {
    const int b = static_cast<int>(r / Tn), t = static_cast<int>(r % Tn);
    const T* in = qkv + r * 3 * C;
    for (int part = 0; part < 3; ++part)
      for (int h = 0; h < NH; ++h) {
        const T* x = in + part * C + h * D;
        T* o = heads + head_offset(b, h, part, t, Tn, NH, D);
        if (normalize && part < 2) {
          const T inv = T(1) / head_norm(x, D);
          for (int d = 0; d < D; ++d) o[d] = x[d] * inv;
        } else {
          std::copy(x, x + D, o);
        }
      }
  }
}

// dqkv (B,T,3C) += dheads (B,NH,3,T,D).
template <typename T>
void add_from_heads(T* dqkv, const T* dheads, int B, int Tn, int C, int NH) {
  const int D = C / NH;
  const long rows = static_cast<long>(B) * Tn;
#pragma omp parallel for if (rows * C > (1 << 16))
  for (long r = 0; r < rows; ++r) {
    const int b = static_cast<int>(r / Tn), t = static_cast<int>(r % Tn);
    T* out = dqkv + r * 3 * C;
    for (int part = 0; part < 3; ++part)
      for (int h = 0; h < NH; ++h) {
        const T* g = dheads + head_offset(b, h, part, t, Tn, NH, D);
        T* o = out + part * C + h * D;
        for (int d = 0; d < D; ++d) o[d] += g[d];
      }
  }
}

// dqkv += the gradient through the normalisation, given dhat = dL/d(normalised qkv):
// dq = (dq̂ − (dq̂·q̂) q̂) / n for q and k; v passes through.
template <typename T>
void normalize_qk_backward(T* dqkv, const T* dhat, const T* qkv, int B, int Tn, int C, int NH) {
  const int D = C / NH;
  const size_t rows = static_cast<size_t>(B) * Tn;
#pragma omp parallel for if (rows * C > (1 << 16))
  for (size_t r = 0; r < rows; ++r) {
    const T* in = qkv + r * 3 * C;
    const T* g = dhat + r * 3 * C;
    T* o = dqkv + r * 3 * C;
    for (int part = 0; part < 2; ++part)
      for (int h = 0; h < NH; ++h) {
        const size_t off = part * C + h * D;
        const T inv = T(1) / head_norm(in + off, D);
        T gx = 0;  // dq̂·q̂
        for (int d = 0; d < D; ++d) gx += g[off + d] * in[off + d] * inv;
        for (int d = 0; d < D; ++d) o[off + d] += (g[off + d] - gx * in[off + d] * inv) * inv;
      }
    for (int c = 2 * C; c < 3 * C; ++c) o[c] += g[c];
  }
}

// ---- one block of query rows -------------------------------------------------------------
// Rows i0..i1-1 (0-based) of one (b,h) slice; row r of a tile (ld scalars,
// Tn rounded up to whole vector blocks) belongs to query i0 + r. Its columns
// are the keys the block can see: without a context mask keys 0..i1-1
// (column c = key c; row r's keys are 0..i0+r); with one (attn::masked) the
// ns sink keys 0..ns-1 and then the keys klo..i1-1 from the block's first
// window key on, so that keys no row of the block keeps cost nothing (a
// window of w keys makes a row block O(w) wide, not O(T)).
template <typename T>
struct RowBlock {
  int i0, i1;
  size_t ld;
  bool masked = false;
  int ns = 0, klo = 0;  // sink columns; the first key of the band columns

  RowBlock(int i0_, int i1_, size_t ld_, const AttentionSpec& s) : i0(i0_), i1(i1_), ld(ld_) {
    masked = attn::masked(s);
    if (masked) {
      klo = attn::window_begin(s, i0);
      ns = std::min(s.sinks, klo);
    }
  }
  int rows() const { return i1 - i0; }
  int cols() const { return ns + i1 - klo; }
  int keys(int r) const { return ns + i0 + r + 1 - klo; }  // columns up to the causal limit j <= i
  T* row(T* tile, int r) const { return tile + static_cast<size_t>(r) * ld; }
  // Calls f(first column, first key, columns) for each run of columns that
  // are consecutive keys (one without a mask, up to two with one).
  template <typename F>
  void segments(F&& f) const {
    if (ns > 0) f(0, 0, ns);
    f(ns, klo, i1 - klo);
  }
};

size_t tile_ld(int Tn) { return static_cast<size_t>(attn_rows::padded_keys(Tn)); }

// tile row r, column c: q_i·k_key(c) (before the score factor), one GEMM per
// segment over the block's rows; the entries past the causal limit (only in
// the last 64 columns) and the masked ones are dealt with by the row functions.
template <typename T>
void block_scores(T* tile, const RowBlock<T>& rb, const HeadView<const T>& hv) {
  for (int r = 0; r < rb.rows(); ++r) std::fill(rb.row(tile, r), rb.row(tile, r) + rb.cols(), T(0));
  rb.segments([&](int c0, int k0, int nc) {
    gemm_accumulate_serial(tile + c0, rb.ld, MatView<T>{hv.q_row(rb.i0), hv.stride, 1},
                           MatView<T>{hv.k_row(k0), 1, hv.stride}, rb.rows(), nc, hv.D);
  });
}

// ---- distance remapping (remap:: of attention_spec.h) -------------------------------------
// A key n of query m before remap::far_end(m) (for most rules m − n >= W,
// the remap window) is scored with the far copies of q and k (qkv_far,
// rotated at the remapped positions). In a segment of the block's columns
// (keys k0..k0+nc-1) the far keys of row m are a prefix: columns
// c < far_end(m) − k0, longest for the block's last row.
struct FarCols {
  const RopeSpec& rope;
  // Far-capable columns of a segment for any row of the block (rows < i1).
  int capable(int i1, int k0, int nc) const { return of_row(i1 - 1, k0, nc); }
  // Far columns of row m in that segment.
  int of_row(int m, int k0, int nc) const { return std::clamp(remap::far_end(rope, m) - k0, 0, nc); }
};

// Far scores q̃_i·k̃_j of the far-capable columns into ftile, then copied
// over the near scores of tile where the pair is far.
template <typename T>
void merge_far_scores(T* tile, T* ftile, const RowBlock<T>& rb, const HeadView<const T>& fv, const FarCols& fc) {
  rb.segments([&](int c0, int k0, int nc) {
    const int nf = fc.capable(rb.i1, k0, nc);
    if (nf == 0) return;
    for (int r = 0; r < rb.rows(); ++r) std::fill(rb.row(ftile, r) + c0, rb.row(ftile, r) + c0 + nf, T(0));
    gemm_accumulate_serial(ftile + c0, rb.ld, MatView<T>{fv.q_row(rb.i0), fv.stride, 1},
                           MatView<T>{fv.k_row(k0), 1, fv.stride}, rb.rows(), nf, fv.D);
    for (int r = 0; r < rb.rows(); ++r) {
      const int upto = fc.of_row(rb.i0 + r, k0, nc);
      std::copy(rb.row(ftile, r) + c0, rb.row(ftile, r) + c0 + upto, rb.row(tile, r) + c0);
    }
  });
}

// Moves dL/dσ of the far pairs from g to gf (zero elsewhere) and adds their
// products: dq̃_i += Σ_j dσ_ij k̃_j, dk̃_j += Σ_i dσ_ij q̃_i.
template <typename T>
void far_backward(T* g, T* gf, const RowBlock<T>& rb, const HeadView<const T>& fv, const HeadView<T>& dfv,
                  const FarCols& fc) {
  rb.segments([&](int c0, int k0, int nc) {
    const int nf = fc.capable(rb.i1, k0, nc);
    if (nf == 0) return;
    for (int r = 0; r < rb.rows(); ++r) {
      const int upto = fc.of_row(rb.i0 + r, k0, nc);
      T* gr = rb.row(g, r) + c0;
      T* fr = rb.row(gf, r) + c0;
      std::copy(gr, gr + upto, fr);
      std::fill(fr + upto, fr + nf, T(0));
      std::fill(gr, gr + upto, T(0));
    }
    gemm_accumulate_serial(dfv.q_row(rb.i0), dfv.stride, MatView<T>{gf + c0, rb.ld, 1},
                           MatView<T>{fv.k_row(k0), fv.stride, 1}, rb.rows(), fv.D, nf);
    gemm_accumulate_serial(dfv.k_row(k0), dfv.stride, MatView<T>{gf + c0, 1, rb.ld},
                           MatView<T>{fv.q_row(rb.i0), fv.stride, 1}, nf, fv.D, rb.rows());
  });
}

// The per-row constants of stage 2 for one (b,h) slice.
template <typename T>
struct HeadConsts {
  double factor;      // stage 1's f
  double head_scale;  // s_h (ssmax)
  double slope;       // ALiBi slope (0 without ALiBi)
  double bias;
  int D;
  double zeta;  // the sink key's logit (attn::sink_logit)
  // KERPLE: b(Δ) and (backward) ∂b/∂r₁, ∂b/∂r₂ by distance Δ < T; null otherwise.
  const T* kb = nullptr;
  const T* kg1 = nullptr;
  const T* kg2 = nullptr;
  // The forget gate: c of this (b,h) slice (T values), and (backward) dL/dc.
  const T* fc = nullptr;
  T* dfc = nullptr;
  // FIRE: the table (T, T) of this head, and (backward) dL/db (T, T) of this
  // (b,h) slice; row i reads and adds to row i − 1 (attn::fire).
  const T* fb = nullptr;
  T* dfb = nullptr;
  int Tn = 0;
};

// KERPLE's per-head tables for one call: b_h(Δ), and with grads ∂b/∂r₁,
// ∂b/∂r₂ (Δ = 0..T−1, row h·T + Δ), from the raw parameters (attn::kerple_r).
template <typename T>
struct KerpleTables {
  std::vector<T> b, g1, g2;
  std::vector<attn::KerpleR> r;  // per head
  KerpleTables(const AttentionSpec& s, const T* raw, int NH, int Tn, bool grads) {
    if (!s.kerple()) return;
    r.resize(NH);
    b.resize(static_cast<size_t>(NH) * Tn);
    if (grads) g1.resize(b.size()), g2.resize(b.size());
    for (int h = 0; h < NH; ++h) {
      r[h] = attn::kerple_r(s.position_bias, static_cast<double>(raw[2 * h]), static_cast<double>(raw[2 * h + 1]));
      for (int d = 0; d < Tn; ++d) {
        const size_t k = static_cast<size_t>(h) * Tn + d;
        b[k] = static_cast<T>(attn::kerple_bias(s.position_bias, r[h].r1, r[h].r2, static_cast<double>(d)));
        if (!grads) continue;
        double d1, d2;
        attn::kerple_bias_grad(s.position_bias, r[h].r1, r[h].r2, static_cast<double>(d), &d1, &d2);
        g1[k] = static_cast<T>(d1);
        g2[k] = static_cast<T>(d2);
      }
    }
  }
  void attach(HeadConsts<T>& hc, int h, int Tn) const {
    if (b.empty()) return;
    hc.kb = b.data() + static_cast<size_t>(h) * Tn;
    if (!g1.empty()) hc.kg1 = g1.data() + static_cast<size_t>(h) * Tn, hc.kg2 = g2.data() + static_cast<size_t>(h) * Tn;
  }
};

// x_j = λ_i f σ_j + bias − slope (i − j) of row r of the block (i = i0 + r + 1,
// 1-based) as the row functions take it, with the block's column map.
template <typename T>
attn_rows::RowArgs<T> row_args(const RowBlock<T>& rb, int r, const AttentionSpec& s, const HeadConsts<T>& hc) {
  const int i = rb.i0 + r + 1;
  attn_rows::RowArgs<T> a;
  a.i = i;
  a.n = rb.keys(r);
  a.lf = static_cast<T>(attn::row_scale(s, i, hc.D, hc.head_scale) * hc.factor);
  a.bias = static_cast<T>(hc.bias);
  a.slope = static_cast<T>(hc.slope);
  a.zeta = static_cast<T>(hc.zeta);
  a.cap = static_cast<T>(s.softcap);
  a.kb = hc.kb;
  a.kg1 = hc.kg1;
  a.kg2 = hc.kg2;
  a.fc = hc.fc;
  a.dfc = hc.dfc;
  if (hc.fb) {
    a.kb = hc.fb + static_cast<size_t>(i - 1) * hc.Tn;
    if (hc.dfb) a.dkb = hc.dfb + static_cast<size_t>(i - 1) * hc.Tn;
  }
  if (rb.masked) {
    a.masked = true;
    a.ns = rb.ns;
    a.off = rb.klo - rb.ns;
    a.lo = attn::window_begin(s, i - 1);
    a.sinks = s.sinks;
  }
  return a;
}

// The row functions: vectorised for float, scalar (attn:: directly) for double.
void forward_row(GemmKernel isa, float* row, const attn_rows::RowArgs<float>& a, const AttentionSpec& s, float* st) {
  attn_rows::forward_row_vec(isa, row, a, s, st);
}
void forward_row(GemmKernel, double* row, const attn_rows::RowArgs<double>& a, const AttentionSpec& s, double* st) {
  attn_rows::forward_row_scalar(row, a, s, st);
}
void backward_weights_row(GemmKernel isa, const float* qk, float* u, float* w, const attn_rows::RowArgs<float>& a,
                          const AttentionSpec& s, const attn::Row<float>& r) {
  attn_rows::backward_weights_row_vec(isa, qk, u, w, a, s, r);
}
void backward_weights_row(GemmKernel, const double* qk, double* u, double* w, const attn_rows::RowArgs<double>& a,
                          const AttentionSpec& s, const attn::Row<double>& r) {
  attn_rows::backward_weights_row_scalar(qk, u, w, a, s, r);
}
template <typename T>
double backward_grad_row(GemmKernel isa, const T* qk, const T* u, const T* w, T* g, const attn_rows::RowArgs<T>& a,
                         const AttentionSpec& s, const attn::Row<T>& r, T D, T lambda_f, T f, bool want, T* S,
                         double* kerple) {
  if constexpr (std::is_same_v<T, float>)
    return attn_rows::backward_grad_row_vec(isa, qk, u, w, g, a, s, r, D, lambda_f, f, want, S, kerple);
  else
    return attn_rows::backward_grad_row_scalar(qk, u, w, g, a, s, r, D, lambda_f, f, want, S, kerple);
}

// The largest |σ| of a row of stage-1 scores: f times the raw products the
// tile holds before forward_row, over the keys the row keeps (a mask's
// window and sinks).
template <typename T>
double row_max_score(const T* row, const attn_rows::RowArgs<T>& a, double factor) {
  double most = 0;
  for (int j = 0; j < a.n; ++j)
    if (a.kept(j)) most = std::max(most, std::abs(static_cast<double>(row[j])));
  return most * factor;
}

// Adds one row's diagnostics to acc[kAttentionDiagStats] (columns mapped to
// keys by a: the first key's share, the share of the last N keys); max_score:
// the row's largest |σ| (row_max_score).
template <typename T>
void row_diagnostics(double* acc, const T* w, const attn_rows::RowArgs<T>& a, int N, double max_score) {
  double mass = 0, wlogw = 0, recent = 0, first = 0;
  const int first_recent = N > 0 ? std::max(0, a.i - N) : 0;
  for (int j = 0; j < a.n; ++j) {
    const double x = w[j];
    mass += x;
    if (x > 0) wlogw += x * std::log(x);
    if (a.key(j) >= first_recent) recent += x;
    if (a.key(j) == 0) first = x;
  }
  if (mass > 0) {
    acc[0] += std::log(mass) - wlogw / mass;  // entropy of w / mass
    acc[1] += first / mass;
    acc[2] += recent / mass;
  }
  acc[3] += mass;
  acc[kDiagRows] += 1;
  acc[kDiagMaxScore] = std::max(acc[kDiagMaxScore], max_score);
}

// Scale-invariant attention (attn::si_*): row r's scores σ → a_t·σ + m_t/lf
// (t = the column's distance, lf = λ_i f of the row), so that the row
// functions form x = lf·a_t·σ + m_t; and the backward's dL/dσ′ → a_t·dL/dσ′.
template <typename T>
void si_scores(T* row, const attn_rows::RowArgs<T>& a, const AttentionSpec& s) {
  for (int c = 0; c < a.n; ++c) {
    const int t = a.i - 1 - a.key(c);
    row[c] = static_cast<T>(attn::si_gain(s, t) * row[c] + attn::si_shift(s, t) / a.lf);
  }
}
template <typename T>
void si_grads(T* g, const attn_rows::RowArgs<T>& a, const AttentionSpec& s) {
  for (int c = 0; c < a.n; ++c) g[c] = static_cast<T>(attn::si_gain(s, a.i - 1 - a.key(c)) * g[c]);
}

// Forward of one row block: y rows (D wide, y_stride apart), stats rows
// (kStats each), optional diagnostics. Scores and the weighted sum
// y = W·V are GEMMs (kernels/cpu/gemm.h) on the block's panels.
template <typename T>
void block_forward(T* y, size_t y_stride, T* st, double* diag, T* tile, T* ftile, const RowBlock<T>& rb,
                   const HeadView<const T>& hv, const HeadView<const T>* fv, const AttentionSpec& s,
                   const HeadConsts<T>& hc, GemmKernel isa) {
  block_scores(tile, rb, hv);
  if (fv) merge_far_scores(tile, ftile, rb, *fv, FarCols{s.rope});
  for (int r = 0; r < rb.rows(); ++r) {
    T* row = rb.row(tile, r);
    const int n = rb.keys(r);
    const attn_rows::RowArgs<T> a = row_args<T>(rb, r, s, hc);
    const double max_score = diag ? row_max_score(row, a, hc.factor) : 0.0;
    if (attn::scale_invariant(s)) si_scores(row, a, s);
    forward_row(isa, row, a, s, st + r * kStats);
    if (diag) row_diagnostics(diag, row, a, s.trained_context, max_score);
    std::fill(row + n, row + rb.cols(), T(0));  // the causal mask
  }
  for (int r = 0; r < rb.rows(); ++r) std::fill(y + r * y_stride, y + r * y_stride + hv.D, T(0));
  rb.segments([&](int c0, int k0, int nc) {
    gemm_accumulate_serial(y, y_stride, MatView<T>{tile + c0, rb.ld, 1}, MatView<T>{hv.v_row(k0), hv.stride, 1},
                           rb.rows(), hv.D, nc);
  });
}

// Buffers kept from call to call on each thread (grown, never shrunk). A
// vector allocated per call is, past glibc's mmap threshold (128 KiB until a
// larger block has been freed), a fresh mapping every time, faulted in page
// by page: the head-major copies of q, k, v alone are B·T·3C values per
// layer and pass. Whether the allocator happened to have raised that
// threshold decided 10-15% of a CPU training step.
template <typename T>
T* reuse(std::vector<T>& v, size_t n) {
  if (v.size() < n) {
    v.clear();
    v.shrink_to_fit();
    v.resize(n);
  }
  return v.data();
}
template <typename T>
struct CallScratch {
  std::vector<T> heads, heads_far, dheads, dheads_far, dhat;
};
template <typename T>
CallScratch<T>& call_scratch() {
  static thread_local CallScratch<T> s;
  return s;
}

// Per-thread tiles of the backward pass (kept by each thread across calls).
template <typename T>
struct BackwardTiles {
  std::vector<T> qk_, u_, w_, g_;  // σ = q·k; φ values u; weights w; g = dL/dw, then h, then dL/dσ
  std::vector<T> far_;             // far scores, then the far pairs' dL/dσ (distance remapping only)
  T *qk = nullptr, *u = nullptr, *w = nullptr, *g = nullptr, *far = nullptr;
  void prepare(size_t n, bool remap) {
    qk = reuse(qk_, n);
    u = reuse(u_, n);
    w = reuse(w_, n);
    g = reuse(g_, n);
    far = remap ? reuse(far_, n) : nullptr;
  }
};

// The sums a row block contributes to the gradients of the head's learned parameters.
struct HeadGradSums {
  double scale = 0;       // Σ_i dλ_i/ds_h Σ_j σ_ij dx_ij (ssmax)
  double sink = 0;        // Σ_i dL/dζ_h (attn::sink_grad; normalisation sink)
  double r1 = 0, r2 = 0;  // Σ_ij dx_ij ∂b/∂r₁, ∂b/∂r₂ (KERPLE)
};

// Backward of one row block: accumulates into dq_i (its rows), dk_j, dv_j
// (j < i1) of the same head and returns the HeadGradSums of its rows. The
// four products (g = dY·Vᵀ, dV += Wᵀ·dY, dQ += dS·K, dK += dSᵀ·Q) are GEMMs;
// φ is evaluated once per element (u is kept for the derivative).
template <typename T>
HeadGradSums block_backward(const HeadView<T>& dhv, const T* dy, const T* y, size_t y_stride, const T* st,
                            BackwardTiles<T>& tl, const RowBlock<T>& rb, const HeadView<const T>& hv,
                            const HeadView<const T>* fv, const HeadView<T>* dfv, const AttentionSpec& s,
                            const HeadConsts<T>& hc, GemmKernel isa) {
  const int D = hv.D, R = rb.rows();
  const size_t ld = rb.ld;
  T *qk = tl.qk, *u = tl.u, *w = tl.w, *g = tl.g;
  std::array<T, kRowBlock> Di;
  std::array<attn::Row<T>, kRowBlock> rows;
  block_scores(qk, rb, hv);
  const FarCols fc{s.rope};
  if (fv) merge_far_scores(qk, tl.far, rb, *fv, fc);
  const int ncols = rb.cols();
  for (int r = 0; r < R; ++r) {
    const int i = rb.i0 + r + 1, n = rb.keys(r);
    rows[r] = attn::row_from_stats(s, i, st + r * kStats);
    if (attn::scale_invariant(s)) si_scores(rb.row(qk, r), row_args<T>(rb, r, s, hc), s);
    backward_weights_row(isa, rb.row(qk, r), rb.row(u, r), rb.row(w, r), row_args<T>(rb, r, s, hc), s, rows[r]);
    std::fill(rb.row(w, r) + n, rb.row(w, r) + ncols, T(0));  // the causal mask
    Di[r] = dot(dy + r * y_stride, y + r * y_stride, D);
    std::fill(rb.row(g, r), rb.row(g, r) + ncols, T(0));
  }
  // g_ij = dy_i·v_j; dv_j += Σ_i w_ij dy_i
  rb.segments([&](int c0, int k0, int nc) {
    gemm_accumulate_serial(g + c0, ld, MatView<T>{dy, y_stride, 1}, MatView<T>{hv.v_row(k0), 1, hv.stride}, R, nc, D);
    gemm_accumulate_serial(dhv.v_row(k0), dhv.stride, MatView<T>{w + c0, 1, ld}, MatView<T>{dy, y_stride, 1}, nc, D, R);
  });
  // Per row: h, S, dx, and dσ = λ f dx into g.
  HeadGradSums dhead;
  const T f = static_cast<T>(hc.factor);
  for (int r = 0; r < R; ++r) {
    const int i = rb.i0 + r + 1, n = rb.keys(r);
    const T lambda = static_cast<T>(attn::row_scale(s, i, hc.D, hc.head_scale));
    T S = 0;
    double kr[2] = {0, 0};
    const double sigma_dx =
        backward_grad_row(isa, rb.row(qk, r), rb.row(u, r), rb.row(w, r), rb.row(g, r), row_args<T>(rb, r, s, hc), s,
                          rows[r], Di[r], lambda * f, f, s.learned_scale(), &S, hc.kg1 ? kr : nullptr);
    dhead.r1 += kr[0];
    dhead.r2 += kr[1];
    if (attn::scale_invariant(s)) si_grads(rb.row(g, r), row_args<T>(rb, r, s, hc), s);
    std::fill(rb.row(g, r) + n, rb.row(g, r) + ncols, T(0));
    dhead.scale += attn::row_scale_grad(s, i, hc.D) * sigma_dx;
    if (s.learned_sink()) dhead.sink += static_cast<double>(attn::sink_grad(s, rows[r], static_cast<T>(hc.zeta), S));
  }
  // The far pairs' share goes to the far copies of q and k.
  if (fv) far_backward(g, tl.far, rb, *fv, *dfv, fc);
  // Through σ_ij = q_i·k_j: dq_i += Σ_j dσ_ij k_j, dk_j += Σ_i dσ_ij q_i.
  rb.segments([&](int c0, int k0, int nc) {
    gemm_accumulate_serial(dhv.q_row(rb.i0), dhv.stride, MatView<T>{g + c0, ld, 1},
                           MatView<T>{hv.k_row(k0), hv.stride, 1}, R, D, nc);
    gemm_accumulate_serial(dhv.k_row(k0), dhv.stride, MatView<T>{g + c0, 1, ld},
                           MatView<T>{hv.q_row(rb.i0), hv.stride, 1}, nc, D, R);
  });
  return dhead;
}

// The constants of slice (b,h); dfcum: the backward's dL/dc (B,NH,T), dfire:
// FIRE's dL/db (B,NH,T,T), or null.
template <typename T>
HeadConsts<T> head_consts(const AttentionSpec& s, int b, int h, int NH, int D, const HeadParams<T>& hp,
                          const KerpleTables<T>& kt, int Tn, T* dfcum = nullptr, T* dfire = nullptr) {
  const int ph = s.param_head(h);  // the head of the learned parameters
  HeadConsts<T> hc{attn::score_factor(s, D),
                   hp.scale ? static_cast<double>(hp.scale[ph]) : 1.0,
                   s.alibi() ? attn::alibi_slope(ph, NH / s.head_group) : 0.0,
                   s.bias,
                   D,
                   attn::sink_logit(s, hp.sink, ph)};
  kt.attach(hc, ph, Tn);
  if (s.forget()) {
    const size_t off = (static_cast<size_t>(b) * NH + h) * Tn;
    hc.fc = hp.fcum + off;
    if (dfcum) hc.dfc = dfcum + off;
  }
  if (s.fire()) {
    hc.Tn = Tn;
    hc.fb = hp.fire + fire_slice(hp.fire_per_sequence, b, h, NH, Tn);
    if (dfire) hc.dfb = dfire + fire_slice(true, b, h, NH, Tn);
  }
  return hc;
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* stats, const T* qkv, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                       const HeadParams<std::type_identity_t<T>>& head, double* diag, const T* qkv_far) {
  check_attention_args("attention", B, Tn, C, NH, spec, head);
  check_far(spec, qkv_far != nullptr);
  const int D = C / NH;
  const size_t n = static_cast<size_t>(B) * Tn * 3 * C;
  const KerpleTables<T> kt(spec, head.kerple, NH / spec.head_group, Tn, false);
  CallScratch<T>& cs = call_scratch<T>();
  T* heads = reuse(cs.heads, n);
  T* heads_far = qkv_far ? reuse(cs.heads_far, n) : nullptr;
  to_heads(heads, qkv, B, Tn, C, NH, spec.score == Score::Cosine);
  if (qkv_far) to_heads(heads_far, qkv_far, B, Tn, C, NH, spec.score == Score::Cosine);
  const int nblocks = (Tn + kRowBlock - 1) / kRowBlock;
  const GemmKernel isa = gemm_kernel();
  const long nitems = static_cast<long>(B) * NH * nblocks;
  // Diagnostics per work item, summed in a fixed order afterwards.
  std::vector<double> item_diag(diag ? nitems * kAttentionDiagStats : 0, 0.0);

#pragma omp parallel if (score_work(B, Tn, C) > kMinParallelWork)
  {
    const FlushDenormals ftz;
    static thread_local std::vector<T> tile_store, ftile_store;
    const size_t tn = static_cast<size_t>(kRowBlock) * tile_ld(Tn);
    T* tile = reuse(tile_store, tn);
    T* ftile = qkv_far ? reuse(ftile_store, tn) : nullptr;
    std::array<T, kRowBlock * kStats> st;
#pragma omp for schedule(dynamic, 1)
    for (long item = 0; item < nitems; ++item) {
      // Largest row blocks first, so the triangular tail balances.
      const int blk = nblocks - 1 - static_cast<int>(item % nblocks);
      const int bh = static_cast<int>(item / nblocks);
      const int b = bh / NH, h = bh % NH;
      const AttentionSpec sb = attn::for_sequence(spec, head.doc, b, Tn);  // its document mask
      const HeadView<const T> hv(heads, b, h, Tn, NH, D);
      const HeadView<const T> fv(qkv_far ? heads_far : heads, b, h, Tn, NH, D);
      const RowBlock<T> rb(blk * kRowBlock, std::min(Tn, (blk + 1) * kRowBlock), tile_ld(Tn), sb);
      // out (B,T,C) row (b,i0), head h
      T* y = out + (static_cast<size_t>(b) * Tn + rb.i0) * C + static_cast<size_t>(h) * D;
      block_forward(y, static_cast<size_t>(C), st.data(), diag ? &item_diag[item * kAttentionDiagStats] : nullptr, tile,
                    ftile, rb, hv, qkv_far ? &fv : nullptr, sb, head_consts(sb, b, h, NH, D, head, kt, Tn), isa);
      // stats (B,NH,T,kStats)
      if (stats)
        std::copy(st.begin(), st.begin() + rb.rows() * kStats, stats + (static_cast<size_t>(bh) * Tn + rb.i0) * kStats);
    }
  }
  if (diag)
    for (long item = 0; item < nitems; ++item) {
      const int h = static_cast<int>(item / nblocks) % NH;
      add_attention_diag(diag + h * kAttentionDiagStats, &item_diag[item * kAttentionDiagStats]);
    }
}

template <typename T>
void attention_backward(T* dqkv, const HeadGrads<std::type_identity_t<T>>& dhp, const T* dout, const T* out,
                        const T* stats, const T* qkv, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                        const HeadParams<std::type_identity_t<T>>& head, T* dqkv_far, const T* qkv_far) {
  check_attention_args("attention", B, Tn, C, NH, spec, head);
  check_far(spec, qkv_far != nullptr);
  GPT_CHECK(!qkv_far || dqkv_far, "attention_backward: a distance remapping needs dqkv_far");
  GPT_CHECK(!spec.kerple() || dhp.kerple != nullptr, "attention_backward: KERPLE needs the gradients of r1, r2");
  GPT_CHECK(!spec.forget() || dhp.fcum != nullptr, "attention_backward: the forget gate needs dL/dc");
  GPT_CHECK(!spec.fire() || dhp.fire != nullptr, "attention_backward: FIRE needs dL/db (B, NH, T, T)");
  GPT_CHECK(stats != nullptr, "attention_backward: the forward's stats are required");
  GPT_CHECK(!spec.learned_scale() || dhp.scale != nullptr, "attention_backward: ssmax needs dhead_scale");
  GPT_CHECK(!spec.learned_sink() || dhp.sink != nullptr, "attention_backward: the sink needs the sink gradients");
  const int D = C / NH;
  const size_t n = static_cast<size_t>(B) * Tn * 3 * C;
  const KerpleTables<T> kt(spec, head.kerple, NH / spec.head_group, Tn, true);
  CallScratch<T>& cs = call_scratch<T>();
  T* heads = reuse(cs.heads, n);
  T* dheads = reuse(cs.dheads, n);
  std::fill(dheads, dheads + n, T(0));
  T* heads_far = qkv_far ? reuse(cs.heads_far, n) : nullptr;
  T* dheads_far = qkv_far ? reuse(cs.dheads_far, n) : nullptr;
  if (qkv_far) std::fill(dheads_far, dheads_far + n, T(0));
  to_heads(heads, qkv, B, Tn, C, NH, spec.score == Score::Cosine);
  if (qkv_far) to_heads(heads_far, qkv_far, B, Tn, C, NH, spec.score == Score::Cosine);
  std::vector<HeadGradSums> dhead(static_cast<size_t>(B) * NH);
  const GemmKernel isa = gemm_kernel();

  // dk_j and dv_j collect terms from every row i >= j, so a work item is a
  // whole (b,h) slice: its dqkv columns belong to it alone, and the order of
  // the sums is fixed whatever the thread count.
#pragma omp parallel if (score_work(B, Tn, C) > kMinParallelWork)
  {
    const FlushDenormals ftz;
    static thread_local BackwardTiles<T> tiles;
    tiles.prepare(static_cast<size_t>(kRowBlock) * tile_ld(Tn), qkv_far != nullptr);
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const HeadView<const T> hv(heads, b, h, Tn, NH, D);
      const HeadView<T> dhv(dheads, b, h, Tn, NH, D);
      const HeadView<const T> fv(qkv_far ? heads_far : heads, b, h, Tn, NH, D);
      const HeadView<T> dfv(qkv_far ? dheads_far : dheads, b, h, Tn, NH, D);
      const AttentionSpec sb = attn::for_sequence(spec, head.doc, b, Tn);  // its document mask
      const HeadConsts<T> hc = head_consts(sb, b, h, NH, D, head, kt, Tn, dhp.fcum, dhp.fire);
      for (int i0 = 0; i0 < Tn; i0 += kRowBlock) {
        const RowBlock<T> rb(i0, std::min(Tn, i0 + kRowBlock), tile_ld(Tn), sb);
        // dout, out (B,T,C) row (b,i0), head h; stats (B,NH,T,kStats)
        const size_t row = (static_cast<size_t>(b) * Tn + i0) * C + static_cast<size_t>(h) * D;
        const T* st = stats + (static_cast<size_t>(bh) * Tn + i0) * kStats;
        const HeadGradSums part = block_backward(dhv, dout + row, out + row, static_cast<size_t>(C), st, tiles, rb, hv,
                                                 qkv_far ? &fv : nullptr, qkv_far ? &dfv : nullptr, sb, hc, isa);
        dhead[bh].scale += part.scale;
        dhead[bh].sink += part.sink;
        dhead[bh].r1 += part.r1;
        dhead[bh].r2 += part.r2;
      }
    }
  }
  auto scatter = [&](T* dst, const T* dh, const T* src) {
    if (spec.score == Score::Cosine) {
      T* dhat = reuse(cs.dhat, n);  // dL/d(normalised q, k) and dL/dv, in qkv's layout
      std::fill(dhat, dhat + n, T(0));
      add_from_heads(dhat, dh, B, Tn, C, NH);
      normalize_qk_backward(dst, dhat, src, B, Tn, C, NH);
    } else {
      add_from_heads(dst, dh, B, Tn, C, NH);
    }
  };
  scatter(dqkv, dheads, qkv);
  if (qkv_far) scatter(dqkv_far, dheads_far, qkv_far);
  // Per head of the learned parameters: its kernel heads' sums (head_group of
  // them), batch by batch, in order.
  for (int ph = 0; ph < NH / spec.head_group; ++ph) {
    double scale = 0, sink = 0, r1 = 0, r2 = 0;
    for (int h = ph * spec.head_group; h < (ph + 1) * spec.head_group; ++h)
      for (int b = 0; b < B; ++b) {
        const HeadGradSums& d = dhead[static_cast<size_t>(b) * NH + h];
        scale += d.scale;
        sink += d.sink;
        r1 += d.r1;
        r2 += d.r2;
      }
    if (spec.learned_scale()) dhp.scale[ph] += static_cast<T>(scale);
    if (spec.learned_sink()) dhp.sink[ph] += static_cast<T>(sink);
    if (spec.kerple()) {  // through r = softplus(ρ) (and the power's 2σ(ρ₂))
      dhp.kerple[2 * ph] += static_cast<T>(r1 * kt.r[ph].dr1);
      dhp.kerple[2 * ph + 1] += static_cast<T>(r2 * kt.r[ph].dr2);
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int, const AttentionSpec&,
                                       const HeadParams<float>&, double*, const float*);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int, const AttentionSpec&,
                                        const HeadParams<double>&, double*, const double*);
template void attention_backward<float>(float*, const HeadGrads<float>&, const float*, const float*, const float*,
                                        const float*, int, int, int, int, const AttentionSpec&,
                                        const HeadParams<float>&, float*, const float*);
template void attention_backward<double>(double*, const HeadGrads<double>&, const double*, const double*, const double*,
                                         const double*, int, int, int, int, const AttentionSpec&,
                                         const HeadParams<double>&, double*, const double*);

}  // namespace gpt::cpu
