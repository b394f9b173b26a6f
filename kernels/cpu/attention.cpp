// Causal self-attention on the CPU, streamed in blocks of query rows so that
// memory stays linear in T (evaluation runs far past the training context):
// no T×T matrix, only a per-thread tile of kRowBlock·T scores.
//
// Each row goes through the stages of ../shared/docs/attention.md: score
// (dot), scale (1/sqrt(D)), positivity (exp) and normalisation (l1), with the
// maximum subtracted before exp. The backward pass recomputes the row's
// weights from the saved log-sum-exp and uses the FlashAttention row
// statistic D_i = dy_i·y_i: dS_ij = w_ij (dP_ij - D_i), dP_ij = dy_i·v_j.
#include "kernels/cpu/cpu_kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/check.h"

namespace gpt::cpu {

namespace {

// Query rows per block: each k_j, v_j row read serves this many queries
// (the tile of kRowBlock·T scores per thread stays in L2 up to T ~ 4096), and
// the forward's work items are small enough to balance the triangular cost.
constexpr int kRowBlock = 32;

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

  HeadView(T* qkv, int b, int h, int Tn, int C, int NH)
      : stride(3 * static_cast<size_t>(C)), D(C / NH) {
    // (B,T,3C) -> row (b,0), columns of head h
    q = qkv + static_cast<size_t>(b) * Tn * stride + static_cast<size_t>(h) * D;
    k = q + C;
    v = q + 2 * static_cast<size_t>(C);
  }
  T* q_row(int t) const { return q + t * stride; }
  T* k_row(int t) const { return k + t * stride; }
  T* v_row(int t) const { return v + t * stride; }
};

void check_shapes(int B, int Tn, int C, int NH, const AttentionSpec& spec) {
  GPT_CHECK(B > 0 && Tn > 0 && C > 0 && NH > 0, "attention: B, T, C, NH must be positive, got B=", B,
            " T=", Tn, " C=", C, " NH=", NH);
  GPT_CHECK(C % NH == 0, "attention: C=", C, " must be a multiple of NH=", NH);
  GPT_CHECK(spec.kind == AttentionKind::Softmax, "attention: only the softmax variant is implemented, got kind=",
            static_cast<int>(spec.kind));
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

// A block of query rows [i0, i1) of one (b,h) slice and its scratch tile:
// row r of the tile (Tn scalars) holds the scores, then the weights, then
// the score gradients of query i0 + r against keys 0..i0+r. Working on a
// block lets every k_j and v_j row be read once per block instead of once
// per query; memory stays linear in T (kRowBlock·T per thread).
template <typename T>
struct RowBlock {
  int i0, i1;
  T* tile;
  int Tn;

  int rows() const { return i1 - i0; }
  T* row(int r) const { return tile + static_cast<size_t>(r) * Tn; }
  int keys(int r) const { return i0 + r + 1; }              // causal: j <= i
  int first_row(int j) const { return std::max(0, j - i0); }  // first row that sees key j
};

// ---- stage 1: dot score, q_i·k_j, for the whole block ---------------------
template <typename T>
void block_scores(const RowBlock<T>& rb, const HeadView<const T>& hv) {
  for (int j = 0; j < rb.i1; ++j) {
    const T* k = hv.k_row(j);
    for (int r = rb.first_row(j); r < rb.rows(); ++r) rb.row(r)[j] = dot(hv.q_row(rb.i0 + r), k, hv.D);
  }
}

// ---- stage 2: scale, a constant 1/sqrt(D) for softmax ---------------------
template <typename T>
void scale_row(T* s, int n, T scale) {
  for (int j = 0; j < n; ++j) s[j] *= scale;
}

// ---- stages 3+4: exp and l1 normalisation -----------------------------------
// Turns scores into weights in place; returns the row's log-sum-exp, the one
// statistic the backward needs to recompute the weights.
template <typename T>
T softmax_row(T* s, int n) {
  T m = s[0];
  for (int j = 1; j < n; ++j) m = std::max(m, s[j]);
  T z = 0;
  for (int j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - m);
    z += s[j];
  }
  const T inv = T(1) / z;
  for (int j = 0; j < n; ++j) s[j] *= inv;
  return m + std::log(z);
}

// The same weights from the saved log-sum-exp: w_j = exp(s_j - lse).
template <typename T>
void softmax_row_from_stats(T* s, int n, T lse) {
  for (int j = 0; j < n; ++j) s[j] = std::exp(s[j] - lse);
}

// Backward through exp + l1 for softmax: g_j = dL/dw_j = dy·v_j becomes
// dS_j = w_j (g_j - D_i) with D_i = dy·y = Σ_j w_j g_j.
template <typename T>
inline T softmax_grad(T w, T g, T Di) {
  return w * (g - Di);
}

// ---- forward of one row block -------------------------------------------------
// y: output row of query i0 (D wide), consecutive queries y_stride apart.
template <typename T>
void block_forward(T* y, size_t y_stride, T* lse, const RowBlock<T>& rb, const HeadView<const T>& hv, T scale) {
  const int D = hv.D;
  block_scores(rb, hv);
  for (int r = 0; r < rb.rows(); ++r) {
    scale_row(rb.row(r), rb.keys(r), scale);
    lse[r] = softmax_row(rb.row(r), rb.keys(r));
    std::fill(y + r * y_stride, y + r * y_stride + D, T(0));
  }
  // y_i = Σ_j w_ij v_j
  for (int j = 0; j < rb.i1; ++j) {
    const T* v = hv.v_row(j);
    for (int r = rb.first_row(j); r < rb.rows(); ++r) axpy(y + r * y_stride, rb.row(r)[j], v, D);
  }
}

// ---- backward of one row block ------------------------------------------------
// Accumulates the block's contribution into dq_i (its rows), dk_j and dv_j
// (j < i1) of the same head. dy, y: rows of dout and out as in block_forward.
template <typename T>
void block_backward(const HeadView<T>& dhv, const T* dy, const T* y, size_t y_stride, const T* lse,
                    const RowBlock<T>& rb, const HeadView<const T>& hv, T scale) {
  const int D = hv.D;
  std::array<T, kRowBlock> Di;
  block_scores(rb, hv);
  for (int r = 0; r < rb.rows(); ++r) {
    scale_row(rb.row(r), rb.keys(r), scale);
    softmax_row_from_stats(rb.row(r), rb.keys(r), lse[r]);
    Di[r] = dot(dy + r * y_stride, y + r * y_stride, D);
  }
  // Through y = Σ w v and the normalised exp: tile becomes dS.
  for (int j = 0; j < rb.i1; ++j) {
    const T* v = hv.v_row(j);
    T* dv = dhv.v_row(j);
    for (int r = rb.first_row(j); r < rb.rows(); ++r) {
      const T* dyr = dy + r * y_stride;
      T& t = rb.row(r)[j];
      axpy(dv, t, dyr, D);
      t = softmax_grad(t, dot(dyr, v, D), Di[r]);
    }
  }
  // Through s_ij = scale · q_i·k_j.
  for (int j = 0; j < rb.i1; ++j) {
    const T* k = hv.k_row(j);
    T* dk = dhv.k_row(j);
    for (int r = rb.first_row(j); r < rb.rows(); ++r) {
      const T g = scale * rb.row(r)[j];
      axpy(dk, g, hv.q_row(rb.i0 + r), D);
      axpy(dhv.q_row(rb.i0 + r), g, k, D);
    }
  }
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* stats, const T* qkv, int B, int Tn, int C, int NH, const AttentionSpec& spec) {
  check_shapes(B, Tn, C, NH, spec);
  const int D = C / NH;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));
  const int nblocks = (Tn + kRowBlock - 1) / kRowBlock;
  const long nitems = static_cast<long>(B) * NH * nblocks;

#pragma omp parallel if (score_work(B, Tn, C) > kMinParallelWork)
  {
    std::vector<T> tile(static_cast<size_t>(kRowBlock) * Tn);
    std::array<T, kRowBlock> lse;
#pragma omp for schedule(dynamic, 1)
    for (long item = 0; item < nitems; ++item) {
      // Largest row blocks first, so the triangular tail balances.
      const int blk = nblocks - 1 - static_cast<int>(item % nblocks);
      const int bh = static_cast<int>(item / nblocks);
      const int b = bh / NH, h = bh % NH;
      const HeadView<const T> hv(qkv, b, h, Tn, C, NH);
      const RowBlock<T> rb{blk * kRowBlock, std::min(Tn, (blk + 1) * kRowBlock), tile.data(), Tn};
      // out (B,T,C) row (b,i0), head h
      T* y = out + (static_cast<size_t>(b) * Tn + rb.i0) * C + static_cast<size_t>(h) * D;
      block_forward(y, static_cast<size_t>(C), lse.data(), rb, hv, scale);
      // stats (B,NH,T,1)
      if (stats) std::copy(lse.begin(), lse.begin() + rb.rows(), stats + static_cast<size_t>(bh) * Tn + rb.i0);
    }
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* out, const T* stats, const T* qkv, int B, int Tn, int C,
                        int NH, const AttentionSpec& spec) {
  check_shapes(B, Tn, C, NH, spec);
  GPT_CHECK(stats != nullptr, "attention_backward: the forward's stats are required");
  const int D = C / NH;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));

  // dk_j and dv_j collect terms from every row i >= j, so a work item is a
  // whole (b,h) slice: its dqkv columns belong to it alone, and the order of
  // the sums is fixed whatever the thread count.
#pragma omp parallel if (score_work(B, Tn, C) > kMinParallelWork)
  {
    std::vector<T> tile(static_cast<size_t>(kRowBlock) * Tn);
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const HeadView<const T> hv(qkv, b, h, Tn, C, NH);
      const HeadView<T> dhv(dqkv, b, h, Tn, C, NH);
      for (int i0 = 0; i0 < Tn; i0 += kRowBlock) {
        const RowBlock<T> rb{i0, std::min(Tn, i0 + kRowBlock), tile.data(), Tn};
        // dout, out (B,T,C) row (b,i0), head h; stats (B,NH,T,1)
        const size_t row = (static_cast<size_t>(b) * Tn + i0) * C + static_cast<size_t>(h) * D;
        const T* lse = stats + static_cast<size_t>(bh) * Tn + i0;
        block_backward(dhv, dout + row, out + row, static_cast<size_t>(C), lse, rb, hv, scale);
      }
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int, const AttentionSpec&);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int, const AttentionSpec&);
template void attention_backward<float>(float*, const float*, const float*, const float*, const float*, int, int, int,
                                        int, const AttentionSpec&);
template void attention_backward<double>(double*, const double*, const double*, const double*, const double*, int,
                                         int, int, int, const AttentionSpec&);

}  // namespace gpt::cpu
