// The backward kernels of the attention op: dq (query rows, with D_i and
// S_i) and dkdv (key rows, FlashAttention-2's key-major pass).
// Included once, by kernels/cuda/attention.cu (one translation unit: the
// kernels and their launches are instantiated together).
#pragma once
#include "kernels/cuda/attention/common.cuh"

namespace gpt::cuda {
namespace {

// ---- backward ----------------------------------------------------------------------------
// g_ij = dy_i·v_j, D_i = Σ_j w_ij g_ij = dy_i·y_i, h_ij = dL/da_ij, S_i = Σ_j a_ij h_ij
// (= D_i without sharpening), dx_ij = φ'(x)(h − S)/Z, dσ_ij = λ_i f dx_ij.
struct Grads {
  const float* out;   // (B,T,C)
  const float* dout;  // (B,T,C)
  const float* stats;
  float* dq;  // dq and dk share dqk_stride
  float* dk;
  float* dq_far = nullptr;  // the far copies' gradients (distance remapping), dqk_stride too
  float* dk_far = nullptr;
  float* dv;
  size_t dqk_stride, dv_stride;
  float* row_ds;              // (B,NH,T,2): D_i, S_i, written by dq_kernel for dkdv_kernel
  double* dhead;              // (NH) Σ dλ/ds Σ σ dx, ssmax only
  double* dsink = nullptr;    // (NH) Σ_i dL/dζ_h, normalisation sink only
  double* dkerple = nullptr;  // (2·NH) Σ dx·∂b/∂r·dr/dρ, KERPLE only
  float* dfcum = nullptr;     // (B,NH,T) += dL/dc, the forget gate only
  float* dfire = nullptr;     // (B,NH,T,T) += dL/db of FIRE's table per sequence (dq writes each pair once)
};

// grid (query tiles, B*NH), block kRowsPerBlock*L threads.
template <int D, Positivity PHI>
__global__ void __launch_bounds__(Geom<D>::kRowThreads) dq_kernel(Inputs in, Grads gr) {
  GPT_BLOCK_BOUND(Geom<D>::kRowThreads);
  using G = Geom<D>;
  GPT_SHARED(float4, ks, [kKeyTile * G::D4]);
  GPT_SHARED(float4, vs, [kKeyTile * G::D4]);
  const AttentionSpec s = spec_with<PHI>(in);
  const int T = in.T, NH = in.NH, C = NH * D;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRowsPerBlock;
  const int lane = threadIdx.x % G::L, i0 = q0 + threadIdx.x / G::L, i = i0 + 1;
  const bool row_ok = i0 < T;
  const RowConsts rc = row_consts(s, i, D, h, b, in);
  Slice<D> q, dy, acc;
  q.load(in.q + row_offset(b, i0, T, in.qk_stride, h, D), lane, row_ok);
  dy.load(gr.dout + row_offset(b, i0, T, C, h, D), lane, row_ok);
  float Di;
  {
    Slice<D> y;
    y.load(gr.out + row_offset(b, i0, T, C, h, D), lane, row_ok);
    float p = 0.f;
#pragma unroll
    for (int k = 0; k < G::NC; ++k) p += dot4(dy.c[k], y.c[k]);
    Di = group_sum<G::L>(p);
  }
  float st[kStats] = {0.f, 1.f, 0.f, 0.f};
  if (row_ok)
    for (int k = 0; k < kStats; ++k) st[k] = gr.stats[(static_cast<size_t>(bh) * T + i0) * kStats + k];
  const attn::Row<float> row = attn::row_from_stats(s, i, st);
  PartQuery<D> pq;

  float S = Di;
  if (s.sharpened()) {  // S_i = Σ_j a_ij h_ij needs a pass of its own
    float sum = 0.f;
    for (KeyWalk<D> w(s, in, b, h, q0); w.next();) {
      const int part = w.part, j0 = w.j0;
      pq.select(q, w, i0, row_ok);
      w.load(ks, vs);
#pragma unroll 4
      for (int jj = 0; jj < kKeyTile; ++jj) {
        const float qk = q.dot(ks + jj * G::D4, lane), g = dy.dot(vs + jj * G::D4, lane);
        if (row_ok && row.sharpen && pair_in<false>(s, in, part, i0, j0 + jj)) {
          const float x = logit(s, rc, rc.lf, qk, i0, j0 + jj);
          const float a = row.a(s, x), w = row.w_from_a(a);
          sum += a * attn::grad_a(row, a, w, g, Di);
        }
      }
    }
    if (row.sharpen) S = sum;
  }

  const bool learned = s.learned_scale(), kerple = s.kerple(), fire = s.fire();
  double sigma_dx = 0, k1 = 0, k2 = 0;
  float row_dx = 0.f;  // Σ_j dx_ij: the forget gate's dL/dc_i from this row
  acc.zero();
  for (KeyWalk<D> w(s, in, b, h, q0); w.next();) {
    const int part = w.part, j0 = w.j0;
    if (pq.select(q, w, i0, row_ok)) {  // the far part begins: dq_i is complete
      if (row_ok) acc.add_to(gr.dq + row_offset(b, i0, T, gr.dqk_stride, h, D), lane);
      acc.zero();
    }
    w.load(ks, vs);
#pragma unroll 4
    for (int jj = 0; jj < kKeyTile; ++jj) {
      const float qk = q.dot(ks + jj * G::D4, lane), g = dy.dot(vs + jj * G::D4, lane);
      if (row_ok && pair_in<false>(s, in, part, i0, j0 + jj)) {
        const float x = logit(s, rc, rc.lf, qk, i0, j0 + jj);
        const float a = row.a(s, x), w = row.w_from_a(a);
        const float dx = uncap(s, x, attn::grad_x(s, row, x, attn::grad_a(row, a, w, g, Di), S));
        if (learned) sigma_dx += static_cast<double>(rc.f * qk * dx);
        if (kerple) {
          float d1, d2;
          attn::kerple_bias_grad(s.position_bias, rc.r1, rc.r2, static_cast<float>(i0 - (j0 + jj)), &d1, &d2);
          k1 += static_cast<double>(dx * d1);
          k2 += static_cast<double>(dx * d2);
        }
        row_dx += dx;
        if (fire && lane == 0) gr.dfire[(static_cast<size_t>(bh) * T + i0) * T + (i0 - (j0 + jj))] += dx;
        acc.axpy(rc.lambda * rc.f * si_gain(s, i0, j0 + jj) * dx, ks + jj * G::D4, lane);
      }
    }
  }
  if (learned)
    warp_atomic_add(gr.dhead + s.param_head(h), row_ok && lane == 0 ? attn::row_scale_grad(s, i, D) * sigma_dx : 0.0);
  if (s.learned_sink())
    warp_atomic_add(gr.dsink + s.param_head(h),
                    row_ok && lane == 0 ? static_cast<double>(attn::sink_grad(s, row, rc.zeta, S)) : 0.0);
  if (kerple) {  // through r = softplus(ρ) (and the power's 2σ(ρ₂))
    warp_atomic_add(gr.dkerple + 2 * s.param_head(h), row_ok && lane == 0 ? k1 * rc.dr1 : 0.0);
    warp_atomic_add(gr.dkerple + 2 * s.param_head(h) + 1, row_ok && lane == 0 ? k2 * rc.dr2 : 0.0);
  }
  if (!row_ok) return;
  if (s.forget() && lane == 0) gr.dfcum[static_cast<size_t>(bh) * T + i0] += row_dx;
  acc.add_to((pq.part ? gr.dq_far : gr.dq) + row_offset(b, i0, T, gr.dqk_stride, h, D), lane);
  if (lane == 0) {
    gr.row_ds[(static_cast<size_t>(bh) * T + i0) * 2] = Di;
    gr.row_ds[(static_cast<size_t>(bh) * T + i0) * 2 + 1] = S;
  }
}

// What the key-major kernels (dkdv, tc_dkdv) need of each query row i0 =
// q0 + r of a tile of kQueryTile rows, in shared arrays: its Row (from the
// forward's statistics), λ_i·f, λ_i, and D_i, S_i from the dq kernel. The
// block's threads share the rows; the caller waits at a barrier after.
__device__ __forceinline__ void load_query_tile_rows(const AttentionSpec& s, const Inputs& in, const Grads& gr,
                                                     int D, int b, int h, int q0, attn::Row<float>* rows, float* lfs,
                                                     float* lambdas, float* Dis, float* Ss) {
  const int T = in.T, bh = static_cast<int>(blockIdx.y);
  for (int r = threadIdx.x; r < kQueryTile; r += blockDim.x) {
    const int i0 = q0 + r;
    float st[kStats] = {0.f, 1.f, 0.f, 0.f};
    float Di = 0.f, S = 0.f;
    if (i0 < T) {
      const size_t row = static_cast<size_t>(bh) * T + i0;
      for (int c = 0; c < kStats; ++c) st[c] = gr.stats[row * kStats + c];
      Di = gr.row_ds[row * 2];
      S = gr.row_ds[row * 2 + 1];
    }
    const RowConsts rc = row_consts(s, i0 + 1, D, h, b, in);
    rows[r] = attn::row_from_stats(s, i0 + 1, st);
    lfs[r] = rc.lf;
    lambdas[r] = rc.lambda;
    Dis[r] = Di;
    Ss[r] = S;
  }
}

// grid (key tiles, B*NH), block kKeysPerBlock*L threads: dk_j, dv_j over the
// query rows i >= j, streamed through shared memory with their statistics.
template <int D, Positivity PHI>
__global__ void __launch_bounds__(Geom<D>::kKeyThreads) dkdv_kernel(Inputs in, Grads gr) {
  GPT_BLOCK_BOUND(Geom<D>::kKeyThreads);
  using G = Geom<D>;
  GPT_SHARED(float4, qs, [kQueryTile * G::D4]);
  GPT_SHARED(float4, dys, [kQueryTile * G::D4]);
  // attn::Row has default member initialisers, which __shared__ variables
  // may not have: raw storage (float4: 16-byte aligned).
  static_assert(alignof(attn::Row<float>) <= alignof(float4), "Row storage alignment");
  GPT_SHARED(float4, rows_raw, [(kQueryTile * sizeof(attn::Row<float>) + sizeof(float4) - 1) / sizeof(float4)]);
  GPT_SHARED(float, lfs, [kQueryTile]);
  GPT_SHARED(float, lambdas, [kQueryTile]);
  GPT_SHARED(float, Dis, [kQueryTile]);
  GPT_SHARED(float, Ss, [kQueryTile]);
  attn::Row<float>* rows = reinterpret_cast<attn::Row<float>*>(rows_raw);

  const AttentionSpec s = spec_with<PHI>(in);
  const int T = in.T, NH = in.NH, C = NH * D;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int k0 = (gridDim.x - 1 - blockIdx.x) * kKeysPerBlock;  // most query rows first
  const int lane = threadIdx.x % G::L, j = k0 + threadIdx.x / G::L;
  const bool key_ok = j < T;
  const RowConsts rc0 = row_consts(s, 1, D, h, b, in);  // f, bias, slope (per head)
  const float* qbase = in.q + row_offset(b, 0, T, in.qk_stride, h, D);
  const float* dybase = gr.dout + row_offset(b, 0, T, C, h, D);
  Slice<D> k, v, dk, dv;
  k.load(in.k + row_offset(b, j, T, in.qk_stride, h, D), lane, key_ok);
  v.load(in.v + row_offset(b, j, T, in.v_stride, h, D), lane, key_ok);
  dk.zero();
  dv.zero();
  float col_dx = 0.f;  // Σ_i dx_ij: the forget gate's −dL/dc_j from this key

  // Part 0 the near pairs (q, k), part 1 the far ones (q̃, k̃) of a distance
  // remapping: dk_j, then dk̃_j; dv_j sums over both.
  const float* qfbase = in.qf ? in.qf + row_offset(b, 0, T, in.qk_stride, h, D) : qbase;
  const int q_start = k0 / kQueryTile * kQueryTile;
  const int n_qt = (T - q_start + kQueryTile - 1) / kQueryTile, parts = key_parts(in);
  int cur_part = 0;
  for (int it = 0; it < parts * n_qt; ++it) {
    const int part = it / n_qt, q0 = q_start + (it % n_qt) * kQueryTile;
    if (!part_tile_seen<false>(s, in, part, q0, q0 + kQueryTile - 1, k0, k0 + kKeysPerBlock - 1)) continue;  // uniform
    if (part != cur_part) {  // the far part begins: dk_j is complete, k_j becomes k̃_j
      if (key_ok) dk.add_to(gr.dk + row_offset(b, j, T, gr.dqk_stride, h, D), lane);
      dk.zero();
      k.load(in.kf + row_offset(b, j, T, in.qk_stride, h, D), lane, key_ok);
      cur_part = part;
    }
    __syncthreads();
    load_tile<D>(qs, part ? qfbase : qbase, in.qk_stride, q0, kQueryTile, T);
    load_tile<D>(dys, dybase, C, q0, kQueryTile, T);
    load_query_tile_rows(s, in, gr, D, b, h, q0, rows, lfs, lambdas, Dis, Ss);
    __syncthreads();
#pragma unroll 4
    for (int r = 0; r < kQueryTile; ++r) {
      const int i0 = q0 + r;
      const float qk = k.dot(qs + r * G::D4, lane), g = v.dot(dys + r * G::D4, lane);
      if (key_ok && i0 < T && pair_in<false>(s, in, part, i0, j)) {
        const attn::Row<float> row = rows[r];
        const float x = logit(s, rc0, lfs[r], qk, i0, j);
        const float a = row.a(s, x), w = row.w_from_a(a);
        const float dx = uncap(s, x, attn::grad_x(s, row, x, attn::grad_a(row, a, w, g, Dis[r]), Ss[r]));
        dv.axpy(w, dys + r * G::D4, lane);
        dk.axpy(lambdas[r] * rc0.f * si_gain(s, i0, j) * dx, qs + r * G::D4, lane);
        col_dx += dx;
      }
    }
  }
  if (!key_ok) return;
  if (s.forget() && lane == 0) gr.dfcum[static_cast<size_t>(bh) * T + j] -= col_dx;
  dk.add_to((cur_part ? gr.dk_far : gr.dk) + row_offset(b, j, T, gr.dqk_stride, h, D), lane);
  dv.add_to(gr.dv + row_offset(b, j, T, gr.dv_stride, h, D), lane);
}

}  // namespace
}  // namespace gpt::cuda
