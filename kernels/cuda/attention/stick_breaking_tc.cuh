// Stick-breaking's forward on tensor cores: sb_forward_kernel
// (stick_breaking.cuh) with q·kᵀ and the weighted sum of values as mma.sync
// tiles, on the layout of tc_forward_kernel (forward_tc.cuh).
// Included once, by kernels/cuda/attention.cu.
//
// A row's weight of key j < i is A_ij = σ(x_ij)·exp(−Σ_{kept j<k<i}
// softplus(x_ik)): a reverse scan over the keys. The walk visits the tiles
// from the last back (KeyWalk from_last), carrying the row's sum over the
// tiles already passed; inside a tile of 32 keys, the row's keys are spread
// over the 4 lanes of its quad (key 8n + 2t + e in n-tile n, lane t, element
// e, mma_layout.h's accumulator map), so the sum over the later keys of the
// tile is, for key (n, t, e): the later n-tiles' totals (two shuffles each),
// the later lanes' part of n-tile n (a suffix scan over the quad), and, for
// e = 0, the lane's own e = 1 key. The float kernel adds the same terms one
// key at a time; the sums differ only in their order. The own key gets
// exp(−Σ every kept key's softplus) at the end, with v_i in float32.
#pragma once
#include "kernels/cuda/attention/forward_tc.cuh"

namespace gpt::cuda {
namespace {

// Σ of v over the lanes t' > t of this lane's quad (all lanes call it): the
// later lane of a pair, then the later pair's total.
__device__ __forceinline__ float quad_later_sum(float v) {
  const int t = mma::thread_in_group(mma::lane_id());
  const float partner = __shfl_xor_sync(0xffffffffu, v, 1);
  const float other_pair = __shfl_xor_sync(0xffffffffu, v + partner, 2);
  return (t % 2 == 0 ? partner : 0.f) + (t < 2 ? other_pair : 0.f);
}

// grid (query tiles, B*NH), block kTcThreads: out and stats {taken, 1, 0, 0}
// as sb_forward_kernel (the diagnostics stay with the float32 kernel).
template <int D>
__global__ void __launch_bounds__(kTcThreads) tc_sb_forward_kernel(Inputs in, float* out, float* stats) {
  GPT_BLOCK_BOUND(kTcThreads);
  using G = TcGeom<D>;
  constexpr int S = G::S;
  GPT_SHARED(float4, qs4, [kRowsPerBlock * S / 8]);
  GPT_SHARED(float4, ks4, [kKeyTile * S / 8]);
  GPT_SHARED(float4, vs4, [kKeyTile * S / 8]);
  uint16_t* qs = reinterpret_cast<uint16_t*>(&qs4[0]);
  uint16_t* ks = reinterpret_cast<uint16_t*>(&ks4[0]);
  uint16_t* vs = reinterpret_cast<uint16_t*>(&vs4[0]);
  const AttentionSpec s = spec_with<Positivity::Sigmoid>(in);
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
  mma::FragA qa[G::KS];
  int q_part = -1;
  auto select_q = [&](int part) {  // q or q̃ of the warp's rows, through shared memory
    if (part == q_part) return;
    q_part = part;
    const int m = mma::ld_address_matrix(l), r = mma::ld_address_row(l);
    __syncthreads();
    load_tile_bf16<D>(qs, (part ? in.qf : in.q) + row_offset(b, 0, T, in.qk_stride, h, D), in.qk_stride, q0,
                      kRowsPerBlock, T);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < G::KS; ++k)
      mma::ldmatrix<4, false>(qa[k].r, qs + (r0 + r + 8 * (m % 2)) * S + 16 * k + 8 * (m / 2));
  };
  mma::FragC o[G::DN];
#pragma unroll
  for (int n = 0; n < G::DN; ++n) o[n] = mma::FragC{{0.f, 0.f, 0.f, 0.f}};
  float taken[2] = {0.f, 0.f};  // Σ softplus(x) of the kept keys passed, per row
  for (KeyWalk<D> w(s, in, b, h, q0, /*from_last=*/true); w.next();) {
    select_q(w.part);
    __syncthreads();
    load_tile_bf16<D>(ks, w.part ? w.kf : w.k, in.qk_stride, w.j0, kKeyTile, T);
    load_tile_bf16<D>(vs, w.v, in.v_stride, w.j0, kKeyTile, T);
    __syncthreads();
    mma::FragC sc[G::NT];
#pragma unroll
    for (int n = 0; n < G::NT; ++n) {
      sc[n] = mma::FragC{{0.f, 0.f, 0.f, 0.f}};
#pragma unroll
      for (int k = 0; k < G::KS; ++k) mma::mma_bf16(sc[n], qa[k], tile_rows_b<D>(ks, n, k), sc[n]);
    }
    // sp = softplus(x) of the kept keys j < i (0 elsewhere); x kept in sc.
    float sp[G::NT][4];
#pragma unroll
    for (int n = 0; n < G::NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int hh = i / 2, j = w.j0 + 8 * n + mma::c_col(l, i);
        const bool valid = row_ok[hh] && j < i0[hh] && pair_in<false>(s, in, w.part, i0[hh], j);
        const float x = logit(s, rc[hh], rc[hh].lf, sc[n].x[i], i0[hh], j);
        sp[n][i] = valid ? attn::sb_taken(x) : 0.f;
        sc[n].x[i] = valid ? x : -INFINITY;  // weight 0 where not kept
      }
    // The later keys' sum for every key of the lane, from the last n-tile back.
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float after = taken[hh];  // the tiles passed and the later n-tiles of this one
#pragma unroll
      for (int n = G::NT - 1; n >= 0; --n) {
        const float pair = sp[n][2 * hh] + sp[n][2 * hh + 1];
        const float later_lanes = quad_later_sum(pair);
        const float base = after + later_lanes;
        const int e0 = 2 * hh, e1 = 2 * hh + 1;
        const float x0 = sc[n].x[e0], x1 = sc[n].x[e1];
        sc[n].x[e1] = x1 == -INFINITY ? 0.f : attn::sb_weight(x1, base);
        sc[n].x[e0] = x0 == -INFINITY ? 0.f : attn::sb_weight(x0, base + sp[n][e1]);
        after += group_sum<kQuad>(pair);
      }
      taken[hh] = after;
    }
    // o += A·v, the weights rounded to bf16 as A fragments.
#pragma unroll
    for (int k = 0; k < G::PK; ++k) add_a_times_tile<D>(o, a_from_c(sc[2 * k], sc[2 * k + 1]), vs, k);
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    if (!row_ok[hh]) continue;
    const float w_own = attn::sb_rest(taken[hh]);
    const float* vown = in.v + row_offset(b, i0[hh], T, in.v_stride, h, D);
    float* orow = out + row_offset(b, i0[hh], T, C, h, D);
#pragma unroll
    for (int n = 0; n < G::DN; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = 8 * n + mma::c_col(l, 2 * hh + e);
        orow[col] = o[n].x[2 * hh + e] + w_own * vown[col];
      }
    if (stats && mma::thread_in_group(l) == 0) {
      float* st = stats + (static_cast<size_t>(bh) * T + i0[hh]) * kStats;
      st[0] = taken[hh];
      st[1] = 1.f;
      st[2] = st[3] = 0.f;
    }
  }
}

}  // namespace
}  // namespace gpt::cuda
