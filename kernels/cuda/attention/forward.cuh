// The forward kernel (one pass, or two under sharpening) and the
// diagnostics kernel of the attention op.
// Included once, by kernels/cuda/attention.cu (one translation unit: the
// kernels and their launches are instantiated together).
#pragma once
#include "kernels/cuda/attention/common.cuh"

namespace gpt::cuda {
namespace {

// ---- forward ---------------------------------------------------------------------------
// grid (query tiles, B*NH), block kRowsPerBlock*L threads. Writes out, and
// stats (when non-null) as the CPU kernel's row_weights does.
template <int D, Positivity PHI>
__global__ void __launch_bounds__(Geom<D>::kRowThreads) forward_kernel(Inputs in, float* out, float* stats) {
  GPT_BLOCK_BOUND(Geom<D>::kRowThreads);
  using G = Geom<D>;
  GPT_SHARED(float4, ks, [kKeyTile * G::D4]);
  GPT_SHARED(float4, vs, [kKeyTile * G::D4]);
  const AttentionSpec s = spec_with<PHI>(in);
  const int T = in.T, NH = in.NH, C = NH * D;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRowsPerBlock;  // longest rows first
  const int lane = threadIdx.x % G::L, i0 = q0 + threadIdx.x / G::L, i = i0 + 1;
  const bool row_ok = i0 < T;
  const RowConsts rc = row_consts(s, i, D, h, b, in);
  Slice<D> q, acc;
  q.load(in.q + row_offset(b, i0, T, in.qk_stride, h, D), lane, row_ok);
  acc.zero();

  const bool shifted = attn::shifted(s), two_pass = s.sharpened();
  PartQuery<D> pq;
  // Pass 1: shift (running maximum when shifted, from the sink's logit or
  // softpick's 0 up), Z and max u; without sharpening also Σ u v, rescaled
  // whenever the maximum grows. Softpick sums |u − c| and relu(u − c) with
  // c = e^(−m), which the rescaling by e^(m_old − m_new) keeps exact.
  float m = shifted ? static_cast<float>(attn::shift_floor(s, rc.zeta)) : 0.f, z = 0.f, umax = 0.f;
  float c = attn::zero_level(s, m);
  for (KeyWalk<D, kFarTableAt<D>> w(s, in, b, h, q0); w.next();) {
    const int part = w.part, j0 = w.j0;
    pq.select(q, w, i0, row_ok);
    w.load(ks, two_pass ? nullptr : vs);
    float x[kKeyTile];
    float tmax = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < kKeyTile; ++jj) {
      x[jj] = logit(s, rc, rc.lf, q.dot(ks + jj * G::D4, lane), i0, j0 + jj);
      if (row_ok && pair_in<kFarTableAt<D>>(s, in, part, i0, j0 + jj)) tmax = fmaxf(tmax, x[jj]);
    }
    if (shifted && tmax > m) {  // online softmax: rescale what was summed under the old maximum
      const float corr = expf(m - tmax);
      z *= corr;
      umax *= corr;
      if (!two_pass) acc.scale(corr);
      m = tmax;
      c = attn::zero_level(s, m);
    }
#pragma unroll
    for (int jj = 0; jj < kKeyTile; ++jj) {
      const bool valid = row_ok && pair_in<kFarTableAt<D>>(s, in, part, i0, j0 + jj);
      const float u = valid ? attn::positivity(PHI, x[jj] - m) : 0.f;
      const float num = valid && u - c > 0.f ? u - c : 0.f;  // = u where c = 0
      z += valid ? fabsf(u - c) : 0.f;
      umax = fmaxf(umax, num);
      if (!two_pass) acc.axpy(num, vs + jj * G::D4, lane);
    }
  }
  z += attn::norm_extra(s, shifted ? m : 0.f, rc.zeta);
  float st[kStats] = {shifted ? m : 0.f, z, umax * attn::inv_norm(s, z), 0.f};
  float y_scale = attn::inv_norm(s, z);

  if (two_pass) {
    // Pass 2: w = r/Σr for a sharpened row (r = relu(i·a − o)^p scaled by
    // t_max), w = a for a row where no t is positive.
    const attn::Row<float> row = attn::row_from_stats(s, i, st);
    float R = 0.f;
    for (KeyWalk<D, kFarTableAt<D>> w(s, in, b, h, q0); w.next();) {
      const int part = w.part, j0 = w.j0;
      pq.select(q, w, i0, row_ok);
      w.load(ks, vs);
#pragma unroll 4
      for (int jj = 0; jj < kKeyTile; ++jj) {
        const float x = logit(s, rc, rc.lf, q.dot(ks + jj * G::D4, lane), i0, j0 + jj);
        float e = 0.f;
        if (row_ok && pair_in<kFarTableAt<D>>(s, in, part, i0, j0 + jj)) {
          const float a = row.a(s, x);
          e = row.sharpen ? attn::sharpen_value(attn::sharpen_t(row.i, a, row.offset), row.t_max, row.p) : a;
        }
        R += e;
        acc.axpy(e, vs + jj * G::D4, lane);
      }
    }
    st[3] = row.sharpen ? R : 0.f;
    y_scale = row.sharpen ? 1.f / R : 1.f;  // R >= 1: the largest t contributes 1
  }
  if (!row_ok) return;
  acc.store(out + row_offset(b, i0, T, C, h, D), lane, y_scale);
  if (stats && lane == 0)
    for (int k = 0; k < kStats; ++k) stats[(static_cast<size_t>(bh) * T + i0) * kStats + k] = st[k];
}

// ---- diagnostics -----------------------------------------------------------------------
// Same grid as the forward. Per row (as the CPU's row_diagnostics): mass Σw,
// entropy of w/mass, share of the first key, share of the last N keys; per
// head the sums over rows, the row count, and the largest |σ| (kAttentionDiagStats).
template <int D, Positivity PHI>
__global__ void __launch_bounds__(Geom<D>::kRowThreads) diag_kernel(Inputs in, const float* stats, double* diag) {
  GPT_BLOCK_BOUND(Geom<D>::kRowThreads);
  using G = Geom<D>;
  GPT_SHARED(float4, ks, [kKeyTile * G::D4]);
  const AttentionSpec s = spec_with<PHI>(in);
  const int T = in.T, NH = in.NH;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRowsPerBlock;
  const int lane = threadIdx.x % G::L, i0 = q0 + threadIdx.x / G::L, i = i0 + 1;
  const bool row_ok = i0 < T;
  const RowConsts rc = row_consts(s, i, D, h, b, in);
  Slice<D> q;
  q.load(in.q + row_offset(b, i0, T, in.qk_stride, h, D), lane, row_ok);
  float st[kStats] = {0.f, 1.f, 0.f, 0.f};
  if (row_ok)
    for (int k = 0; k < kStats; ++k) st[k] = stats[(static_cast<size_t>(bh) * T + i0) * kStats + k];
  const attn::Row<float> row = attn::row_from_stats(s, i, st);
  const int N = s.trained_context;
  const int first_recent = N > 0 ? max(0, i - N) : 0;  // the row has i keys

  double mass = 0, wlogw = 0, recent = 0, w0 = 0;
  float max_qk = 0.f;  // the row's largest |q·k| (times f: the largest |σ|)
  PartQuery<D> pq;
  for (KeyWalk<D, kFarTableAt<D>> w(s, in, b, h, q0); w.next();) {
    const int part = w.part, j0 = w.j0;
    pq.select(q, w, i0, row_ok);
    w.load(ks, nullptr);
#pragma unroll 4
    for (int jj = 0; jj < kKeyTile; ++jj) {
      const int j = j0 + jj;
      const float qk = q.dot(ks + jj * G::D4, lane);
      const float x = logit(s, rc, rc.lf, qk, i0, j);
      if (row_ok && pair_in<kFarTableAt<D>>(s, in, part, i0, j)) {
        max_qk = fmaxf(max_qk, fabsf(qk));
        const double w = row.w_from_a(row.a(s, x));
        mass += w;
        if (w > 0) wlogw += w * log(w);
        if (j >= first_recent) recent += w;
        if (j == 0) w0 = w;
      }
    }
  }
  const bool lead = row_ok && lane == 0;
  double e = 0, sink = 0, rec = 0;
  if (lead && mass > 0) {
    e = log(mass) - wlogw / mass;
    sink = w0 / mass;
    rec = recent / mass;
  }
  double* d = diag + static_cast<size_t>(h) * kAttentionDiagStats;
  warp_atomic_add(d + 0, e);
  warp_atomic_add(d + 1, sink);
  warp_atomic_add(d + 2, rec);
  warp_atomic_add(d + 3, lead ? mass : 0.0);
  warp_atomic_add(d + kDiagRows, lead ? 1.0 : 0.0);
  warp_atomic_max(d + kDiagMaxScore, lead ? double(max_qk) * double(rc.f) : 0.0);
}

}  // namespace
}  // namespace gpt::cuda
