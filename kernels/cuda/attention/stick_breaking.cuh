// Stick-breaking attention's kernels (attn::sb_*): its forward, dq (two
// passes, recording the running sums per key block) and dkdv.
// Included once, by kernels/cuda/attention.cu (one translation unit: the
// kernels and their launches are instantiated together).
#pragma once
#include "kernels/cuda/attention/common.cuh"

namespace gpt::cuda {
namespace {

// ---- stick-breaking (attn::sb_*) ------------------------------------------------------------
// A row walks its keys from its own key back: the near part first, then the
// far part of a distance remapping (whose keys all lie further back), tiles
// and the keys inside a tile in descending order. taken sums softplus(x) of
// the kept keys passed (float, in the CPU kernel's order); the own key gets
// e^(−taken) at the end. A key j's gradient needs the sums over the keys
// after it (taken, and Σ A·g in double): sb_dq_kernel walks the rows and
// records both at the last key of every key block (SbScratch); sb_dkdv_kernel
// starts each row of a query tile there and walks its block's keys (one
// thread per row) before the key threads sum dk_j and dv_j. No atomics; dq
// and dkdv recompute every weight and dx in the same order, bit for bit.

// Stick-breaking's per-row sums, written by sb_dq_kernel for sb_dkdv_kernel.
struct SbScratch {
  double* dp = nullptr;    // (B,NH,T): A_ii·g_i + Σ_{kept j<i} A_ij·g_j (the P of the last key)
  float* taken = nullptr;  // (B,NH,T,blocks): Σ softplus(x_ik), kept k < i after the block's last key
  double* gw = nullptr;    // (B,NH,T,blocks): Σ A_ik·g_k over the same keys
  int blocks = 0;          // key blocks of kKeysPerBlock keys: ceil(T / kKeysPerBlock)
};
constexpr int kSbQueryTile = 16;  // query rows per shared tile of sb_dkdv_kernel

// grid (query tiles, B*NH), block kRowsPerBlock*L threads: out, stats
// {taken, 1, 0, 0} and (diag non-null) the per-head diagnostics as diag_kernel.
template <int D>
__global__ void __launch_bounds__(Geom<D>::kRowThreads)
    sb_forward_kernel(Inputs in, float* out, float* stats, double* diag) {
  GPT_BLOCK_BOUND(Geom<D>::kRowThreads);
  using G = Geom<D>;
  GPT_SHARED(float4, ks, [kKeyTile * G::D4]);
  GPT_SHARED(float4, vs, [kKeyTile * G::D4]);
  const AttentionSpec s = spec_with<Positivity::Sigmoid>(in);
  const int T = in.T, NH = in.NH, C = NH * D;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRowsPerBlock;  // longest rows first
  const int lane = threadIdx.x % G::L, i0 = q0 + threadIdx.x / G::L;
  const bool row_ok = i0 < T;
  const RowConsts rc = row_consts(s, i0 + 1, D, h, b, in);
  Slice<D> q, acc;
  q.load(in.q + row_offset(b, i0, T, in.qk_stride, h, D), lane, row_ok);
  acc.zero();
  const int N = s.trained_context, first_recent = N > 0 ? max(0, i0 + 1 - N) : 0;
  double mass = 0, wlogw = 0, recent = 0, w0 = 0;  // diagnostics (row_diagnostics of the CPU kernel)
  float max_qk = 0.f;                              // and the row's largest |q·k|
  auto note = [&](double w, int j) {
    mass += w;
    if (w > 0) wlogw += w * log(w);
    if (j >= first_recent) recent += w;
    if (j == 0) w0 = w;
  };
  PartQuery<D> pq;
  float taken = 0.f;
  for (KeyWalk<D, kFarTableAt<D>> w(s, in, b, h, q0, /*from_last=*/true); w.next();) {
    const int part = w.part, j0 = w.j0;
    pq.select(q, w, i0, row_ok);
    w.load(ks, vs);
    float x[kKeyTile];
#pragma unroll
    for (int jj = 0; jj < kKeyTile; ++jj) {
      const float qk = q.dot(ks + jj * G::D4, lane);
      x[jj] = logit(s, rc, rc.lf, qk, i0, j0 + jj);
      // The keys j <= i the CPU's tile scores (the own key included).
      if (diag && row_ok && j0 + jj <= i0 && pair_in<kFarTableAt<D>>(s, in, part, i0, j0 + jj)) max_qk = fmaxf(max_qk, fabsf(qk));
    }
#pragma unroll
    for (int jj = kKeyTile - 1; jj >= 0; --jj) {
      const int j = j0 + jj;
      if (!(row_ok && j < i0 && pair_in<kFarTableAt<D>>(s, in, part, i0, j))) continue;
      const float w = attn::sb_weight(x[jj], taken);
      taken += attn::sb_taken(x[jj]);
      acc.axpy(w, vs + jj * G::D4, lane);
      if (diag) note(w, j);
    }
  }
  const float w_own = attn::sb_rest(taken);
  {
    Slice<D> v;
    v.load(in.v + row_offset(b, i0, T, in.v_stride, h, D), lane, row_ok);
    acc.axpy(w_own, v);
  }
  if (diag) {
    if (row_ok) note(w_own, i0);
    const bool lead = row_ok && lane == 0;
    double* d = diag + static_cast<size_t>(h) * kAttentionDiagStats;
    warp_atomic_add(d + 0, lead && mass > 0 ? log(mass) - wlogw / mass : 0.0);
    warp_atomic_add(d + 1, lead && mass > 0 ? w0 / mass : 0.0);
    warp_atomic_add(d + 2, lead && mass > 0 ? recent / mass : 0.0);
    warp_atomic_add(d + 3, lead ? mass : 0.0);
    warp_atomic_add(d + kDiagRows, lead ? 1.0 : 0.0);
    warp_atomic_max(d + kDiagMaxScore, lead ? double(max_qk) * double(rc.f) : 0.0);
  }
  if (!row_ok) return;
  acc.store(out + row_offset(b, i0, T, C, h, D), lane, 1.f);
  if (stats && lane == 0) {
    float* st = stats + (static_cast<size_t>(bh) * T + i0) * kStats;
    st[0] = taken;
    st[1] = 1.f;
    st[2] = st[3] = 0.f;
  }
}

// grid (query tiles, B*NH), block kRowsPerBlock*L threads. Pass 1: Σ A·g of
// the row (dp). Pass 2: dx of every key (attn::sb_grad_x with P = dp minus
// the keys from j on), dq, the learned parameters' sums, and the running sums
// at every key block's last key.
template <int D>
__global__ void __launch_bounds__(Geom<D>::kRowThreads) sb_dq_kernel(Inputs in, Grads gr, SbScratch sb) {
  GPT_BLOCK_BOUND(Geom<D>::kRowThreads);
  using G = Geom<D>;
  GPT_SHARED(float4, ks, [kKeyTile * G::D4]);
  GPT_SHARED(float4, vs, [kKeyTile * G::D4]);
  const AttentionSpec s = spec_with<Positivity::Sigmoid>(in);
  const int T = in.T, NH = in.NH, C = NH * D;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRowsPerBlock;
  const int lane = threadIdx.x % G::L, i0 = q0 + threadIdx.x / G::L, i = i0 + 1;
  const bool row_ok = i0 < T;
  const size_t row = static_cast<size_t>(bh) * T + i0;
  const RowConsts rc = row_consts(s, i, D, h, b, in);
  Slice<D> q, dy, acc;
  q.load(in.q + row_offset(b, i0, T, in.qk_stride, h, D), lane, row_ok);
  dy.load(gr.dout + row_offset(b, i0, T, C, h, D), lane, row_ok);
  float g_own;
  {
    Slice<D> v;
    v.load(in.v + row_offset(b, i0, T, in.v_stride, h, D), lane, row_ok);
    g_own = dy.dot(v);
  }
  const float w_own = attn::sb_rest(row_ok ? gr.stats[row * kStats] : 0.f);
  PartQuery<D> pq;
  // One tile of the walk: σ = q·k and g = dy·v of its keys.
  float qk[kKeyTile], g[kKeyTile];
  auto load_keys = [&](const KeyWalk<D>& w) {
    w.load(ks, vs);
#pragma unroll
    for (int jj = 0; jj < kKeyTile; ++jj) {
      qk[jj] = q.dot(ks + jj * G::D4, lane);
      g[jj] = dy.dot(vs + jj * G::D4, lane);
    }
  };

  double gsum = 0;  // pass 1
  float taken = 0.f;
  for (KeyWalk<D> w(s, in, b, h, q0, /*from_last=*/true); w.next();) {
    const int part = w.part, j0 = w.j0;
    pq.select(q, w, i0, row_ok);
    load_keys(w);
    for (int jj = kKeyTile - 1; jj >= 0; --jj) {
      const int j = j0 + jj;
      if (!(row_ok && j < i0 && pair_in<false>(s, in, part, i0, j))) continue;
      const float x = logit(s, rc, rc.lf, qk[jj], i0, j);
      gsum += static_cast<double>(attn::sb_weight(x, taken) * g[jj]);
      taken += attn::sb_taken(x);
    }
  }
  const double dp = static_cast<double>(w_own) * g_own + gsum;  // as the CPU rows form P

  const bool learned = s.learned_scale(), kerple = s.kerple(), fire = s.fire();
  double sigma_dx = 0, k1 = 0, k2 = 0, after = 0;
  float row_dx = 0.f;
  taken = 0.f;
  acc.zero();
  for (KeyWalk<D> w(s, in, b, h, q0, /*from_last=*/true); w.step();) {  // every tile: the record below
    const int part = w.part, j0 = w.j0;
    // The sums after a key block's last key, recorded in the part that key
    // belongs to for this row (skipped tiles hold no kept key: nothing changes).
    const int last = j0 + kKeyTile - 1;
    if (row_ok && lane == 0 && last % kKeysPerBlock == kKeysPerBlock - 1 &&
        far_pair<false>(s.rope, in, i0, last) == (part == 1)) {
      const size_t at = row * sb.blocks + last / kKeysPerBlock;
      sb.taken[at] = taken;
      sb.gw[at] = after;
    }
    if (!w.seen()) continue;            // uniform
    if (pq.select(q, w, i0, row_ok)) {  // the far part begins: dq_i is complete
      if (row_ok) acc.add_to(gr.dq + row_offset(b, i0, T, gr.dqk_stride, h, D), lane);
      acc.zero();
    }
    load_keys(w);
    for (int jj = kKeyTile - 1; jj >= 0; --jj) {
      const int j = j0 + jj;
      if (!(row_ok && j < i0 && pair_in<false>(s, in, part, i0, j))) continue;
      const float x = logit(s, rc, rc.lf, qk[jj], i0, j);
      const float w = attn::sb_weight(x, taken), wg = w * g[jj];
      const float dx =
          uncap(s, x, attn::sb_grad_x(x, w, g[jj], static_cast<float>(dp - after - static_cast<double>(wg))));
      after += static_cast<double>(wg);
      taken += attn::sb_taken(x);
      if (learned) sigma_dx += static_cast<double>(rc.f * qk[jj] * dx);
      if (kerple) {
        float d1, d2;
        attn::kerple_bias_grad(s.position_bias, rc.r1, rc.r2, static_cast<float>(i0 - j), &d1, &d2);
        k1 += static_cast<double>(dx * d1);
        k2 += static_cast<double>(dx * d2);
      }
      row_dx += dx;
      if (fire && lane == 0) gr.dfire[row * T + (i0 - j)] += dx;
      acc.axpy(rc.lambda * rc.f * si_gain(s, i0, j) * dx, ks + jj * G::D4, lane);
    }
  }
  if (learned)
    warp_atomic_add(gr.dhead + s.param_head(h), row_ok && lane == 0 ? attn::row_scale_grad(s, i, D) * sigma_dx : 0.0);
  if (kerple) {  // through r = softplus(ρ) (and the power's 2σ(ρ₂))
    warp_atomic_add(gr.dkerple + 2 * s.param_head(h), row_ok && lane == 0 ? k1 * rc.dr1 : 0.0);
    warp_atomic_add(gr.dkerple + 2 * s.param_head(h) + 1, row_ok && lane == 0 ? k2 * rc.dr2 : 0.0);
  }
  if (!row_ok) return;
  if (s.forget() && lane == 0) gr.dfcum[row] += row_dx;
  acc.add_to((pq.part ? gr.dq_far : gr.dq) + row_offset(b, i0, T, gr.dqk_stride, h, D), lane);
  if (lane == 0) sb.dp[row] = dp;
}

// grid (key blocks, B*NH), block kKeysPerBlock*L threads: dk_j, dv_j (and
// the far copy's dk̃_j) over the query rows i >= j, kSbQueryTile rows a tile.
// Per tile: the key threads put each pair's logit and dy_i·v_j in shared
// memory; one thread per row walks the block's keys from the last back,
// starting from the sums sb_dq_kernel recorded there, and leaves each pair's
// weight and dx; the key threads then add them up. Each pair is scored with
// the copy its distance picks (near q, k or far q̃, k̃), so a row's walk sees
// every kept key of the block in order, whichever part it belongs to.
template <int D>
__global__ void __launch_bounds__(Geom<D>::kKeyThreads) sb_dkdv_kernel(Inputs in, Grads gr, SbScratch sb) {
  GPT_BLOCK_BOUND(Geom<D>::kKeyThreads);
  using G = Geom<D>;
  constexpr int QT = kSbQueryTile, KB = kKeysPerBlock;
  GPT_SHARED(float4, qs, [QT * G::D4]);
  GPT_SHARED(float4, qfs, [QT * G::D4]);  // the far copy's rows (distance remapping only)
  GPT_SHARED(float4, dys, [QT * G::D4]);
  GPT_SHARED(float, xs, [QT * KB]);  // each pair's logit, then its dx
  GPT_SHARED(float, gs, [QT * KB]);  // each pair's dy_i·v_j, then its weight
  GPT_SHARED(float, lfs, [QT]);
  GPT_SHARED(float, lambdas, [QT]);
  GPT_SHARED(float, tots, [QT]);
  GPT_SHARED(float, takens, [QT]);
  GPT_SHARED(double, dps, [QT]);
  GPT_SHARED(double, gws, [QT]);
  const AttentionSpec s = spec_with<Positivity::Sigmoid>(in);
  const int T = in.T, NH = in.NH, C = NH * D;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int k0 = (gridDim.x - 1 - blockIdx.x) * KB;  // most query rows first
  const int lane = threadIdx.x % G::L, kk = threadIdx.x / G::L, j = k0 + kk;
  const bool key_ok = j < T, far_copy = in.kf != nullptr;
  const RowConsts rc0 = row_consts(s, 1, D, h, b, in);
  const float* qbase = in.q + row_offset(b, 0, T, in.qk_stride, h, D);
  const float* qfbase = far_copy ? in.qf + row_offset(b, 0, T, in.qk_stride, h, D) : qbase;
  const float* dybase = gr.dout + row_offset(b, 0, T, C, h, D);
  Slice<D> k, kf, v, dk, dkf, dv;
  k.load(in.k + row_offset(b, j, T, in.qk_stride, h, D), lane, key_ok);
  kf.load((far_copy ? in.kf : in.k) + row_offset(b, j, T, in.qk_stride, h, D), lane, key_ok);
  v.load(in.v + row_offset(b, j, T, in.v_stride, h, D), lane, key_ok);
  dk.zero();
  dkf.zero();
  dv.zero();
  float col_dx = 0.f;  // Σ_i dx_ij: the forget gate's −dL/dc_j from this key
  const int n_qt = ceil_div(T - k0, QT);
  for (int t = 0; t < n_qt; ++t) {
    const int q0 = k0 + t * QT;
    if (!attn::block_seen(s, q0, q0 + QT - 1, k0, k0 + KB - 1)) continue;  // uniform
    __syncthreads();
    load_tile<D>(qs, qbase, in.qk_stride, q0, QT, T);
    if (far_copy) load_tile<D>(qfs, qfbase, in.qk_stride, q0, QT, T);
    load_tile<D>(dys, dybase, C, q0, QT, T);
    for (int r = threadIdx.x; r < QT; r += blockDim.x) {
      const int i0 = q0 + r;
      const RowConsts rc = row_consts(s, i0 + 1, D, h, b, in);
      lfs[r] = rc.lf;
      lambdas[r] = rc.lambda;
      float tot = 0.f, tk = 0.f;
      double dp = 0, gw = 0;
      if (i0 < T) {
        const size_t row = static_cast<size_t>(bh) * T + i0, at = row * sb.blocks + k0 / KB;
        tot = gr.stats[row * kStats];
        dp = sb.dp[row];
        tk = sb.taken[at];
        gw = sb.gw[at];
      }
      tots[r] = tot;
      takens[r] = tk;
      dps[r] = dp;
      gws[r] = gw;
    }
    __syncthreads();
    for (int r = 0; r < QT; ++r) {
      const int i0 = q0 + r;
      const bool far = far_copy && far_pair<false>(s.rope, in, i0, j);  // the same for a row's lanes
      const float qk = (far ? kf : k).dot((far ? qfs : qs) + r * G::D4, lane), g = v.dot(dys + r * G::D4, lane);
      if (lane == 0) {
        xs[r * KB + kk] = logit(s, rc0, lfs[r], qk, i0, j);
        gs[r * KB + kk] = g;
      }
    }
    __syncthreads();
    if (threadIdx.x < QT) {  // row r walks keys k0 + KB − 1 .. k0
      const int r = threadIdx.x, i0 = q0 + r;
      float taken = takens[r];
      double after = gws[r];
      for (int c = KB - 1; c >= 0; --c) {
        const int jc = k0 + c;
        float w = 0.f, dx = 0.f;
        if (i0 < T && jc == i0) {
          w = attn::sb_rest(tots[r]);
        } else if (i0 < T && jc < i0 && attn::key_kept(s, i0, jc)) {
          const float x = xs[r * KB + c], g = gs[r * KB + c];
          w = attn::sb_weight(x, taken);
          const float wg = w * g;
          dx = uncap(s, x, attn::sb_grad_x(x, w, g, static_cast<float>(dps[r] - after - static_cast<double>(wg))));
          after += static_cast<double>(wg);
          taken += attn::sb_taken(x);
        }
        xs[r * KB + c] = dx;
        gs[r * KB + c] = w;
      }
    }
    __syncthreads();
    for (int r = 0; r < QT; ++r) {
      const int i0 = q0 + r;
      const float w = gs[r * KB + kk], dx = xs[r * KB + kk], ds = lambdas[r] * rc0.f * si_gain(s, i0, j) * dx;
      dv.axpy(w, dys + r * G::D4, lane);
      if (far_copy && far_pair<false>(s.rope, in, i0, j))
        dkf.axpy(ds, qfs + r * G::D4, lane);
      else
        dk.axpy(ds, qs + r * G::D4, lane);
      col_dx += dx;
    }
  }
  if (!key_ok) return;
  if (s.forget() && lane == 0) gr.dfcum[static_cast<size_t>(bh) * T + j] -= col_dx;
  dk.add_to(gr.dk + row_offset(b, j, T, gr.dqk_stride, h, D), lane);
  if (far_copy) dkf.add_to(gr.dk_far + row_offset(b, j, T, gr.dqk_stride, h, D), lane);
  dv.add_to(gr.dv + row_offset(b, j, T, gr.dv_stride, h, D), lane);
}

}  // namespace
}  // namespace gpt::cuda
