// The forward kernel on tensor cores (bf16 q, k, v and weights; float32
// accumulators, statistics and stage math): the same passes, statistics and
// stage functions as forward_kernel (forward.cuh), with q·kᵀ and the
// weighted sum of values as mma.sync tiles (kernels/cuda/mma.cuh;
// docs/gpu.md, "Tensor-core attention").
// Included once, by kernels/cuda/attention.cu.
//
// A block holds kRowsPerBlock = 64 query rows of one (b, h) as 4 warps of
// 16 rows; each warp keeps its rows of q as A fragments (D/16 of them) and
// its output as D/8 accumulator fragments. Per tile of kKeyTile = 32 keys
// (the KeyWalk of the float kernels, so masks, windows, document starts and
// the two parts of a distance remapping skip and select tiles alike), k and
// v are rounded to bf16 in shared memory; S = q·kᵀ is 4 fragments of 16x8,
// and every element goes through logit(), pair_in() and the attn:: stage
// functions at the (row, key) mma_layout.h gives it. A row's 32 keys of a
// tile are spread over the 4 lanes of its group (PTX's groupID), which
// combine their maxima and sums with two shuffles. The weights of a tile,
// rounded to bf16, are already in the A layout of the next product
// (accumulator n-tiles 2k and 2k+1 are the halves of A's k-step k), and v's
// B fragments come from ldmatrix .trans, so nothing is transposed in memory.
#pragma once
#include "kernels/bf16_round.h"
#include "kernels/cuda/attention/common.cuh"
#include "kernels/cuda/mma.cuh"

namespace gpt::cuda {
namespace {

constexpr int kTcWarps = kRowsPerBlock / 16;  // warps of 16 query rows
constexpr int kTcThreads = 32 * kTcWarps;

template <int D>
struct TcGeom {
  static_assert(D % 16 == 0, "head size must be a multiple of 16");
  static constexpr int S = D + 8;           // bf16 row stride in shared memory: +16 bytes, no bank conflicts
  static constexpr int KS = D / 16;         // k-steps of q·kᵀ
  static constexpr int DN = D / 8;          // n-tiles of the output row
  static constexpr int NT = kKeyTile / 8;   // n-tiles of a key tile
  static constexpr int PK = kKeyTile / 16;  // k-steps of the weighted sum
};

// x as bf16 (round to nearest even), or with lo its remainder
// x − bf16(x) as bf16: x = hi + lo to about 2^-17 relative.
__device__ __forceinline__ uint16_t bf16_part(float x, bool lo) {
  const uint16_t hi = round_to_bf16_bits(x);
  return lo ? round_to_bf16_bits(x - bf16_bits_to_float(hi)) : hi;
}

// Rows t0..t0+n-1 of one head (row t at base + t·stride, D floats) into
// shared memory as bf16 rows of stride S (bf16_part: the rounded values,
// or with lo their remainders); rows past T are zero.
template <int D>
__device__ void load_tile_bf16(uint16_t* dst, const float* base, size_t stride, int t0, int n, int T, bool lo = false) {
  constexpr int D4 = D / 4, S = TcGeom<D>::S;
  for (int e = threadIdx.x; e < n * D4; e += blockDim.x) {
    const int r = e / D4, c = e % D4, t = t0 + r;
    const float4 v = t < T ? reinterpret_cast<const float4*>(base + static_cast<size_t>(t) * stride)[c]
                           : make_float4(0.f, 0.f, 0.f, 0.f);
    uint32_t* d = reinterpret_cast<uint32_t*>(dst + r * S + 4 * c);
    d[0] = mma::pack_bf16x2(bf16_part(v.x, lo), bf16_part(v.y, lo));
    d[1] = mma::pack_bf16x2(bf16_part(v.z, lo), bf16_part(v.w, lo));
  }
}

// Two accumulator fragments (n-tiles 2k and 2k+1 of a 16-row product),
// rounded to bf16, as the A fragment of k-step k of the next product.
__device__ __forceinline__ mma::FragA a_from_c(const mma::FragC& c0, const mma::FragC& c1) {
  mma::FragA a;
  a.r[0] = mma::pack_bf16x2(round_to_bf16_bits(c0.x[0]), round_to_bf16_bits(c0.x[1]));
  a.r[1] = mma::pack_bf16x2(round_to_bf16_bits(c0.x[2]), round_to_bf16_bits(c0.x[3]));
  a.r[2] = mma::pack_bf16x2(round_to_bf16_bits(c1.x[0]), round_to_bf16_bits(c1.x[1]));
  a.r[3] = mma::pack_bf16x2(round_to_bf16_bits(c1.x[2]), round_to_bf16_bits(c1.x[3]));
  return a;
}

// acc[n] += a·B for k-step k of a product whose k dimension is the rows of
// a bf16 tile in shared memory: B is the tile's rows 16k..16k+15, channels
// 8n..8n+7 (ldmatrix .trans), so acc holds a·tile.
template <int D>
__device__ __forceinline__ void add_a_times_tile(mma::FragC (&acc)[D / 8], const mma::FragA& a, const uint16_t* tile,
                                                 int k) {
  const int l = mma::lane_id();
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    mma::FragB bt;
    mma::ldmatrix<2, true>(bt.r, tile + (16 * k + l % 16) * TcGeom<D>::S + 8 * n);
    mma::mma_bf16(acc[n], a, bt, acc[n]);
  }
}

// The B fragment of rows 8n..8n+7 of a bf16 tile, channels 16k..16k+15:
// the tile's rows as the product's n dimension (q·kᵀ with the keys in the
// tile, k·qᵀ with the queries).
template <int D>
__device__ __forceinline__ mma::FragB tile_rows_b(const uint16_t* tile, int n, int k) {
  const int l = mma::lane_id();
  mma::FragB b;
  mma::ldmatrix<2, false>(b.r, tile + (8 * n + l % 8) * TcGeom<D>::S + 16 * k + 8 * ((l / 8) % 2));
  return b;
}

// A fragment row's lanes: the 4 of its group (PTX's groupID), consecutive
// lanes like a row's group in the float kernels (group_sum, group_max).
constexpr int kQuad = 4;

// grid (query tiles, B*NH), block kTcThreads. Writes out, and stats (when
// non-null) as forward_kernel does. Element i of an accumulator fragment
// belongs to the lane's row half i / 2 (rows g and g + 8 of its warp).
// kSplit (cosine scores, whose unit vectors q̂, k̂ are not bf16 values): q
// and k are each split into bf16 hi + lo and q·k is hi·hi + hi·lo + lo·hi,
// three products, so the scores keep about float32's accuracy (the logits
// are scaled by up to ln d·ln i under LSSA, and re-weighting raises them to
// the 15th power).
template <int D, Positivity PHI, bool kSplit>
__global__ void __launch_bounds__(kTcThreads) tc_forward_kernel(Inputs in, float* out, float* stats) {
  GPT_BLOCK_BOUND(kTcThreads);
  using G = TcGeom<D>;
  constexpr int S = G::S;
  GPT_SHARED(float4, qs4, [kRowsPerBlock * S / 8]);
  GPT_SHARED(float4, ks4, [kKeyTile * S / 8]);
  GPT_SHARED(float4, vs4, [kKeyTile * S / 8]);
  GPT_SHARED(float4, kl4, [kSplit ? kKeyTile * S / 8 : 1]);  // k's remainders
  uint16_t* qs = reinterpret_cast<uint16_t*>(&qs4[0]);
  uint16_t* ks = reinterpret_cast<uint16_t*>(&ks4[0]);
  uint16_t* vs = reinterpret_cast<uint16_t*>(&vs4[0]);
  uint16_t* kl = reinterpret_cast<uint16_t*>(&kl4[0]);
  const AttentionSpec s = spec_with<PHI>(in);
  const int T = in.T, NH = in.NH, C = NH * D;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRowsPerBlock;  // longest rows first
  const int l = mma::lane_id(), r0 = 16 * (static_cast<int>(threadIdx.x) / 32);
  int i0[2];
  bool row_ok[2];
  RowConsts rc[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    i0[hh] = q0 + r0 + mma::c_row(l, 2 * hh);
    row_ok[hh] = i0[hh] < T;
    rc[hh] = row_consts(s, i0[hh] + 1, D, h, b, in);
  }

  // q (or the far copy q̃) of the block's rows into the warps' A fragments
  // (with kSplit, q's remainders into ql, through the same shared tile).
  mma::FragA qa[G::KS], ql[kSplit ? G::KS : 1];
  int q_part = -1;
  auto select_q = [&](int part) {
    if (part == q_part) return;
    q_part = part;
    const int m = mma::ld_address_matrix(l), r = mma::ld_address_row(l);
#pragma unroll
    for (int lo = 0; lo < (kSplit ? 2 : 1); ++lo) {
      __syncthreads();
      load_tile_bf16<D>(qs, (part ? in.qf : in.q) + row_offset(b, 0, T, in.qk_stride, h, D), in.qk_stride, q0,
                        kRowsPerBlock, T, lo);
      __syncthreads();
#pragma unroll
      for (int k = 0; k < G::KS; ++k)
        mma::ldmatrix<4, false>((lo ? ql[kSplit ? k : 0] : qa[k]).r,
                                qs + (r0 + r + 8 * (m % 2)) * S + 16 * k + 8 * (m / 2));
    }
  };
  auto load_kv = [&](const KeyWalk<D>& w, bool with_v) {
    __syncthreads();
    load_tile_bf16<D>(ks, w.part ? w.kf : w.k, in.qk_stride, w.j0, kKeyTile, T);
    if (kSplit) load_tile_bf16<D>(kl, w.part ? w.kf : w.k, in.qk_stride, w.j0, kKeyTile, T, true);
    if (with_v) load_tile_bf16<D>(vs, w.v, in.v_stride, w.j0, kKeyTile, T);
    __syncthreads();
  };
  // sc[n] = q·kᵀ for keys j0 + 8n .. j0 + 8n + 7 (kSplit: the small
  // products first, then hi·hi).
  auto scores = [&](mma::FragC(&sc)[G::NT]) {
#pragma unroll
    for (int n = 0; n < G::NT; ++n) {
      sc[n] = mma::FragC{{0.f, 0.f, 0.f, 0.f}};
#pragma unroll
      for (int k = 0; k < G::KS; ++k) {
        const int at = (8 * n + l % 8) * S + 16 * k + 8 * ((l / 8) % 2);
        mma::FragB kb;
        mma::ldmatrix<2, false>(kb.r, ks + at);
        if constexpr (kSplit) {
          mma::FragB kbl;
          mma::ldmatrix<2, false>(kbl.r, kl + at);
          mma::mma_bf16(sc[n], qa[k], kbl, sc[n]);
          mma::mma_bf16(sc[n], ql[k], kb, sc[n]);
        }
        mma::mma_bf16(sc[n], qa[k], kb, sc[n]);
      }
    }
  };
  // o += p·v for the tile's weights p (accumulator layout, rounded to bf16).
  auto add_pv = [&](const float(&p)[G::NT][4], mma::FragC(&o)[G::DN]) {
#pragma unroll
    for (int k = 0; k < G::PK; ++k) {
      mma::FragA pa;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float* lo = p[2 * k + half];
        pa.r[2 * half] = mma::pack_bf16x2(round_to_bf16_bits(lo[0]), round_to_bf16_bits(lo[1]));
        pa.r[2 * half + 1] = mma::pack_bf16x2(round_to_bf16_bits(lo[2]), round_to_bf16_bits(lo[3]));
      }
#pragma unroll
      for (int n = 0; n < G::DN; ++n) {
        mma::FragB vb;
        mma::ldmatrix<2, true>(vb.r, vs + (16 * k + l % 16) * S + 8 * n);
        mma::mma_bf16(o[n], pa, vb, o[n]);
      }
    }
  };
  auto key_of = [&](const KeyWalk<D>& w, int n, int i) { return w.j0 + 8 * n + mma::c_col(l, i); };

  mma::FragC o[G::DN];
#pragma unroll
  for (int n = 0; n < G::DN; ++n) o[n] = mma::FragC{{0.f, 0.f, 0.f, 0.f}};
  const bool shifted = attn::shifted(s), two_pass = s.sharpened();
  // Pass 1, as forward_kernel: shift, Z and max u per row (this lane's
  // share of the row's keys; the quad combines them), and without
  // sharpening the weighted sum.
  float m[2], z[2] = {0.f, 0.f}, umax[2] = {0.f, 0.f}, c[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    m[hh] = shifted ? static_cast<float>(attn::shift_floor(s, rc[hh].zeta)) : 0.f;
    c[hh] = attn::zero_level(s, m[hh]);
  }
  for (KeyWalk<D> w(s, in, b, h, q0); w.next();) {
    select_q(w.part);
    load_kv(w, !two_pass);
    mma::FragC sc[G::NT];
    scores(sc);
    float x[G::NT][4];
    float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < G::NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int hh = i / 2, j = key_of(w, n, i);
        x[n][i] = logit(s, rc[hh], rc[hh].lf, sc[n].x[i], i0[hh], j);
        if (row_ok[hh] && pair_in<false>(s, in, w.part, i0[hh], j)) tmax[hh] = fmaxf(tmax[hh], x[n][i]);
      }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      tmax[hh] = group_max<kQuad>(tmax[hh]);
      if (shifted && tmax[hh] > m[hh]) {  // online softmax: rescale what was summed under the old maximum
        const float corr = expf(m[hh] - tmax[hh]);
        z[hh] *= corr;
        umax[hh] *= corr;
        if (!two_pass) {
#pragma unroll
          for (int n = 0; n < G::DN; ++n) o[n].x[2 * hh] *= corr, o[n].x[2 * hh + 1] *= corr;
        }
        m[hh] = tmax[hh];
        c[hh] = attn::zero_level(s, m[hh]);
      }
    }
#pragma unroll
    for (int n = 0; n < G::NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int hh = i / 2;
        const bool valid = row_ok[hh] && pair_in<false>(s, in, w.part, i0[hh], key_of(w, n, i));
        const float u = valid ? attn::positivity(PHI, x[n][i] - m[hh]) : 0.f;
        const float num = valid && u - c[hh] > 0.f ? u - c[hh] : 0.f;  // = u where c = 0
        z[hh] += valid ? fabsf(u - c[hh]) : 0.f;
        umax[hh] = fmaxf(umax[hh], num);
        x[n][i] = num;
      }
    if (!two_pass) add_pv(x, o);
  }
  float st[2][kStats], y_scale[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    z[hh] = group_sum<kQuad>(z[hh]) + attn::norm_extra(s, shifted ? m[hh] : 0.f, rc[hh].zeta);
    umax[hh] = group_max<kQuad>(umax[hh]);
    st[hh][0] = shifted ? m[hh] : 0.f;
    st[hh][1] = z[hh];
    st[hh][2] = umax[hh] * attn::inv_norm(s, z[hh]);
    st[hh][3] = 0.f;
    y_scale[hh] = attn::inv_norm(s, z[hh]);
  }

  if (two_pass) {
    // Pass 2: w = r/Σr for a sharpened row, w = a for a row where no t is
    // positive (forward_kernel's pass 2).
    const attn::Row<float> row[2] = {attn::row_from_stats(s, i0[0] + 1, st[0]),
                                     attn::row_from_stats(s, i0[1] + 1, st[1])};
    float R[2] = {0.f, 0.f};
    for (KeyWalk<D> w(s, in, b, h, q0); w.next();) {
      select_q(w.part);
      load_kv(w, true);
      mma::FragC sc[G::NT];
      scores(sc);
      float e[G::NT][4];
#pragma unroll
      for (int n = 0; n < G::NT; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int hh = i / 2, j = key_of(w, n, i);
          const float x = logit(s, rc[hh], rc[hh].lf, sc[n].x[i], i0[hh], j);
          float v = 0.f;
          if (row_ok[hh] && pair_in<false>(s, in, w.part, i0[hh], j)) {
            const float a = row[hh].a(s, x);
            v = row[hh].sharpen
                    ? attn::sharpen_value(attn::sharpen_t(row[hh].i, a, row[hh].offset), row[hh].t_max, row[hh].p)
                    : a;
          }
          R[hh] += v;
          e[n][i] = v;
        }
      add_pv(e, o);
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      R[hh] = group_sum<kQuad>(R[hh]);
      st[hh][3] = row[hh].sharpen ? R[hh] : 0.f;
      y_scale[hh] = row[hh].sharpen ? 1.f / R[hh] : 1.f;  // R >= 1: the largest t contributes 1
    }
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    if (!row_ok[hh]) continue;
    float* orow = out + row_offset(b, i0[hh], T, C, h, D);
#pragma unroll
    for (int n = 0; n < G::DN; ++n)
#pragma unroll
      for (int k = 0; k < 2; ++k) orow[8 * n + mma::c_col(l, 2 * hh + k)] = o[n].x[2 * hh + k] * y_scale[hh];
    if (stats && mma::thread_in_group(l) == 0)
      for (int k = 0; k < kStats; ++k) stats[(static_cast<size_t>(bh) * T + i0[hh]) * kStats + k] = st[hh][k];
  }
}

}  // namespace
}  // namespace gpt::cuda
