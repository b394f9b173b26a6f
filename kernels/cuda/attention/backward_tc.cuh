// The backward kernels on tensor cores (bf16 operands, float32 accumulators,
// stage math and row sums in float32): dq_kernel and dkdv_kernel of
// backward.cuh with the five products of a tile — q·kᵀ and dy·vᵀ to form the
// scores and g, then ds·k, wᵀ·dy and dsᵀ·q for the gradients — as mma.sync
// tiles (kernels/cuda/mma.cuh; docs/gpu.md, "Tensor-core attention").
// Included once, by kernels/cuda/attention.cu.
//
// tc_dq_kernel: a block holds kRowsPerBlock = 64 query rows of one (b, h) as
// 4 warps of 16 rows, as tc_forward_kernel does; q (and, with kSplit, its
// remainders) as A fragments in registers, dy rounded to bf16 in shared
// memory. Per tile of kKeyTile = 32 keys (the same KeyWalk), S = q·kᵀ and
// G = dy·vᵀ are formed one n-tile of 8 keys at a time (two accumulator
// fragments live beside the element math); every element goes through
// logit(), pair_in() and the attn:: backward of the float kernel (grad_a,
// grad_x, uncap) at the (row, key) mma_layout.h gives it, and the element's
// ds = λ_i·f·a_t·dx, rounded to bf16, is the A operand of dq += ds·k, with k
// from ldmatrix .trans. Under re-weighting a first pass forms S_i as the
// float kernel does.
//
// tc_dkdv_kernel: a block holds kKeysPerBlock = 64 keys as 4 warps of 16;
// k (and its remainders) and v as A fragments in registers; per tile of
// kQueryTile = 32 query rows, q, dy and the rows' statistics in shared memory
// (as dkdv_kernel); Sᵀ = k·qᵀ and Gᵀ = v·dyᵀ, the element math, then
// dv += wᵀ·dy and dk += dsᵀ·q with dy and q from ldmatrix .trans.
//
// Where it differs from the float kernels: q, k, v, dy are rounded to bf16
// (with bf16 storage they are bf16 values already), and so are w and ds
// before the products that sum them; with cosine scores q̂·k̂ is split into
// three products as in the forward, so that the recomputed logits match the
// forward's statistics. Instantiated at head size 64 (kTcBackwardAt), with
// cosine scores for exp and softplus only (kTcSplitBackwardFor).
#pragma once
#include "kernels/cuda/attention/backward.cuh"
#include "kernels/cuda/attention/forward_tc.cuh"

namespace gpt::cuda {
namespace {

// The head sizes with tensor-core backward kernels (attention.cu falls back
// to the float32 kernels elsewhere; tensor_core_backward_fallback says why).
template <int D>
inline constexpr bool kTcBackwardAt = D == 64;
// The positivities with split-score (cosine) instantiations: those of the
// cosine-score presets (cosine: exp; lssa, lssar: softplus). Cosine scores
// with sigmoid or relu run the float32 kernels (build time).
template <Positivity PHI>
inline constexpr bool kTcSplitBackwardFor = PHI == Positivity::Exp || PHI == Positivity::Softplus;

// The A fragments of 16 rows r0..r0+15 of one head (row t at base + t·stride,
// D floats, 8-byte aligned; rows past T zero), straight from global memory:
// each register holds a row's two neighbouring channels (mma_layout.h), read
// as one float2 and rounded to bf16 (lo: the remainders, bf16_part).
template <int D>
__device__ void load_a_rows(mma::FragA (&a)[D / 16], const float* base, size_t stride, int r0, int T,
                            bool lo = false) {
  const int l = mma::lane_id();
#pragma unroll
  for (int k = 0; k < D / 16; ++k)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int t = r0 + mma::a_row(l, 2 * j), col = 16 * k + mma::a_col(l, 2 * j);
      const float2 v = t < T ? *reinterpret_cast<const float2*>(base + static_cast<size_t>(t) * stride + col)
                             : make_float2(0.f, 0.f);
      a[k].r[j] = mma::pack_bf16x2(bf16_part(v.x, lo), bf16_part(v.y, lo));
    }
}

// rows (their first channel: row_g for the lane's rows g and g + 8) += acc,
// for the rows that are ok.
template <int D>
__device__ __forceinline__ void add_c_rows(const mma::FragC (&acc)[D / 8], float* row_g, float* row_g8, bool ok_g,
                                           bool ok_g8) {
  const int l = mma::lane_id();
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    if (!(hh ? ok_g8 : ok_g)) continue;
    float* row = hh ? row_g8 : row_g;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) row[8 * n + mma::c_col(l, 2 * hh + e)] += acc[n].x[2 * hh + e];
  }
}

// grid (query tiles, B*NH), block kTcThreads: dq (or the far copy's dq̃) of
// the block's rows, D_i and S_i for tc_dkdv_kernel, and the per-head and
// per-position gradients dq_kernel forms (ssmax scale, sink, KERPLE, forget
// gate, FIRE), from the same sums.
template <int D, Positivity PHI, bool kSplit>
__global__ void __launch_bounds__(kTcThreads) tc_dq_kernel(Inputs in, Grads gr) {
  GPT_BLOCK_BOUND(kTcThreads);
  using G = TcGeom<D>;
  constexpr int S = G::S;
  GPT_SHARED(float4, dys4, [kRowsPerBlock * S / 8]);
  GPT_SHARED(float4, ks4, [kKeyTile * S / 8]);
  GPT_SHARED(float4, vs4, [kKeyTile * S / 8]);
  GPT_SHARED(float4, kl4, [kSplit ? kKeyTile * S / 8 : 1]);  // k's remainders
  uint16_t* dys = reinterpret_cast<uint16_t*>(&dys4[0]);
  uint16_t* ks = reinterpret_cast<uint16_t*>(&ks4[0]);
  uint16_t* vs = reinterpret_cast<uint16_t*>(&vs4[0]);
  uint16_t* kl = reinterpret_cast<uint16_t*>(&kl4[0]);
  const AttentionSpec s = spec_with<PHI>(in);
  const int T = in.T, NH = in.NH, C = NH * D;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRowsPerBlock;  // longest rows first
  const int l = mma::lane_id(), r0 = 16 * (static_cast<int>(threadIdx.x) / 32), quad = mma::thread_in_group(l);
  int i0[2];
  bool row_ok[2];
  RowConsts rc[2];
  float Di[2];
  attn::Row<float> row[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    i0[hh] = q0 + r0 + mma::c_row(l, 2 * hh);
    row_ok[hh] = i0[hh] < T;
    rc[hh] = row_consts(s, i0[hh] + 1, D, h, b, in);
    // D_i = dy_i·y_i: the quad's lanes a quarter of the channels each.
    float p = 0.f;
    if (row_ok[hh]) {
      const float4* y4 = reinterpret_cast<const float4*>(gr.out + row_offset(b, i0[hh], T, C, h, D));
      const float4* d4 = reinterpret_cast<const float4*>(gr.dout + row_offset(b, i0[hh], T, C, h, D));
      for (int c = quad; c < D / 4; c += kQuad) p += dot4(d4[c], y4[c]);
    }
    Di[hh] = group_sum<kQuad>(p);
    float st[kStats] = {0.f, 1.f, 0.f, 0.f};
    if (row_ok[hh])
      for (int k = 0; k < kStats; ++k) st[k] = gr.stats[(static_cast<size_t>(bh) * T + i0[hh]) * kStats + k];
    row[hh] = attn::row_from_stats(s, i0[hh] + 1, st);
  }
  // dy of the block's rows, once (the first tile's barrier orders it).
  load_tile_bf16<D>(dys, gr.dout + row_offset(b, 0, T, C, h, D), C, q0, kRowsPerBlock, T);

  mma::FragA qa[G::KS], ql[kSplit ? G::KS : 1];
  int q_part = -1;
  // q (part 0) or q̃ (part 1) of the warp's rows into qa (and ql); true when
  // that starts the far part.
  auto select_q = [&](int part) {
    if (part == q_part) return false;
    const bool far_begins = q_part == 0;
    q_part = part;
    const float* base = (part ? in.qf : in.q) + row_offset(b, 0, T, in.qk_stride, h, D);
    load_a_rows<D>(qa, base, in.qk_stride, q0 + r0, T);
    if constexpr (kSplit) load_a_rows<D>(ql, base, in.qk_stride, q0 + r0, T, true);
    return far_begins;
  };
  auto load_kv = [&](const KeyWalk<D>& w) {
    __syncthreads();
    load_tile_bf16<D>(ks, w.part ? w.kf : w.k, in.qk_stride, w.j0, kKeyTile, T);
    if (kSplit) load_tile_bf16<D>(kl, w.part ? w.kf : w.k, in.qk_stride, w.j0, kKeyTile, T, true);
    load_tile_bf16<D>(vs, w.v, in.v_stride, w.j0, kKeyTile, T);
    __syncthreads();
  };
  // sc = q·kᵀ (kSplit: the small products first, then hi·hi) and gc = dy·vᵀ
  // for the tile's keys j0 + 8n .. j0 + 8n + 7: one n-tile at a time, so
  // that only its two fragments are live beside the element math (dy's A
  // fragments are read again from shared memory for each).
  auto products = [&](int n, mma::FragC& sc, mma::FragC& gc) {
    sc = gc = mma::FragC{{0.f, 0.f, 0.f, 0.f}};
    const int m = mma::ld_address_matrix(l), r = mma::ld_address_row(l);
#pragma unroll
    for (int k = 0; k < G::KS; ++k) {
      mma::FragA da;
      mma::ldmatrix<4, false>(da.r, dys + (r0 + r + 8 * (m % 2)) * S + 16 * k + 8 * (m / 2));
      const mma::FragB kb = tile_rows_b<D>(ks, n, k);
      if constexpr (kSplit) {
        mma::mma_bf16(sc, qa[k], tile_rows_b<D>(kl, n, k), sc);
        mma::mma_bf16(sc, ql[k], kb, sc);
      }
      mma::mma_bf16(sc, qa[k], kb, sc);
      mma::mma_bf16(gc, da, tile_rows_b<D>(vs, n, k), gc);
    }
  };
  auto key_of = [&](const KeyWalk<D>& w, int n, int i) { return w.j0 + 8 * n + mma::c_col(l, i); };

  // S_i = Σ_j a_ij h_ij under sharpening (a pass of its own), else D_i.
  float Sr[2] = {Di[0], Di[1]};
  if (s.sharpened()) {
    float sum[2] = {0.f, 0.f};
    for (KeyWalk<D> w(s, in, b, h, q0); w.next();) {
      select_q(w.part);
      load_kv(w);
#pragma unroll
      for (int n = 0; n < G::NT; ++n) {
        mma::FragC sc, gc;
        products(n, sc, gc);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int hh = i / 2, j = key_of(w, n, i);
          if (row_ok[hh] && row[hh].sharpen && pair_in<false>(s, in, w.part, i0[hh], j)) {
            const float x = logit(s, rc[hh], rc[hh].lf, sc.x[i], i0[hh], j);
            const float a = row[hh].a(s, x), wv = row[hh].w_from_a(a);
            sum[hh] += a * attn::grad_a(row[hh], a, wv, gc.x[i], Di[hh]);
          }
        }
      }
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      sum[hh] = group_sum<kQuad>(sum[hh]);
      if (row[hh].sharpen) Sr[hh] = sum[hh];
    }
  }

  const bool learned = s.learned_scale(), kerple = s.kerple(), fire = s.fire();
  double sigma_dx[2] = {0, 0}, k1 = 0, k2 = 0;
  float row_dx[2] = {0.f, 0.f};  // Σ_j dx_ij: the forget gate's dL/dc_i from this row
  mma::FragC acc[G::DN];
#pragma unroll
  for (int n = 0; n < G::DN; ++n) acc[n] = mma::FragC{{0.f, 0.f, 0.f, 0.f}};
  auto dq_rows = [&](float* base, int hh) { return base + row_offset(b, i0[hh], T, gr.dqk_stride, h, D); };
  for (KeyWalk<D> w(s, in, b, h, q0); w.next();) {
    if (select_q(w.part)) {  // the far part begins: dq_i is complete
      add_c_rows<D>(acc, dq_rows(gr.dq, 0), dq_rows(gr.dq, 1), row_ok[0], row_ok[1]);
#pragma unroll
      for (int n = 0; n < G::DN; ++n) acc[n] = mma::FragC{{0.f, 0.f, 0.f, 0.f}};
    }
    load_kv(w);
    mma::FragC dsf[G::NT];  // ds of the tile's keys, in the accumulator layout
#pragma unroll
    for (int n = 0; n < G::NT; ++n) {
      mma::FragC sc, gc;
      products(n, sc, gc);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int hh = i / 2, j = key_of(w, n, i);
        float ds = 0.f;
        if (row_ok[hh] && pair_in<false>(s, in, w.part, i0[hh], j)) {
          const float qk = sc.x[i];
          const float x = logit(s, rc[hh], rc[hh].lf, qk, i0[hh], j);
          const float a = row[hh].a(s, x), wv = row[hh].w_from_a(a);
          const float dx =
              uncap(s, x, attn::grad_x(s, row[hh], x, attn::grad_a(row[hh], a, wv, gc.x[i], Di[hh]), Sr[hh]));
          if (learned) sigma_dx[hh] += static_cast<double>(rc[hh].f * qk * dx);
          if (kerple) {
            float d1, d2;
            attn::kerple_bias_grad(s.position_bias, rc[hh].r1, rc[hh].r2, static_cast<float>(i0[hh] - j), &d1, &d2);
            k1 += static_cast<double>(dx * d1);
            k2 += static_cast<double>(dx * d2);
          }
          row_dx[hh] += dx;
          if (fire) gr.dfire[(static_cast<size_t>(bh) * T + i0[hh]) * T + (i0[hh] - j)] += dx;
          ds = rc[hh].lambda * rc[hh].f * si_gain(s, i0[hh], j) * dx;
        }
        dsf[n].x[i] = ds;
      }
    }
#pragma unroll
    for (int k = 0; k < G::PK; ++k) add_a_times_tile<D>(acc, a_from_c(dsf[2 * k], dsf[2 * k + 1]), ks, k);
  }
  if (learned) {
    double v = 0;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
      if (row_ok[hh]) v += attn::row_scale_grad(s, i0[hh] + 1, D) * sigma_dx[hh];
    warp_atomic_add(gr.dhead + s.param_head(h), v);
  }
  if (s.learned_sink()) {
    double v = 0;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
      if (row_ok[hh] && quad == 0) v += static_cast<double>(attn::sink_grad(s, row[hh], rc[hh].zeta, Sr[hh]));
    warp_atomic_add(gr.dsink + s.param_head(h), v);
  }
  if (kerple) {  // through r = softplus(ρ) (and the power's 2σ(ρ₂))
    warp_atomic_add(gr.dkerple + 2 * s.param_head(h), k1 * rc[0].dr1);
    warp_atomic_add(gr.dkerple + 2 * s.param_head(h) + 1, k2 * rc[0].dr2);
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) row_dx[hh] = group_sum<kQuad>(row_dx[hh]);
  float* dq = q_part == 1 ? gr.dq_far : gr.dq;
  add_c_rows<D>(acc, dq_rows(dq, 0), dq_rows(dq, 1), row_ok[0], row_ok[1]);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    if (!row_ok[hh] || quad != 0) continue;
    const size_t at = static_cast<size_t>(bh) * T + i0[hh];
    if (s.forget()) gr.dfcum[at] += row_dx[hh];
    gr.row_ds[at * 2] = Di[hh];
    gr.row_ds[at * 2 + 1] = Sr[hh];
  }
}

// grid (key tiles, B*NH), block kTcThreads: dk_j (or dk̃_j) and dv_j of the
// block's keys over the query rows i >= j, and the forget gate's −dL/dc_j.
template <int D, Positivity PHI, bool kSplit>
__global__ void __launch_bounds__(kTcThreads) tc_dkdv_kernel(Inputs in, Grads gr) {
  GPT_BLOCK_BOUND(kTcThreads);
  static_assert(kKeysPerBlock == 16 * kTcWarps, "a warp holds 16 keys");
  static_assert(kQueryTile % 16 == 0, "query tiles of whole k-steps");
  using G = TcGeom<D>;
  constexpr int S = G::S, QN = kQueryTile / 8, QK = kQueryTile / 16;
  GPT_SHARED(float4, qs4, [kQueryTile * S / 8]);
  GPT_SHARED(float4, ql4, [kSplit ? kQueryTile * S / 8 : 1]);  // q's remainders
  GPT_SHARED(float4, dys4, [kQueryTile * S / 8]);
  static_assert(alignof(attn::Row<float>) <= alignof(float4), "Row storage alignment");
  GPT_SHARED(float4, rows_raw, [(kQueryTile * sizeof(attn::Row<float>) + sizeof(float4) - 1) / sizeof(float4)]);
  GPT_SHARED(float, lfs, [kQueryTile]);
  GPT_SHARED(float, lambdas, [kQueryTile]);
  GPT_SHARED(float, Dis, [kQueryTile]);
  GPT_SHARED(float, Ss, [kQueryTile]);
  attn::Row<float>* rows = reinterpret_cast<attn::Row<float>*>(rows_raw);
  uint16_t* qs = reinterpret_cast<uint16_t*>(&qs4[0]);
  uint16_t* qls = reinterpret_cast<uint16_t*>(&ql4[0]);
  uint16_t* dys = reinterpret_cast<uint16_t*>(&dys4[0]);

  const AttentionSpec s = spec_with<PHI>(in);
  const int T = in.T, NH = in.NH, C = NH * D;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int k0 = (gridDim.x - 1 - blockIdx.x) * kKeysPerBlock;  // most query rows first
  const int l = mma::lane_id(), r0 = 16 * (static_cast<int>(threadIdx.x) / 32), quad = mma::thread_in_group(l);
  int j[2];
  bool key_ok[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    j[hh] = k0 + r0 + mma::c_row(l, 2 * hh);
    key_ok[hh] = j[hh] < T;
  }
  const RowConsts rc0 = row_consts(s, 1, D, h, b, in);  // f, bias, slope (per head)
  const float* qbase = in.q + row_offset(b, 0, T, in.qk_stride, h, D);
  const float* qfbase = in.qf ? in.qf + row_offset(b, 0, T, in.qk_stride, h, D) : qbase;
  const float* dybase = gr.dout + row_offset(b, 0, T, C, h, D);
  mma::FragA ka[G::KS], kla[kSplit ? G::KS : 1], va[G::KS];
  auto load_k = [&](int part) {
    const float* base = (part ? in.kf : in.k) + row_offset(b, 0, T, in.qk_stride, h, D);
    load_a_rows<D>(ka, base, in.qk_stride, k0 + r0, T);
    if constexpr (kSplit) load_a_rows<D>(kla, base, in.qk_stride, k0 + r0, T, true);
  };
  load_k(0);
  load_a_rows<D>(va, in.v + row_offset(b, 0, T, in.v_stride, h, D), in.v_stride, k0 + r0, T);
  mma::FragC dk[G::DN], dv[G::DN];
#pragma unroll
  for (int n = 0; n < G::DN; ++n) dk[n] = dv[n] = mma::FragC{{0.f, 0.f, 0.f, 0.f}};
  float col_dx[2] = {0.f, 0.f};  // Σ_i dx_ij: the forget gate's −dL/dc_j from this key
  auto dk_rows = [&](float* base, int hh) { return base + row_offset(b, j[hh], T, gr.dqk_stride, h, D); };

  // Part 0 the near pairs (q, k), part 1 the far ones (q̃, k̃) of a distance
  // remapping: dk_j, then dk̃_j; dv_j sums over both.
  const int q_start = k0 / kQueryTile * kQueryTile;
  const int n_qt = (T - q_start + kQueryTile - 1) / kQueryTile, parts = key_parts(in);
  int cur_part = 0;
  for (int it = 0; it < parts * n_qt; ++it) {
    const int part = it / n_qt, q0 = q_start + (it % n_qt) * kQueryTile;
    if (!part_tile_seen<false>(s, in, part, q0, q0 + kQueryTile - 1, k0, k0 + kKeysPerBlock - 1)) continue;  // uniform
    if (part != cur_part) {  // the far part begins: dk_j is complete, k_j becomes k̃_j
      add_c_rows<D>(dk, dk_rows(gr.dk, 0), dk_rows(gr.dk, 1), key_ok[0], key_ok[1]);
#pragma unroll
      for (int n = 0; n < G::DN; ++n) dk[n] = mma::FragC{{0.f, 0.f, 0.f, 0.f}};
      load_k(part);
      cur_part = part;
    }
    __syncthreads();
    load_tile_bf16<D>(qs, part ? qfbase : qbase, in.qk_stride, q0, kQueryTile, T);
    if (kSplit) load_tile_bf16<D>(qls, part ? qfbase : qbase, in.qk_stride, q0, kQueryTile, T, true);
    load_tile_bf16<D>(dys, dybase, C, q0, kQueryTile, T);
    load_query_tile_rows(s, in, gr, D, b, h, q0, rows, lfs, lambdas, Dis, Ss);
    __syncthreads();
    // sc = k·qᵀ, gc = v·dyᵀ for the tile's rows q0 + 8n .. q0 + 8n + 7.
    mma::FragC sc[QN], gc[QN];
#pragma unroll
    for (int n = 0; n < QN; ++n) sc[n] = gc[n] = mma::FragC{{0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int k = 0; k < G::KS; ++k)
#pragma unroll
      for (int n = 0; n < QN; ++n) {
        const mma::FragB qb = tile_rows_b<D>(qs, n, k);
        if constexpr (kSplit) {
          mma::mma_bf16(sc[n], ka[k], tile_rows_b<D>(qls, n, k), sc[n]);
          mma::mma_bf16(sc[n], kla[k], qb, sc[n]);
        }
        mma::mma_bf16(sc[n], ka[k], qb, sc[n]);
        mma::mma_bf16(gc[n], va[k], tile_rows_b<D>(dys, n, k), gc[n]);
      }
#pragma unroll
    for (int n = 0; n < QN; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int hh = i / 2, r = 8 * n + mma::c_col(l, i), i0 = q0 + r;
        float wv = 0.f, ds = 0.f;
        if (key_ok[hh] && i0 < T && pair_in<false>(s, in, part, i0, j[hh])) {
          const attn::Row<float> row = rows[r];
          const float x = logit(s, rc0, lfs[r], sc[n].x[i], i0, j[hh]);
          const float a = row.a(s, x);
          wv = row.w_from_a(a);
          const float dx = uncap(s, x, attn::grad_x(s, row, x, attn::grad_a(row, a, wv, gc[n].x[i], Dis[r]), Ss[r]));
          ds = lambdas[r] * rc0.f * si_gain(s, i0, j[hh]) * dx;
          col_dx[hh] += dx;
        }
        sc[n].x[i] = ds;
        gc[n].x[i] = wv;
      }
#pragma unroll
    for (int k = 0; k < QK; ++k) {
      add_a_times_tile<D>(dv, a_from_c(gc[2 * k], gc[2 * k + 1]), dys, k);
      add_a_times_tile<D>(dk, a_from_c(sc[2 * k], sc[2 * k + 1]), qs, k);
    }
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) col_dx[hh] = group_sum<kQuad>(col_dx[hh]);
  float* dkb = cur_part ? gr.dk_far : gr.dk;
  add_c_rows<D>(dk, dk_rows(dkb, 0), dk_rows(dkb, 1), key_ok[0], key_ok[1]);
  add_c_rows<D>(dv, gr.dv + row_offset(b, j[0], T, gr.dv_stride, h, D), gr.dv + row_offset(b, j[1], T, gr.dv_stride, h, D),
                key_ok[0], key_ok[1]);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
    if (s.forget() && key_ok[hh] && quad == 0) gr.dfcum[static_cast<size_t>(bh) * T + j[hh]] -= col_dx[hh];
}

}  // namespace
}  // namespace gpt::cuda
