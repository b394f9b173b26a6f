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
// Cosine scores run the same loops on an L2-normalised copy of q and k and
// project the gradients back onto the sphere's tangent at the end.
#include "kernels/cpu/cpu_kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/check.h"

namespace gpt::cpu {

namespace {

// Query rows per block: each k_j, v_j row read serves this many queries
// (a tile of kRowBlock·T scores per thread stays in L2 up to T ~ 4096), and
// the forward's work items are small enough to balance the triangular cost.
constexpr int kRowBlock = 32;
constexpr int kStats = AttentionSpec::kStatsPerRow;

// Below this many score multiply-adds a call runs on one thread: starting a
// parallel region costs more than the work (gradient checks make thousands
// of tiny calls, and on a busy machine each region can stall for ms).
constexpr double kMinParallelWork = 1 << 16;

// Multiply-adds of one score pass: B·NH·T(T+1)/2·D.
double score_work(int B, int Tn, int C) { return 0.5 * B * static_cast<double>(Tn) * (Tn + 1) * C; }

// One (b,h) slice of qkv (B,T,3C): row t of q, k, v starts at
// base + t*stride (+ C for k, + 2C for v); D = head size.
template <typename T>
struct HeadView {
  T* q;
  T* k;
  T* v;
  size_t stride;
  int D;

  HeadView(T* qkv, int b, int h, int Tn, int C, int NH) : stride(3 * static_cast<size_t>(C)), D(C / NH) {
    q = qkv + static_cast<size_t>(b) * Tn * stride + static_cast<size_t>(h) * D;
    k = q + C;
    v = q + 2 * static_cast<size_t>(C);
  }
  T* q_row(int t) const { return q + t * stride; }
  T* k_row(int t) const { return k + t * stride; }
  T* v_row(int t) const { return v + t * stride; }
};

void check_args(int B, int Tn, int C, int NH, const AttentionSpec& spec, bool has_head_scale) {
  GPT_CHECK(B > 0 && Tn > 0 && C > 0 && NH > 0, "attention: B, T, C, NH must be positive, got B=", B,
            " T=", Tn, " C=", C, " NH=", NH);
  GPT_CHECK(C % NH == 0, "attention: C=", C, " must be a multiple of NH=", NH);
  GPT_CHECK(spec.p >= 0 && std::isfinite(spec.p), "attention: sharpening exponent p must be >= 0, got ", spec.p);
  GPT_CHECK(spec.normalize != Normalize::Fixed || spec.norm_const > 0,
            "attention: the fixed normalisation constant must be > 0, got ", spec.norm_const);
  GPT_CHECK(!spec.learned_scale() || has_head_scale, "attention: the ssmax scale needs the per-head scales s_h");
}

template <typename T>
inline T dot(const T* a, const T* b, int n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// y += a * x
template <typename T>
inline void axpy(T* y, T a, const T* x, int n) {
#pragma omp simd
  for (int d = 0; d < n; ++d) y[d] += a * x[d];
}

// ---- cosine scores: q̂ = q / sqrt(‖q‖² + eps²) per head --------------------------------
template <typename T>
T head_norm(const T* x, int D) {
  return static_cast<T>(std::sqrt(static_cast<double>(dot(x, x, D)) + attn::kNormEps * attn::kNormEps));
}

// out = qkv with every head of q and k normalised (v copied).
template <typename T>
void normalize_qk(T* out, const T* qkv, int B, int Tn, int C, int NH) {
  const int D = C / NH;
  const size_t rows = static_cast<size_t>(B) * Tn;
#pragma omp parallel for if (rows * C > (1 << 16))
  for (size_t r = 0; r < rows; ++r) {
    const T* in = qkv + r * 3 * C;
    T* o = out + r * 3 * C;
    for (int part = 0; part < 2; ++part)
      for (int h = 0; h < NH; ++h) {
        const T* x = in + part * C + h * D;
        const T inv = T(1) / head_norm(x, D);
        for (int d = 0; d < D; ++d) o[part * C + h * D + d] = x[d] * inv;
      }
    std::copy(in + 2 * C, in + 3 * C, o + 2 * C);
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
// Rows i0..i1-1 (0-based) of one (b,h) slice; row r of a tile (Tn scalars)
// belongs to query i0 + r, whose keys are 0..i0+r.
template <typename T>
struct RowBlock {
  int i0, i1, Tn;
  int rows() const { return i1 - i0; }
  int keys(int r) const { return i0 + r + 1; }                 // causal: j <= i
  int first_row(int j) const { return std::max(0, j - i0); }   // first row that sees key j
  T* row(T* tile, int r) const { return tile + static_cast<size_t>(r) * Tn; }
};

// Keys per panel of the two products of a block (scores and the weighted
// sum): a panel of K (transposed, D×kKeyPanel) or of V (kKeyPanel×D) stays
// in L1 while the block's rows sweep it, and the innermost loops run over
// contiguous keys or channels, which the compiler vectorises.
constexpr int kKeyPanel = 32;
// Channels per chunk of an output row in the weighted sum.
constexpr int kChanChunk = 16;

// tile row r, j < keys(r): q_i·k_j (before the score factor). panel: scratch
// of D·kKeyPanel scalars.
template <typename T>
void block_scores(T* tile, T* panel, const RowBlock<T>& rb, const HeadView<const T>& hv) {
  const int D = hv.D;
  for (int j0 = 0; j0 < rb.i1; j0 += kKeyPanel) {
    const int nj = std::min(kKeyPanel, rb.i1 - j0);
    for (int jj = 0; jj < kKeyPanel; ++jj) {  // K[j0..j0+nj) transposed, zero-padded
      const T* k = jj < nj ? hv.k_row(j0 + jj) : nullptr;
      for (int d = 0; d < D; ++d) panel[d * kKeyPanel + jj] = k ? k[d] : T(0);
    }
    for (int r = rb.first_row(j0); r < rb.rows(); ++r) {
      const T* q = hv.q_row(rb.i0 + r);
      T acc[kKeyPanel] = {};
      for (int d = 0; d < D; ++d) {
        const T qd = q[d];
        const T* p = panel + d * kKeyPanel;
#pragma omp simd
        for (int jj = 0; jj < kKeyPanel; ++jj) acc[jj] += qd * p[jj];
      }
      const int n = std::min(nj, rb.keys(r) - j0);  // causal: keys j <= i only
      std::copy(acc, acc + n, rb.row(tile, r) + j0);
    }
  }
}

// y_r = Σ_j w_rj v_j for the block's rows (y rows y_stride apart, D wide).
template <typename T>
void block_weighted_sum(T* y, size_t y_stride, T* tile, const RowBlock<T>& rb, const HeadView<const T>& hv) {
  const int D = hv.D;
  for (int r = 0; r < rb.rows(); ++r) std::fill(y + r * y_stride, y + r * y_stride + D, T(0));
  for (int j0 = 0; j0 < rb.i1; j0 += kKeyPanel) {
    for (int r = rb.first_row(j0); r < rb.rows(); ++r) {
      const int n = std::min(kKeyPanel, rb.keys(r) - j0);
      const T* w = rb.row(tile, r) + j0;
      T* yr = y + r * y_stride;
      int d0 = 0;
      for (; d0 + kChanChunk <= D; d0 += kChanChunk) {  // full chunks: acc stays in registers
        T acc[kChanChunk];
        for (int dd = 0; dd < kChanChunk; ++dd) acc[dd] = yr[d0 + dd];
        for (int jj = 0; jj < n; ++jj) {
          const T wj = w[jj];
          const T* v = hv.v_row(j0 + jj) + d0;
#pragma omp simd
          for (int dd = 0; dd < kChanChunk; ++dd) acc[dd] += wj * v[dd];
        }
        for (int dd = 0; dd < kChanChunk; ++dd) yr[d0 + dd] = acc[dd];
      }
      for (int jj = 0; d0 < D && jj < n; ++jj) axpy(yr + d0, w[jj], hv.v_row(j0 + jj) + d0, D - d0);
    }
  }
}

// The per-row constants of stage 2 for one (b,h) slice.
struct HeadConsts {
  double factor;      // stage 1's f
  double head_scale;  // s_h (ssmax)
  double slope;       // ALiBi slope (0 without ALiBi)
  double bias;
  int D;
};

// x_j = λ f (q·k_j) + bias − slope (i − j), in place over one row of n keys.
template <typename T>
void row_logits(T* row, int n, int i, const AttentionSpec& s, const HeadConsts& hc) {
  const T lf = static_cast<T>(attn::row_scale(s, i, hc.D, hc.head_scale) * hc.factor);
  const T bias = static_cast<T>(hc.bias), slope = static_cast<T>(hc.slope);
  if (slope != T(0)) {
    for (int j = 0; j < n; ++j) row[j] = lf * row[j] + bias - slope * static_cast<T>(i - 1 - j);
  } else {
    for (int j = 0; j < n; ++j) row[j] = lf * row[j] + bias;
  }
}

// Stages 3–5 in place over one row of logits x: leaves the final weights w
// and writes the row's statistics (shift, Z, max a, Σr) to st.
template <typename T>
void row_weights(T* row, int n, int i, const AttentionSpec& s, T* st) {
  T shift = 0;
  if (attn::shifted(s)) {
    shift = row[0];
    for (int j = 1; j < n; ++j) shift = std::max(shift, row[j]);
  }
  T z = 0;
  for (int j = 0; j < n; ++j) z += (row[j] = attn::positivity(s.positivity, row[j] - shift));
  const T inv_z = attn::inv_norm(s, z);
  T a_max = 0;
  for (int j = 0; j < n; ++j) a_max = std::max(a_max, row[j] *= inv_z);
  st[0] = shift;
  st[1] = z;
  st[2] = a_max;
  st[3] = 0;
  const attn::Row<T> r = attn::row_from_stats(s, i, st);
  if (!s.sharpened() || r.t_max <= T(0)) return;  // w = a (a uniform row under re-weighting keeps a)
  T sum = 0;
  for (int j = 0; j < n; ++j) sum += (row[j] = attn::sharpen_value(r.i * row[j] - r.offset, r.t_max, r.p));
  st[3] = sum;
  const T inv = T(1) / sum;  // sum >= 1: the largest t contributes (t/t_max)^p = 1
  for (int j = 0; j < n; ++j) row[j] *= inv;
}

// Adds one row's diagnostics to acc[kAttentionDiagStats].
template <typename T>
void row_diagnostics(double* acc, const T* w, int n, int N) {
  double mass = 0, wlogw = 0, recent = 0;
  const int first_recent = N > 0 ? std::max(0, n - N) : 0;
  for (int j = 0; j < n; ++j) {
    const double x = w[j];
    mass += x;
    if (x > 0) wlogw += x * std::log(x);
    if (j >= first_recent) recent += x;
  }
  if (mass > 0) {
    acc[0] += std::log(mass) - wlogw / mass;  // entropy of w / mass
    acc[1] += w[0] / mass;
    acc[2] += recent / mass;
  }
  acc[3] += mass;
  acc[4] += 1;
}

// Forward of one row block: y rows (D wide, y_stride apart), stats rows
// (kStats each), optional diagnostics.
template <typename T>
void block_forward(T* y, size_t y_stride, T* st, double* diag, T* tile, T* panel, const RowBlock<T>& rb,
                   const HeadView<const T>& hv, const AttentionSpec& s, const HeadConsts& hc) {
  block_scores(tile, panel, rb, hv);
  for (int r = 0; r < rb.rows(); ++r) {
    T* row = rb.row(tile, r);
    const int i = rb.i0 + r + 1;
    row_logits(row, rb.keys(r), i, s, hc);
    row_weights(row, rb.keys(r), i, s, st + r * kStats);
    if (diag) row_diagnostics(diag, row, rb.keys(r), s.trained_context);
  }
  block_weighted_sum(y, y_stride, tile, rb, hv);
}

// Per-thread tiles of the backward pass.
template <typename T>
struct BackwardTiles {
  std::vector<T> qk, x, w, g;  // q·k then dσ; logits x; weights w; g then h
  std::vector<T> panel;        // block_scores' scratch
  BackwardTiles(size_t n, int D) : qk(n), x(n), w(n), g(n), panel(static_cast<size_t>(D) * kKeyPanel) {}
};

// Backward of one row block: accumulates into dq_i (its rows), dk_j, dv_j
// (j < i1) of the same head and returns Σ_i dλ_i/ds_h Σ_j σ_ij dx_ij.
template <typename T>
double block_backward(const HeadView<T>& dhv, const T* dy, const T* y, size_t y_stride, const T* st,
                      BackwardTiles<T>& tl, const RowBlock<T>& rb, const HeadView<const T>& hv,
                      const AttentionSpec& s, const HeadConsts& hc) {
  const int D = hv.D;
  std::array<T, kRowBlock> Di;
  std::array<attn::Row<T>, kRowBlock> rows;
  block_scores(tl.qk.data(), tl.panel.data(), rb, hv);
  for (int r = 0; r < rb.rows(); ++r) {
    const int n = rb.keys(r), i = rb.i0 + r + 1;
    const T* qk = rb.row(tl.qk.data(), r);
    T* x = rb.row(tl.x.data(), r);
    T* w = rb.row(tl.w.data(), r);
    std::copy(qk, qk + n, x);
    row_logits(x, n, i, s, hc);
    rows[r] = attn::row_from_stats(s, i, st + r * kStats);
    for (int j = 0; j < n; ++j) w[j] = rows[r].w_from_a(rows[r].a(s, x[j]));
    Di[r] = dot(dy + r * y_stride, y + r * y_stride, D);
  }
  // g_ij = dy_i·v_j, dv_j += w_ij dy_i
  for (int j = 0; j < rb.i1; ++j) {
    const T* v = hv.v_row(j);
    T* dv = dhv.v_row(j);
    for (int r = rb.first_row(j); r < rb.rows(); ++r) {
      const T* dyr = dy + r * y_stride;
      axpy(dv, rb.row(tl.w.data(), r)[j], dyr, D);
      rb.row(tl.g.data(), r)[j] = dot(dyr, v, D);
    }
  }
  // Per row: h, S, dx, and dσ = λ f dx into the qk tile.
  double dhead = 0;
  for (int r = 0; r < rb.rows(); ++r) {
    const int n = rb.keys(r), i = rb.i0 + r + 1;
    const attn::Row<T>& row = rows[r];
    T* qk = rb.row(tl.qk.data(), r);
    const T* x = rb.row(tl.x.data(), r);
    const T* w = rb.row(tl.w.data(), r);
    T* g = rb.row(tl.g.data(), r);
    T S = 0;
    if (row.sharpen) {
      for (int j = 0; j < n; ++j) {
        const T a = row.a(s, x[j]);
        g[j] = attn::grad_a(row, a, w[j], g[j], Di[r]);
        S += a * g[j];
      }
    } else {
      S = Di[r];  // w = a, h = g: Σ a h = Σ w g
    }
    const T lambda = static_cast<T>(attn::row_scale(s, i, hc.D, hc.head_scale));
    const T f = static_cast<T>(hc.factor);
    double sigma_dx = 0;
    for (int j = 0; j < n; ++j) {
      const T dx = attn::grad_x(s, row, x[j], g[j], S);
      sigma_dx += static_cast<double>(f * qk[j] * dx);
      qk[j] = lambda * f * dx;
    }
    dhead += attn::row_scale_grad(s, i) * sigma_dx;
  }
  // Through q_i·k_j.
  for (int j = 0; j < rb.i1; ++j) {
    const T* k = hv.k_row(j);
    T* dk = dhv.k_row(j);
    for (int r = rb.first_row(j); r < rb.rows(); ++r) {
      const T g = rb.row(tl.qk.data(), r)[j];
      axpy(dk, g, hv.q_row(rb.i0 + r), D);
      axpy(dhv.q_row(rb.i0 + r), g, k, D);
    }
  }
  return dhead;
}

template <typename T>
HeadConsts head_consts(const AttentionSpec& s, int h, int NH, int D, const T* head_scale) {
  return {attn::score_factor(s, D), head_scale ? static_cast<double>(head_scale[h]) : 1.0,
          s.alibi ? attn::alibi_slope(h, NH) : 0.0, s.bias, D};
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* stats, const T* qkv, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                       const T* head_scale, double* diag) {
  check_args(B, Tn, C, NH, spec, head_scale != nullptr);
  const int D = C / NH;
  std::vector<T> normalized;
  if (spec.score == Score::Cosine) {
    normalized.resize(static_cast<size_t>(B) * Tn * 3 * C);
    normalize_qk(normalized.data(), qkv, B, Tn, C, NH);
    qkv = normalized.data();
  }
  const int nblocks = (Tn + kRowBlock - 1) / kRowBlock;
  const long nitems = static_cast<long>(B) * NH * nblocks;
  // Diagnostics per work item, summed in a fixed order afterwards.
  std::vector<double> item_diag(diag ? nitems * kAttentionDiagStats : 0, 0.0);

#pragma omp parallel if (score_work(B, Tn, C) > kMinParallelWork)
  {
    std::vector<T> tile(static_cast<size_t>(kRowBlock) * Tn), panel(static_cast<size_t>(D) * kKeyPanel);
    std::array<T, kRowBlock * kStats> st;
#pragma omp for schedule(dynamic, 1)
    for (long item = 0; item < nitems; ++item) {
      // Largest row blocks first, so the triangular tail balances.
      const int blk = nblocks - 1 - static_cast<int>(item % nblocks);
      const int bh = static_cast<int>(item / nblocks);
      const int b = bh / NH, h = bh % NH;
      const HeadView<const T> hv(qkv, b, h, Tn, C, NH);
      const RowBlock<T> rb{blk * kRowBlock, std::min(Tn, (blk + 1) * kRowBlock), Tn};
      // out (B,T,C) row (b,i0), head h
      T* y = out + (static_cast<size_t>(b) * Tn + rb.i0) * C + static_cast<size_t>(h) * D;
      block_forward(y, static_cast<size_t>(C), st.data(), diag ? &item_diag[item * kAttentionDiagStats] : nullptr,
                    tile.data(), panel.data(), rb, hv, spec, head_consts(spec, h, NH, D, head_scale));
      // stats (B,NH,T,kStats)
      if (stats)
        std::copy(st.begin(), st.begin() + rb.rows() * kStats,
                  stats + (static_cast<size_t>(bh) * Tn + rb.i0) * kStats);
    }
  }
  if (diag)
    for (long item = 0; item < nitems; ++item) {
      const int h = static_cast<int>(item / nblocks) % NH;
      for (int k = 0; k < kAttentionDiagStats; ++k)
        diag[h * kAttentionDiagStats + k] += item_diag[item * kAttentionDiagStats + k];
    }
}

template <typename T>
void attention_backward(T* dqkv, T* dhead_scale, const T* dout, const T* out, const T* stats, const T* qkv, int B,
                        int Tn, int C, int NH, const AttentionSpec& spec, const T* head_scale) {
  check_args(B, Tn, C, NH, spec, head_scale != nullptr);
  GPT_CHECK(stats != nullptr, "attention_backward: the forward's stats are required");
  GPT_CHECK(!spec.learned_scale() || dhead_scale != nullptr, "attention_backward: ssmax needs dhead_scale");
  const int D = C / NH;
  const T* qkv_in = qkv;
  std::vector<T> normalized, dhat;
  T* dst = dqkv;
  if (spec.score == Score::Cosine) {
    const size_t n = static_cast<size_t>(B) * Tn * 3 * C;
    normalized.resize(n);
    normalize_qk(normalized.data(), qkv, B, Tn, C, NH);
    qkv = normalized.data();
    dhat.assign(n, T(0));
    dst = dhat.data();
  }
  std::vector<double> dhead(static_cast<size_t>(B) * NH, 0.0);

  // dk_j and dv_j collect terms from every row i >= j, so a work item is a
  // whole (b,h) slice: its dqkv columns belong to it alone, and the order of
  // the sums is fixed whatever the thread count.
#pragma omp parallel if (score_work(B, Tn, C) > kMinParallelWork)
  {
    BackwardTiles<T> tiles(static_cast<size_t>(kRowBlock) * Tn, D);
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const HeadView<const T> hv(qkv, b, h, Tn, C, NH);
      const HeadView<T> dhv(dst, b, h, Tn, C, NH);
      const HeadConsts hc = head_consts(spec, h, NH, D, head_scale);
      for (int i0 = 0; i0 < Tn; i0 += kRowBlock) {
        const RowBlock<T> rb{i0, std::min(Tn, i0 + kRowBlock), Tn};
        // dout, out (B,T,C) row (b,i0), head h; stats (B,NH,T,kStats)
        const size_t row = (static_cast<size_t>(b) * Tn + i0) * C + static_cast<size_t>(h) * D;
        const T* st = stats + (static_cast<size_t>(bh) * Tn + i0) * kStats;
        dhead[bh] += block_backward(dhv, dout + row, out + row, static_cast<size_t>(C), st, tiles, rb, hv, spec, hc);
      }
    }
  }
  if (spec.score == Score::Cosine) normalize_qk_backward(dqkv, dhat.data(), qkv_in, B, Tn, C, NH);
  if (spec.learned_scale())
    for (int h = 0; h < NH; ++h) {
      double sum = 0;
      for (int b = 0; b < B; ++b) sum += dhead[static_cast<size_t>(b) * NH + h];
      dhead_scale[h] += static_cast<T>(sum);
    }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int, const AttentionSpec&,
                                       const float*, double*);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int, const AttentionSpec&,
                                        const double*, double*);
template void attention_backward<float>(float*, float*, const float*, const float*, const float*, const float*, int,
                                        int, int, int, const AttentionSpec&, const float*);
template void attention_backward<double>(double*, double*, const double*, const double*, const double*,
                                         const double*, int, int, int, int, const AttentionSpec&, const double*);

}  // namespace gpt::cpu
