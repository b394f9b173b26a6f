// Fused causal self-attention on the GPU (float32) for every stage
// combination of kernels/attention_spec.h: the contract of attention.h, with
// the layouts, per-row statistics (shift, Z, max a, Σr) and diagnostics of
// the CPU kernel (kernels/cpu/attention.cpp), so that the two compare directly.
//
// FlashAttention-style: a thread block owns a tile of rows of one (b,h) and
// streams the other side through shared memory in tiles; nothing T×T is ever
// stored. The stage math (λ_i, φ, normalisation, sharpening and their
// derivatives) is attn:: of attention_spec.h; this file only orders the loops.
//
// Threads: a row (query or key) belongs to a group of L = max(1, D/32)
// consecutive lanes of one warp; each lane holds D/L of the row's channels as
// float4 chunks (chunk c of the row belongs to lane c % L, so the lanes of a
// group read neighbouring 16-byte words of a shared row: no bank conflicts)
// and dot products are finished with shuffles inside the group. Loops over
// the other side run the same number of times in every lane of a block (the
// causal mask only decides whether a term is used), so shuffles and barriers
// are never divergent. A context mask (window, sinks: attn::key_kept) decides
// per term the same way, and a tile that no row of the block keeps a key of
// (attn::block_seen, the same for every thread of the block) is skipped
// whole, so a window of w keys costs O(T·w), not O(T²). A distance
// remapping (remap::, rerope and its relatives) gives the kernels a far copy
// of q and k (Inputs::qf, kf): every key loop runs in two parts, the near
// pairs with q and k, then the far pairs (m − n >= the remap window) with the
// far copy (pair_in, part_tile_seen), the running sums carried across; dq
// and dk of the far part go to the far copy's gradient.
//
// Kernels:
//   forward   query rows; one pass (running maximum for exp + l1, plain sums
//             for bounded φ or no l1), or two passes under sharpening (pass 1:
//             shift, Z, max a; pass 2: r and the weighted sum, Σr).
//   diag      query rows; recomputes w from the stats (as the backward does)
//             and accumulates the per-head diagnostics (evaluation only).
//   dq        query rows; D_i = dy_i·y_i and, under sharpening, a first pass for
//             S_i = Σ_j a_ij h_ij; then dq_i and the ssmax scale's gradient.
//             Saves D_i, S_i for:
//   dkdv      key rows (FlashAttention-2's key-major backward): dk_j, dv_j
//             summed over the query tiles in registers, no atomics.
//   normalize / normalize_backward: the cosine score's L2 normalisation of q
//             and k into a (B,T,2C) copy, and the projection of its gradient
//             onto the sphere's tangent (as the CPU kernel does).
//
// Templates: head size D (16, 32, 64, 128: register arrays) × positivity φ
// (the element-wise inner loops). Everything else (score, scale, bias, ALiBi,
// normalisation, sharpening) is a run-time value that is uniform across a
// block, so its branches cost little and the file compiles in reasonable
// time.
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_syntax.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/check.h"
#include "kernels/attention_check.h"

namespace gpt::cuda {

namespace {

constexpr int kStats = AttentionSpec::kStatsPerRow;
constexpr int kRowsPerBlock = 64;  // query rows per block (forward, diag, dq)
constexpr int kKeyTile = 32;       // keys per shared tile (forward, diag, dq)
constexpr int kKeysPerBlock = 64;  // key rows per block (dkdv)
constexpr int kQueryTile = 32;     // query rows per shared tile (dkdv)

// Channel layout of one row across its group of lanes.
template <int D>
struct Geom {
  static_assert(D % 16 == 0, "head size must be a multiple of 16");
  static constexpr int L = D >= 32 ? D / 32 : 1;  // lanes per row (1, 2 or 4)
  static constexpr int D4 = D / 4;                // float4 chunks per row
  static constexpr int NC = D4 / L;               // chunks per lane
  static constexpr int kRowThreads = kRowsPerBlock * L;
  static constexpr int kKeyThreads = kKeysPerBlock * L;
};

// ---- small helpers ---------------------------------------------------------------------
GPT_HD inline int ceil_div(int n, int d) { return (n + d - 1) / d; }
__device__ __forceinline__ float dot4(float4 a, float4 b) {
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}
__device__ __forceinline__ void axpy4(float4& y, float a, float4 x) {
  y.x += a * x.x;
  y.y += a * x.y;
  y.z += a * x.z;
  y.w += a * x.w;
}
__device__ __forceinline__ void scale4(float4& y, float a) {
  y.x *= a;
  y.y *= a;
  y.z *= a;
  y.w *= a;
}

// Sum over the L lanes of a group (all lanes of the warp must call it).
template <int L>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Adds v (summed over the warp) to *dst: one atomic per warp.
__device__ __forceinline__ void warp_atomic_add(double* dst, double v) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) atomicAdd(dst, v);
}

// A row slice: the lane's chunks of a D-wide row, in registers.
template <int D>
struct Slice {
  float4 c[Geom<D>::NC];

  __device__ void zero() {
#pragma unroll
    for (int k = 0; k < Geom<D>::NC; ++k) c[k] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  // row: D floats in global memory, 16-byte aligned; zeros when !ok.
  __device__ void load(const float* row, int lane, bool ok) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
#pragma unroll
    for (int k = 0; k < Geom<D>::NC; ++k) c[k] = ok ? r4[lane + k * Geom<D>::L] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  // row += this slice.
  __device__ void add_to(float* row, int lane) const {
    float4* r4 = reinterpret_cast<float4*>(row);
#pragma unroll
    for (int k = 0; k < Geom<D>::NC; ++k) {
      float4 v = r4[lane + k * Geom<D>::L];
      v.x += c[k].x;
      v.y += c[k].y;
      v.z += c[k].z;
      v.w += c[k].w;
      r4[lane + k * Geom<D>::L] = v;
    }
  }
  __device__ void store(float* row, int lane, float scale) const {
    float4* r4 = reinterpret_cast<float4*>(row);
#pragma unroll
    for (int k = 0; k < Geom<D>::NC; ++k) {
      float4 v = c[k];
      scale4(v, scale);
      r4[lane + k * Geom<D>::L] = v;
    }
  }
  // Partial dot with a shared row (D4 chunks); group_sum finishes it.
  __device__ float partial_dot(const float4* srow, int lane) const {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < Geom<D>::NC; ++k) s += dot4(c[k], srow[lane + k * Geom<D>::L]);
    return s;
  }
  __device__ float dot(const float4* srow, int lane) const { return group_sum<Geom<D>::L>(partial_dot(srow, lane)); }
  // this += a * shared row
  __device__ void axpy(float a, const float4* srow, int lane) {
#pragma unroll
    for (int k = 0; k < Geom<D>::NC; ++k) axpy4(c[k], a, srow[lane + k * Geom<D>::L]);
  }
  __device__ void scale(float a) {
#pragma unroll
    for (int k = 0; k < Geom<D>::NC; ++k) scale4(c[k], a);
  }
  // this += a * another slice (registers)
  __device__ void axpy(float a, const Slice& x) {
#pragma unroll
    for (int k = 0; k < Geom<D>::NC; ++k) axpy4(c[k], a, x.c[k]);
  }
  // The dot with another slice of the same row layout (group_sum finishes it).
  __device__ float dot(const Slice& x) const {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < Geom<D>::NC; ++k) s += dot4(c[k], x.c[k]);
    return group_sum<Geom<D>::L>(s);
  }
};

// Rows t0..t0+n-1 of one head (row t at base + t*stride, D floats) into
// shared memory as n×D4 float4; rows past T are zero.
template <int D>
__device__ void load_tile(float4* dst, const float* base, size_t stride, int t0, int n, int T) {
  constexpr int D4 = Geom<D>::D4;
  for (int e = threadIdx.x; e < n * D4; e += blockDim.x) {
    const int r = e / D4, c = e % D4, t = t0 + r;
    dst[e] = t < T ? reinterpret_cast<const float4*>(base + static_cast<size_t>(t) * stride)[c]
                   : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// ---- arguments -----------------------------------------------------------------------
// Row t of head h of sequence b of a (B,T,·) tensor starts at
// ptr + (b*T + t)*stride + h*D. q and k share a stride (3C in qkv, 2C in the
// cosine copy), v has its own; out, dout are (B,T,C).
struct Inputs {
  const float* q;
  const float* k;
  const float* v;
  const float* qf = nullptr;  // the far copies of a distance remapping (remap::on), null otherwise
  const float* kf = nullptr;
  size_t qk_stride, v_stride;
  int T, NH;
  AttentionSpec spec;
  const float* head_scale;
  const float* head_sink = nullptr;
  const float* head_kerple = nullptr;
  const float* fcum = nullptr;  // the forget gate's c (B,NH,T)
  const float* fire = nullptr;  // FIRE's bias table (NH,T,T): b_h(i0, Δ) at [(h·T + i0)·T + Δ]
};

// The constants of stages 1–2 for row i (1-based) of head h, exactly as the
// CPU kernel rounds them: lf = float(λ_i·f) for the logits, and λ_i, f
// separately for the backward's dσ = λ_i·f·dx.
struct RowConsts {
  float lf, lambda, f, bias, slope;
  float zeta;  // the sink key's logit (attn::sink_logit)
  float r1, r2, dr1, dr2;  // KERPLE's r₁, r₂ of the head and dr/dρ (attn::kerple_r)
  const float* fc;         // the forget gate's c of this (b,h) slice (T values), or null
  const float* fb;         // FIRE's table of head h (T, T), or null
  int T;                   // rows and keys past the sequence (never used) read c_{T−1} and b(T − 1, ·)
};
// Row i (1-based) of head h of sequence b.
__device__ inline RowConsts row_consts(const AttentionSpec& s, int i, int D, int h, int b, const Inputs& in) {
  const int NH = in.NH, T = in.T;
  const float* head_sink = in.head_sink;
  const float* head_kerple = in.head_kerple;
  const double factor = attn::score_factor(s, D);
  const int ph = s.param_head(h);  // the head of the learned parameters
  const double hs = in.head_scale ? static_cast<double>(in.head_scale[ph]) : 1.0;
  const double lambda = attn::row_scale(s, i, D, hs);
  RowConsts rc;
  rc.lf = static_cast<float>(lambda * factor);
  rc.lambda = static_cast<float>(lambda);
  rc.f = static_cast<float>(factor);
  rc.bias = static_cast<float>(s.bias);
  rc.slope = s.alibi() ? static_cast<float>(attn::alibi_slope(ph, NH / s.head_group)) : 0.f;
  rc.zeta = static_cast<float>(attn::sink_logit(s, head_sink, ph));
  rc.r1 = rc.r2 = rc.dr1 = rc.dr2 = 0.f;
  rc.fc = s.forget() && in.fcum ? in.fcum + (static_cast<size_t>(b) * NH + h) * T : nullptr;
  rc.fb = s.fire() && in.fire ? in.fire + static_cast<size_t>(h) * T * T : nullptr;
  rc.T = T;
  if (s.kerple() && head_kerple) {
    const attn::KerpleR r = attn::kerple_r(s.position_bias, head_kerple[2 * ph], head_kerple[2 * ph + 1]);
    rc.r1 = static_cast<float>(r.r1);
    rc.r2 = static_cast<float>(r.r2);
    rc.dr1 = static_cast<float>(r.dr1);
    rc.dr2 = static_cast<float>(r.dr2);
  }
  return rc;
}
// x_ij = λ f (q_i·k_j) + bias − slope (i − j), with i0, j 0-based.
// With KERPLE, + b(Δ) of the head (rc), Δ = i0 − j (clamped at 0 for the
// pairs past the causal limit, which are never used); with the forget gate
// + c_i0 − c_j; with FIRE + the table's b(i0, Δ); then the soft-cap
// (attn::softcap; every dx the backward forms is taken back through it by
// uncap()).
__device__ __forceinline__ float logit(const AttentionSpec& s, const RowConsts& rc, float lf, float qk, int i0, int j) {
  float x = rc.slope != 0.f ? lf * qk + rc.bias - rc.slope * static_cast<float>(i0 - j) : lf * qk + rc.bias;
  if (s.kerple()) x += attn::kerple_bias(s.position_bias, rc.r1, rc.r2, static_cast<float>(i0 > j ? i0 - j : 0));
  if (s.forget()) x += rc.fc[min(i0, rc.T - 1)] - rc.fc[min(j, rc.T - 1)];
  if (s.fire()) x += rc.fb[static_cast<size_t>(min(i0, rc.T - 1)) * rc.T + min(i0 > j ? i0 - j : 0, rc.T - 1)];
  return attn::softcap(static_cast<float>(s.softcap), x);
}
// dL/dx from dL/d(the capped logit y): dx · (1 − (y/c)²), dx without a cap.
__device__ __forceinline__ float uncap(const AttentionSpec& s, float y, float dx) {
  return dx * attn::softcap_grad(static_cast<float>(s.softcap), y);
}

// The spec with the template's φ written in, so that attn:: functions that
// switch on s.positivity fold to the one case.
template <Positivity PHI>
__device__ __forceinline__ AttentionSpec spec_with(const AttentionSpec& in) {
  AttentionSpec s = in;
  s.positivity = PHI;
  return s;
}


__device__ __forceinline__ size_t row_offset(int b, int t, int T, size_t stride, int h, int D) {
  return (static_cast<size_t>(b) * T + t) * stride + static_cast<size_t>(h) * D;
}

// A distance remapping splits every key loop into two parts: part 0 the near
// pairs, scored with q and k; part 1 the far pairs (remap::far), scored with
// the far copies q̃ and k̃. Without a remapping part 0 is the whole loop.
__device__ __forceinline__ bool pair_in(const AttentionSpec& s, int part, int i0, int j) {
  return attn::key_kept(s, i0, j) && (remap::far(s.rope, i0, j) == (part == 1));
}
// Whether the tile of rows q_first..q_last and keys k_first..k_last holds a
// pair of the part (uniform across a block, like block_seen).
__device__ __forceinline__ bool part_tile_seen(const AttentionSpec& s, int part, int q_first, int q_last, int k_first,
                                               int k_last) {
  if (!attn::block_seen(s, q_first, q_last, k_first, k_last)) return false;
  if (!remap::on(s.rope)) return part == 0;
  const int W = s.rope.remap_window;
  return part == 1 ? k_first <= q_last - W : k_last > q_first - W;
}

__device__ __forceinline__ int key_parts(const Inputs& in) { return in.qf ? 2 : 1; }

// The query row a thread holds across the parts of its key loop: q in part 0,
// q̃ in part 1 (reloaded when the part changes).
template <int D>
struct PartQuery {
  int part = 0;  // the part q holds
  // Loads the part's query row into q if it is not there yet; true when that
  // starts the far part (part 1).
  __device__ bool select(Slice<D>& q, const Inputs& in, int want, int b, int i0, int h, bool row_ok) {
    if (want == part) return false;
    part = want;
    q.load((want ? in.qf : in.q) + row_offset(b, i0, in.T, in.qk_stride, h, D), threadIdx.x % Geom<D>::L, row_ok);
    return want == 1;
  }
};

// ---- forward ---------------------------------------------------------------------------
// grid (query tiles, B*NH), block kRowsPerBlock*L threads. Writes out, and
// stats (when non-null) as the CPU kernel's row_weights does.
template <int D, Positivity PHI>
__global__ void __launch_bounds__(Geom<D>::kRowThreads)
    forward_kernel(Inputs in, float* out, float* stats) {
  using G = Geom<D>;
  GPT_SHARED(float4, ks, [kKeyTile * G::D4]);
  GPT_SHARED(float4, vs, [kKeyTile * G::D4]);
  const AttentionSpec s = spec_with<PHI>(in.spec);
  const int T = in.T, NH = in.NH, C = NH * D;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRowsPerBlock;  // longest rows first
  const int lane = threadIdx.x % G::L, i0 = q0 + threadIdx.x / G::L, i = i0 + 1;
  const bool row_ok = i0 < T;
  const RowConsts rc = row_consts(s, i, D, h, b, in);
  const float* kbase = in.k + row_offset(b, 0, T, in.qk_stride, h, D);
  const float* kfbase = in.kf ? in.kf + row_offset(b, 0, T, in.qk_stride, h, D) : kbase;
  const float* vbase = in.v + row_offset(b, 0, T, in.v_stride, h, D);
  Slice<D> q, acc;
  q.load(in.q + row_offset(b, i0, T, in.qk_stride, h, D), lane, row_ok);
  acc.zero();

  const bool shifted = attn::shifted(s), two_pass = s.sharpened();
  const int n_keys = min(T, q0 + kRowsPerBlock);  // keys seen by any row of the block
  const int n_tiles = (n_keys + kKeyTile - 1) / kKeyTile, parts = key_parts(in);
  PartQuery<D> pq;
  // Pass 1: shift (running maximum when shifted, from the sink's logit or
  // softpick's 0 up), Z and max u; without sharpening also Σ u v, rescaled
  // whenever the maximum grows. Softpick sums |u − c| and relu(u − c) with
  // c = e^(−m), which the rescaling by e^(m_old − m_new) keeps exact.
  float m = shifted ? static_cast<float>(attn::shift_floor(s, rc.zeta)) : 0.f, z = 0.f, umax = 0.f;
  float c = attn::zero_level(s, m);
  for (int it = 0; it < parts * n_tiles; ++it) {
    const int part = it / n_tiles, j0 = (it % n_tiles) * kKeyTile;
    if (!part_tile_seen(s, part, q0, q0 + kRowsPerBlock - 1, j0, j0 + kKeyTile - 1)) continue;  // uniform
    pq.select(q, in, part, b, i0, h, row_ok);
    __syncthreads();
    load_tile<D>(ks, part ? kfbase : kbase, in.qk_stride, j0, kKeyTile, T);
    if (!two_pass) load_tile<D>(vs, vbase, in.v_stride, j0, kKeyTile, T);
    __syncthreads();
    float x[kKeyTile];
    float tmax = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < kKeyTile; ++jj) {
      x[jj] = logit(s, rc, rc.lf, q.dot(ks + jj * G::D4, lane), i0, j0 + jj);
      if (row_ok && pair_in(s, part, i0, j0 + jj)) tmax = fmaxf(tmax, x[jj]);
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
      const bool valid = row_ok && pair_in(s, part, i0, j0 + jj);
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
    for (int it = 0; it < parts * n_tiles; ++it) {
      const int part = it / n_tiles, j0 = (it % n_tiles) * kKeyTile;
      if (!part_tile_seen(s, part, q0, q0 + kRowsPerBlock - 1, j0, j0 + kKeyTile - 1)) continue;  // uniform
      pq.select(q, in, part, b, i0, h, row_ok);
      __syncthreads();
      load_tile<D>(ks, part ? kfbase : kbase, in.qk_stride, j0, kKeyTile, T);
      load_tile<D>(vs, vbase, in.v_stride, j0, kKeyTile, T);
      __syncthreads();
#pragma unroll 4
      for (int jj = 0; jj < kKeyTile; ++jj) {
        const float x = logit(s, rc, rc.lf, q.dot(ks + jj * G::D4, lane), i0, j0 + jj);
        float e = 0.f;
        if (row_ok && pair_in(s, part, i0, j0 + jj)) {
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
// head diag[h*5 + ·] += the sums over rows, and the row count.
template <int D, Positivity PHI>
__global__ void __launch_bounds__(Geom<D>::kRowThreads)
    diag_kernel(Inputs in, const float* stats, double* diag) {
  using G = Geom<D>;
  GPT_SHARED(float4, ks, [kKeyTile * G::D4]);
  const AttentionSpec s = spec_with<PHI>(in.spec);
  const int T = in.T, NH = in.NH;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRowsPerBlock;
  const int lane = threadIdx.x % G::L, i0 = q0 + threadIdx.x / G::L, i = i0 + 1;
  const bool row_ok = i0 < T;
  const RowConsts rc = row_consts(s, i, D, h, b, in);
  const float* kbase = in.k + row_offset(b, 0, T, in.qk_stride, h, D);
  const float* kfbase = in.kf ? in.kf + row_offset(b, 0, T, in.qk_stride, h, D) : kbase;
  Slice<D> q;
  q.load(in.q + row_offset(b, i0, T, in.qk_stride, h, D), lane, row_ok);
  float st[kStats] = {0.f, 1.f, 0.f, 0.f};
  if (row_ok)
    for (int k = 0; k < kStats; ++k) st[k] = stats[(static_cast<size_t>(bh) * T + i0) * kStats + k];
  const attn::Row<float> row = attn::row_from_stats(s, i, st);
  const int N = s.trained_context;
  const int first_recent = N > 0 ? max(0, i - N) : 0;  // the row has i keys

  double mass = 0, wlogw = 0, recent = 0, w0 = 0;
  const int n_keys = min(T, q0 + kRowsPerBlock);
  const int n_tiles = (n_keys + kKeyTile - 1) / kKeyTile, parts = key_parts(in);
  PartQuery<D> pq;
  for (int it = 0; it < parts * n_tiles; ++it) {
    const int part = it / n_tiles, j0 = (it % n_tiles) * kKeyTile;
    if (!part_tile_seen(s, part, q0, q0 + kRowsPerBlock - 1, j0, j0 + kKeyTile - 1)) continue;  // uniform
    pq.select(q, in, part, b, i0, h, row_ok);
    __syncthreads();
    load_tile<D>(ks, part ? kfbase : kbase, in.qk_stride, j0, kKeyTile, T);
    __syncthreads();
#pragma unroll 4
    for (int jj = 0; jj < kKeyTile; ++jj) {
      const int j = j0 + jj;
      const float x = logit(s, rc, rc.lf, q.dot(ks + jj * G::D4, lane), i0, j);
      if (row_ok && pair_in(s, part, i0, j)) {
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
  warp_atomic_add(d + 4, lead ? 1.0 : 0.0);
}

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
  float* row_ds;  // (B,NH,T,2): D_i, S_i, written by dq_kernel for dkdv_kernel
  double* dhead;  // (NH) Σ dλ/ds Σ σ dx, ssmax only
  double* dsink = nullptr;  // (NH) Σ_i dL/dζ_h, normalisation sink only
  double* dkerple = nullptr;  // (2·NH) Σ dx·∂b/∂r·dr/dρ, KERPLE only
  float* dfcum = nullptr;     // (B,NH,T) += dL/dc, the forget gate only
  float* dfire = nullptr;     // (B,NH,T,T) += dL/db of FIRE's table per sequence (dq writes each pair once)
};

// grid (query tiles, B*NH), block kRowsPerBlock*L threads.
template <int D, Positivity PHI>
__global__ void __launch_bounds__(Geom<D>::kRowThreads) dq_kernel(Inputs in, Grads gr) {
  using G = Geom<D>;
  GPT_SHARED(float4, ks, [kKeyTile * G::D4]);
  GPT_SHARED(float4, vs, [kKeyTile * G::D4]);
  const AttentionSpec s = spec_with<PHI>(in.spec);
  const int T = in.T, NH = in.NH, C = NH * D;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRowsPerBlock;
  const int lane = threadIdx.x % G::L, i0 = q0 + threadIdx.x / G::L, i = i0 + 1;
  const bool row_ok = i0 < T;
  const RowConsts rc = row_consts(s, i, D, h, b, in);
  const float* kbase = in.k + row_offset(b, 0, T, in.qk_stride, h, D);
  const float* kfbase = in.kf ? in.kf + row_offset(b, 0, T, in.qk_stride, h, D) : kbase;
  const float* vbase = in.v + row_offset(b, 0, T, in.v_stride, h, D);
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
  const int n_keys = min(T, q0 + kRowsPerBlock);
  const int n_tiles = (n_keys + kKeyTile - 1) / kKeyTile, parts = key_parts(in);
  PartQuery<D> pq;

  float S = Di;
  if (s.sharpened()) {  // S_i = Σ_j a_ij h_ij needs a pass of its own
    float sum = 0.f;
    for (int it = 0; it < parts * n_tiles; ++it) {
      const int part = it / n_tiles, j0 = (it % n_tiles) * kKeyTile;
      if (!part_tile_seen(s, part, q0, q0 + kRowsPerBlock - 1, j0, j0 + kKeyTile - 1)) continue;  // uniform
      pq.select(q, in, part, b, i0, h, row_ok);
      __syncthreads();
      load_tile<D>(ks, part ? kfbase : kbase, in.qk_stride, j0, kKeyTile, T);
      load_tile<D>(vs, vbase, in.v_stride, j0, kKeyTile, T);
      __syncthreads();
#pragma unroll 4
      for (int jj = 0; jj < kKeyTile; ++jj) {
        const float qk = q.dot(ks + jj * G::D4, lane), g = dy.dot(vs + jj * G::D4, lane);
        if (row_ok && row.sharpen && pair_in(s, part, i0, j0 + jj)) {
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
  for (int it = 0; it < parts * n_tiles; ++it) {
    const int part = it / n_tiles, j0 = (it % n_tiles) * kKeyTile;
    if (!part_tile_seen(s, part, q0, q0 + kRowsPerBlock - 1, j0, j0 + kKeyTile - 1)) continue;  // uniform
    if (pq.select(q, in, part, b, i0, h, row_ok)) {  // the far part begins: dq_i is complete
      if (row_ok) acc.add_to(gr.dq + row_offset(b, i0, T, gr.dqk_stride, h, D), lane);
      acc.zero();
    }
    __syncthreads();
    load_tile<D>(ks, part ? kfbase : kbase, in.qk_stride, j0, kKeyTile, T);
    load_tile<D>(vs, vbase, in.v_stride, j0, kKeyTile, T);
    __syncthreads();
#pragma unroll 4
    for (int jj = 0; jj < kKeyTile; ++jj) {
      const float qk = q.dot(ks + jj * G::D4, lane), g = dy.dot(vs + jj * G::D4, lane);
      if (row_ok && pair_in(s, part, i0, j0 + jj)) {
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
        acc.axpy(rc.lambda * rc.f * dx, ks + jj * G::D4, lane);
      }
    }
  }
  if (learned)
    warp_atomic_add(gr.dhead + s.param_head(h), row_ok && lane == 0 ? attn::row_scale_grad(s, i) * sigma_dx : 0.0);
  if (s.learned_sink())
    warp_atomic_add(gr.dsink + s.param_head(h), row_ok && lane == 0 ? static_cast<double>(attn::sink_grad(s, row, rc.zeta, S)) : 0.0);
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

// grid (key tiles, B*NH), block kKeysPerBlock*L threads: dk_j, dv_j over the
// query rows i >= j, streamed through shared memory with their statistics.
template <int D, Positivity PHI>
__global__ void __launch_bounds__(Geom<D>::kKeyThreads) dkdv_kernel(Inputs in, Grads gr) {
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

  const AttentionSpec s = spec_with<PHI>(in.spec);
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
    if (!part_tile_seen(s, part, q0, q0 + kQueryTile - 1, k0, k0 + kKeysPerBlock - 1)) continue;  // uniform
    if (part != cur_part) {  // the far part begins: dk_j is complete, k_j becomes k̃_j
      if (key_ok) dk.add_to(gr.dk + row_offset(b, j, T, gr.dqk_stride, h, D), lane);
      dk.zero();
      k.load(in.kf + row_offset(b, j, T, in.qk_stride, h, D), lane, key_ok);
      cur_part = part;
    }
    __syncthreads();
    load_tile<D>(qs, part ? qfbase : qbase, in.qk_stride, q0, kQueryTile, T);
    load_tile<D>(dys, dybase, C, q0, kQueryTile, T);
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
    __syncthreads();
#pragma unroll 4
    for (int r = 0; r < kQueryTile; ++r) {
      const int i0 = q0 + r;
      const float qk = k.dot(qs + r * G::D4, lane), g = v.dot(dys + r * G::D4, lane);
      if (key_ok && i0 < T && pair_in(s, part, i0, j)) {
        const attn::Row<float> row = rows[r];
        const float x = logit(s, rc0, lfs[r], qk, i0, j);
        const float a = row.a(s, x), w = row.w_from_a(a);
        const float dx = uncap(s, x, attn::grad_x(s, row, x, attn::grad_a(row, a, w, g, Dis[r]), Ss[r]));
        dv.axpy(w, dys + r * G::D4, lane);
        dk.axpy(lambdas[r] * rc0.f * dx, qs + r * G::D4, lane);
        col_dx += dx;
      }
    }
  }
  if (!key_ok) return;
  if (s.forget() && lane == 0) gr.dfcum[static_cast<size_t>(bh) * T + j] -= col_dx;
  dk.add_to((cur_part ? gr.dk_far : gr.dk) + row_offset(b, j, T, gr.dqk_stride, h, D), lane);
  dv.add_to(gr.dv + row_offset(b, j, T, gr.dv_stride, h, D), lane);
}

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
  using G = Geom<D>;
  GPT_SHARED(float4, ks, [kKeyTile * G::D4]);
  GPT_SHARED(float4, vs, [kKeyTile * G::D4]);
  const AttentionSpec s = spec_with<Positivity::Sigmoid>(in.spec);
  const int T = in.T, NH = in.NH, C = NH * D;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRowsPerBlock;  // longest rows first
  const int lane = threadIdx.x % G::L, i0 = q0 + threadIdx.x / G::L;
  const bool row_ok = i0 < T;
  const RowConsts rc = row_consts(s, i0 + 1, D, h, b, in);
  const float* kbase = in.k + row_offset(b, 0, T, in.qk_stride, h, D);
  const float* kfbase = in.kf ? in.kf + row_offset(b, 0, T, in.qk_stride, h, D) : kbase;
  const float* vbase = in.v + row_offset(b, 0, T, in.v_stride, h, D);
  Slice<D> q, acc;
  q.load(in.q + row_offset(b, i0, T, in.qk_stride, h, D), lane, row_ok);
  acc.zero();
  const int n_tiles = ceil_div(min(T, q0 + kRowsPerBlock), kKeyTile), parts = key_parts(in);
  const int N = s.trained_context, first_recent = N > 0 ? max(0, i0 + 1 - N) : 0;
  double mass = 0, wlogw = 0, recent = 0, w0 = 0;  // diagnostics (row_diagnostics of the CPU kernel)
  auto note = [&](double w, int j) {
    mass += w;
    if (w > 0) wlogw += w * log(w);
    if (j >= first_recent) recent += w;
    if (j == 0) w0 = w;
  };
  PartQuery<D> pq;
  float taken = 0.f;
  for (int it = 0; it < parts * n_tiles; ++it) {
    const int part = it / n_tiles, j0 = (n_tiles - 1 - it % n_tiles) * kKeyTile;
    if (!part_tile_seen(s, part, q0, q0 + kRowsPerBlock - 1, j0, j0 + kKeyTile - 1)) continue;  // uniform
    pq.select(q, in, part, b, i0, h, row_ok);
    __syncthreads();
    load_tile<D>(ks, part ? kfbase : kbase, in.qk_stride, j0, kKeyTile, T);
    load_tile<D>(vs, vbase, in.v_stride, j0, kKeyTile, T);
    __syncthreads();
    float x[kKeyTile];
#pragma unroll
    for (int jj = 0; jj < kKeyTile; ++jj) x[jj] = logit(s, rc, rc.lf, q.dot(ks + jj * G::D4, lane), i0, j0 + jj);
#pragma unroll
    for (int jj = kKeyTile - 1; jj >= 0; --jj) {
      const int j = j0 + jj;
      if (!(row_ok && j < i0 && pair_in(s, part, i0, j))) continue;
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
    warp_atomic_add(d + 4, lead ? 1.0 : 0.0);
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
  using G = Geom<D>;
  GPT_SHARED(float4, ks, [kKeyTile * G::D4]);
  GPT_SHARED(float4, vs, [kKeyTile * G::D4]);
  const AttentionSpec s = spec_with<Positivity::Sigmoid>(in.spec);
  const int T = in.T, NH = in.NH, C = NH * D;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRowsPerBlock;
  const int lane = threadIdx.x % G::L, i0 = q0 + threadIdx.x / G::L, i = i0 + 1;
  const bool row_ok = i0 < T;
  const size_t row = static_cast<size_t>(bh) * T + i0;
  const RowConsts rc = row_consts(s, i, D, h, b, in);
  const float* kbase = in.k + row_offset(b, 0, T, in.qk_stride, h, D);
  const float* kfbase = in.kf ? in.kf + row_offset(b, 0, T, in.qk_stride, h, D) : kbase;
  const float* vbase = in.v + row_offset(b, 0, T, in.v_stride, h, D);
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
  const int n_tiles = ceil_div(min(T, q0 + kRowsPerBlock), kKeyTile), parts = key_parts(in);
  PartQuery<D> pq;
  // One tile of the walk: σ = q·k and g = dy·v of its keys.
  float qk[kKeyTile], g[kKeyTile];
  auto load_keys = [&](int part, int j0) {
    __syncthreads();
    load_tile<D>(ks, part ? kfbase : kbase, in.qk_stride, j0, kKeyTile, T);
    load_tile<D>(vs, vbase, in.v_stride, j0, kKeyTile, T);
    __syncthreads();
#pragma unroll
    for (int jj = 0; jj < kKeyTile; ++jj) {
      qk[jj] = q.dot(ks + jj * G::D4, lane);
      g[jj] = dy.dot(vs + jj * G::D4, lane);
    }
  };

  double gsum = 0;  // pass 1
  float taken = 0.f;
  for (int it = 0; it < parts * n_tiles; ++it) {
    const int part = it / n_tiles, j0 = (n_tiles - 1 - it % n_tiles) * kKeyTile;
    if (!part_tile_seen(s, part, q0, q0 + kRowsPerBlock - 1, j0, j0 + kKeyTile - 1)) continue;  // uniform
    pq.select(q, in, part, b, i0, h, row_ok);
    load_keys(part, j0);
    for (int jj = kKeyTile - 1; jj >= 0; --jj) {
      const int j = j0 + jj;
      if (!(row_ok && j < i0 && pair_in(s, part, i0, j))) continue;
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
  for (int it = 0; it < parts * n_tiles; ++it) {
    const int part = it / n_tiles, j0 = (n_tiles - 1 - it % n_tiles) * kKeyTile;
    // The sums after a key block's last key, recorded in the part that key
    // belongs to for this row (skipped tiles hold no kept key: nothing changes).
    const int last = j0 + kKeyTile - 1;
    if (row_ok && lane == 0 && last % kKeysPerBlock == kKeysPerBlock - 1 &&
        remap::far(s.rope, i0, last) == (part == 1)) {
      const size_t at = row * sb.blocks + last / kKeysPerBlock;
      sb.taken[at] = taken;
      sb.gw[at] = after;
    }
    if (!part_tile_seen(s, part, q0, q0 + kRowsPerBlock - 1, j0, j0 + kKeyTile - 1)) continue;  // uniform
    if (pq.select(q, in, part, b, i0, h, row_ok)) {  // the far part begins: dq_i is complete
      if (row_ok) acc.add_to(gr.dq + row_offset(b, i0, T, gr.dqk_stride, h, D), lane);
      acc.zero();
    }
    load_keys(part, j0);
    for (int jj = kKeyTile - 1; jj >= 0; --jj) {
      const int j = j0 + jj;
      if (!(row_ok && j < i0 && pair_in(s, part, i0, j))) continue;
      const float x = logit(s, rc, rc.lf, qk[jj], i0, j);
      const float w = attn::sb_weight(x, taken), wg = w * g[jj];
      const float dx = uncap(s, x, attn::sb_grad_x(x, w, g[jj], static_cast<float>(dp - after - static_cast<double>(wg))));
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
      acc.axpy(rc.lambda * rc.f * dx, ks + jj * G::D4, lane);
    }
  }
  if (learned)
    warp_atomic_add(gr.dhead + s.param_head(h), row_ok && lane == 0 ? attn::row_scale_grad(s, i) * sigma_dx : 0.0);
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
  const AttentionSpec s = spec_with<Positivity::Sigmoid>(in.spec);
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
      const bool far = far_copy && remap::far(s.rope, i0, j);  // the same for a row's lanes
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
      const float w = gs[r * KB + kk], dx = xs[r * KB + kk], ds = lambdas[r] * rc0.f * dx;
      dv.axpy(w, dys + r * G::D4, lane);
      if (far_copy && remap::far(s.rope, i0, j))
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

// ---- cosine scores ----------------------------------------------------------------------
// One thread per (row, q|k, head): dst (rows, 2C) = q̂, k̂ of qkv (rows, 3C),
// with the CPU kernel's rounding (norm in double, then 1/norm in float).
__device__ __forceinline__ float inv_head_norm(const float* x, int D) {
  float ss = 0.f;
  for (int d = 0; d < D; ++d) ss += x[d] * x[d];
  return 1.f / static_cast<float>(sqrt(static_cast<double>(ss) + attn::kNormEps * attn::kNormEps));
}

__global__ void normalize_kernel(float* dst, const float* qkv, size_t rows, int C, int NH) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * 2 * NH) return;
  const int D = C / NH, h = static_cast<int>(idx % NH), part = static_cast<int>(idx / NH % 2);
  const size_t r = idx / (2 * NH);
  const float* x = qkv + r * 3 * C + part * C + h * D;
  float* o = dst + r * 2 * C + part * C + h * D;
  const float inv = inv_head_norm(x, D);
  for (int d = 0; d < D; ++d) o[d] = x[d] * inv;
}

// dqkv (q and k parts) += (dx̂ − (dx̂·x̂) x̂) / ‖x‖ for dhat (rows, 2C) = dL/d(x̂).
__global__ void normalize_backward_kernel(float* dqkv, const float* dhat, const float* qkv, size_t rows, int C,
                                          int NH) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * 2 * NH) return;
  const int D = C / NH, h = static_cast<int>(idx % NH), part = static_cast<int>(idx / NH % 2);
  const size_t r = idx / (2 * NH);
  const float* x = qkv + r * 3 * C + part * C + h * D;
  const float* g = dhat + r * 2 * C + part * C + h * D;
  float* o = dqkv + r * 3 * C + part * C + h * D;
  const float inv = inv_head_norm(x, D);
  float gx = 0.f;  // dx̂·x̂
  for (int d = 0; d < D; ++d) gx += g[d] * x[d] * inv;
  for (int d = 0; d < D; ++d) o[d] += (g[d] - gx * x[d] * inv) * inv;
}

__global__ void add_head_scale_grad_kernel(float* dhead_scale, const double* acc, int NH) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h < NH) dhead_scale[h] += static_cast<float>(acc[h]);
}

// ---- host side -----------------------------------------------------------------------------
void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("attention (CUDA): ", what, " failed: ", cudaGetErrorString(e));
}
void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

// Stream-ordered scratch memory, freed on the same stream.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream, const char* what) : stream_(stream) {
    if (bytes > 0) check_cuda(cudaMallocAsync(&p_, bytes, stream), what);
  }
  ~Scratch() {
    if (p_) cudaFreeAsync(p_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  cudaStream_t stream_;
};

constexpr int kHeadSizes[] = {16, 32, 64, 128};

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The shared checks (kernels/attention_check.h), then what these kernels add:
// the head sizes they are instantiated for, the grid limit, valid stages.
template <typename A>
void check_args(const char* fn, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                const HeadParams<float, A>& head) {
  check_attention_args(fn, B, Tn, C, NH, spec, head);
  const int D = C / NH;
  bool supported = false;
  for (int d : kHeadSizes) supported = supported || d == D;
  GPT_CHECK(supported, fn, ": head size C/NH = ", D, " is not supported by the CUDA attention kernels; supported: 16, 32, 64, 128");
  GPT_CHECK(static_cast<long>(B) * NH <= 65535, fn, ": B*NH = ", static_cast<long>(B) * NH,
            " exceeds the CUDA grid limit of 65535");
  const int phi = static_cast<int>(spec.positivity), score = static_cast<int>(spec.score),
            scale = static_cast<int>(spec.scale), norm = static_cast<int>(spec.normalize);
  GPT_CHECK(phi >= 0 && phi < kPositivityCount && score >= 0 && score < kScoreCount && scale >= 0 &&
                scale < kScaleCount && norm >= 0 && norm < kNormalizeCount,
            fn, ": invalid attention stage value");
}

// Calls f(integral_constant<int, D>, integral_constant<Positivity, φ>) for the
// run-time head size and φ: the one place the kernels are instantiated.
template <typename F>
void dispatch(int D, Positivity phi, F&& f) {
  auto by_phi = [&](auto d) {
    using P = Positivity;
    switch (phi) {
      case P::Exp:
        return f(d, std::integral_constant<P, P::Exp>{});
      case P::Softplus:
        return f(d, std::integral_constant<P, P::Softplus>{});
      case P::Sigmoid:
        return f(d, std::integral_constant<P, P::Sigmoid>{});
      case P::Relu:
        return f(d, std::integral_constant<P, P::Relu>{});
    }
    fail("attention (CUDA): invalid positivity ", static_cast<int>(phi));
  };
  switch (D) {
    case 16:
      return by_phi(std::integral_constant<int, 16>{});
    case 32:
      return by_phi(std::integral_constant<int, 32>{});
    case 64:
      return by_phi(std::integral_constant<int, 64>{});
    case 128:
      return by_phi(std::integral_constant<int, 128>{});
  }
  fail("attention (CUDA): head size ", D, " is not supported; supported: 16, 32, 64, 128");
}

int tiles(int n, int tile) { return (n + tile - 1) / tile; }

size_t elementwise_blocks(size_t n, int threads) { return (n + threads - 1) / threads; }

// q, k for the kernels: qkv itself, or (cosine) a normalised copy of q and k
// in norm (B,T,2C), which must then hold B*T*2C floats.
Inputs make_inputs(const float* qkv, float* norm, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                   const HeadParams<float>& head, cudaStream_t stream) {
  Inputs in;
  if (norm) {
    const size_t rows = static_cast<size_t>(B) * Tn;
    const int threads = 256;
    GPT_LAUNCH(elementwise_blocks(rows * 2 * NH, threads), threads, stream, normalize_kernel)(norm, qkv, rows, C, NH);
    check_launch("normalize_kernel launch");
    in.q = norm;
    in.k = norm + C;
    in.qk_stride = 2 * static_cast<size_t>(C);
  } else {
    in.q = qkv;
    in.k = qkv + C;
    in.qk_stride = 3 * static_cast<size_t>(C);
  }
  in.v = qkv + 2 * static_cast<size_t>(C);
  in.v_stride = 3 * static_cast<size_t>(C);
  in.T = Tn;
  in.NH = NH;
  in.spec = spec;
  in.head_scale = spec.learned_scale() ? head.scale : nullptr;
  in.head_sink = spec.learned_sink() ? head.sink : nullptr;
  in.head_kerple = spec.kerple() ? head.kerple : nullptr;
  in.fcum = spec.forget() ? head.fcum : nullptr;
  in.fire = spec.fire() ? head.fire : nullptr;
  return in;
}

// The far copy's q and k (or, for cosine scores, their normalised copy in norm_far).
void add_far_inputs(Inputs& in, const float* qkv_far, float* norm_far, int B, int Tn, int C, int NH,
                    cudaStream_t stream) {
  if (!qkv_far) return;
  const Inputs f = make_inputs(qkv_far, norm_far, B, Tn, C, NH, in.spec, {in.head_scale, in.head_sink, in.head_kerple, in.fcum, in.fire}, stream);
  in.qf = f.q;
  in.kf = f.k;
}

void check_far(const char* fn, const AttentionSpec& spec, const float* qkv_far) {
  GPT_CHECK(remap::on(spec.rope) == (qkv_far != nullptr), fn, ": ",
            qkv_far ? "a far copy of qkv was given without a distance remapping"
                    : "the distance remapping needs the far copy of qkv (rotated at the remapped positions)");
  GPT_CHECK(!qkv_far || spec.rope.remap_window >= 1, fn, ": the remap window must be >= 1, got ",
            spec.rope.remap_window);
  GPT_CHECK(!qkv_far || aligned16(qkv_far), fn, ": qkv_far must be 16-byte aligned");
}

}  // namespace

void attention_forward(float* out, float* stats, const float* qkv, int B, int Tn, int C, int NH,
                       const AttentionSpec& spec, const HeadParams<float>& head, double* diag, cudaStream_t stream,
                       const float* qkv_far) {
  check_args("cuda::attention_forward", B, Tn, C, NH, spec, head);
  check_far("cuda::attention_forward", spec, qkv_far);
  GPT_CHECK(out && qkv, "cuda::attention_forward: out and qkv must be non-null");
  GPT_CHECK(aligned16(out) && aligned16(qkv), "cuda::attention_forward: out and qkv must be 16-byte aligned");
  const int D = C / NH;
  const size_t rows = static_cast<size_t>(B) * Tn;
  const bool cosine = spec.score == Score::Cosine;
  Scratch norm(cosine ? rows * 2 * C * sizeof(float) : 0, stream, "cudaMallocAsync of the cosine q/k copy");
  // The diagnostics recompute w from the statistics: keep them when the caller does not.
  Scratch own_stats(diag && !stats ? static_cast<size_t>(B) * NH * Tn * kStats * sizeof(float) : 0, stream,
                    "cudaMallocAsync of the attention statistics");
  if (!stats) stats = own_stats.as<float>();
  Scratch norm_far(cosine && qkv_far ? rows * 2 * C * sizeof(float) : 0, stream,
                   "cudaMallocAsync of the far cosine q/k copy");
  Inputs in = make_inputs(qkv, norm.as<float>(), B, Tn, C, NH, spec, head, stream);
  add_far_inputs(in, qkv_far, norm_far.as<float>(), B, Tn, C, NH, stream);
  const dim3 grid(tiles(Tn, kRowsPerBlock), B * NH);
  dispatch(D, spec.positivity, [&](auto d, auto phi) {
    constexpr int kD = decltype(d)::value;
    constexpr Positivity kPhi = decltype(phi)::value;
    if constexpr (kPhi == Positivity::Sigmoid) {  // stick-breaking needs sigmoid (check_args)
      if (attn::stick_breaking(spec)) {
        GPT_LAUNCH(grid, Geom<kD>::kRowThreads, stream, sb_forward_kernel<kD>)(in, out, stats, diag);
        check_launch("sb_forward_kernel launch");
        return;
      }
    }
    GPT_LAUNCH(grid, Geom<kD>::kRowThreads, stream, forward_kernel<kD, kPhi>)(in, out, stats);
    check_launch("forward_kernel launch");
    if (diag) {
      GPT_LAUNCH(grid, Geom<kD>::kRowThreads, stream, diag_kernel<kD, kPhi>)(in, stats, diag);
      check_launch("diag_kernel launch");
    }
  });
}

void attention_backward(float* dqkv, const HeadGrads<float>& dhp, const float* dout, const float* out,
                        const float* stats, const float* qkv, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                        const HeadParams<float>& head, cudaStream_t stream, float* dqkv_far, const float* qkv_far) {
  check_args("cuda::attention_backward", B, Tn, C, NH, spec, head);
  check_far("cuda::attention_backward", spec, qkv_far);
  GPT_CHECK(!qkv_far || (dqkv_far && aligned16(dqkv_far)),
            "cuda::attention_backward: a distance remapping needs a 16-byte aligned dqkv_far");
  GPT_CHECK(stats != nullptr, "cuda::attention_backward: the forward's stats are required");
  GPT_CHECK(!spec.learned_scale() || dhp.scale != nullptr, "cuda::attention_backward: ssmax needs dhead_scale");
  GPT_CHECK(!spec.learned_sink() || dhp.sink != nullptr, "cuda::attention_backward: the sink needs the sink gradients");
  GPT_CHECK(!spec.kerple() || dhp.kerple != nullptr, "cuda::attention_backward: KERPLE needs the gradients of r1, r2");
  GPT_CHECK(!spec.forget() || dhp.fcum != nullptr, "cuda::attention_backward: the forget gate needs dL/dc");
  GPT_CHECK(!spec.fire() || dhp.fire != nullptr, "cuda::attention_backward: FIRE needs dL/db (B, NH, T, T)");
  GPT_CHECK(dqkv && dout && out && qkv, "cuda::attention_backward: dqkv, dout, out and qkv must be non-null");
  GPT_CHECK(aligned16(dqkv) && aligned16(dout) && aligned16(out) && aligned16(qkv),
            "cuda::attention_backward: dqkv, dout, out and qkv must be 16-byte aligned");
  const int D = C / NH;
  const size_t rows = static_cast<size_t>(B) * Tn;
  const bool cosine = spec.score == Score::Cosine, learned = spec.learned_scale(), sink = spec.learned_sink(),
             kerple = spec.kerple();
  Scratch norm(cosine ? rows * 2 * C * sizeof(float) : 0, stream, "cudaMallocAsync of the cosine q/k copy");
  Scratch dhat(cosine ? rows * 2 * C * sizeof(float) : 0, stream, "cudaMallocAsync of the cosine q/k gradient");
  Scratch row_ds(static_cast<size_t>(B) * NH * Tn * 2 * sizeof(float), stream,
                 "cudaMallocAsync of the backward's row sums");
  const int NP = NH / spec.head_group;  // heads of the learned per-head parameters (check_args: divides)
  Scratch dhead(learned ? NH * sizeof(double) : 0, stream, "cudaMallocAsync of the head-scale gradient");
  Scratch dsink(sink ? NH * sizeof(double) : 0, stream, "cudaMallocAsync of the sink-logit gradient");
  Scratch dkerple(kerple ? 2 * NH * sizeof(double) : 0, stream, "cudaMallocAsync of the KERPLE gradient");
  const bool far = qkv_far != nullptr;
  Scratch norm_far(cosine && far ? rows * 2 * C * sizeof(float) : 0, stream,
                   "cudaMallocAsync of the far cosine q/k copy");
  Scratch dhat_far(cosine && far ? rows * 2 * C * sizeof(float) : 0, stream,
                   "cudaMallocAsync of the far cosine q/k gradient");
  Inputs in = make_inputs(qkv, norm.as<float>(), B, Tn, C, NH, spec, head, stream);
  add_far_inputs(in, qkv_far, norm_far.as<float>(), B, Tn, C, NH, stream);

  Grads gr;
  gr.out = out;
  gr.dout = dout;
  gr.stats = stats;
  if (cosine) {  // dq̂, dk̂ first; projected onto the tangent and added to dqkv at the end
    check_cuda(cudaMemsetAsync(dhat.as<float>(), 0, rows * 2 * C * sizeof(float), stream), "cudaMemsetAsync");
    gr.dq = dhat.as<float>();
    gr.dk = dhat.as<float>() + C;
    gr.dqk_stride = 2 * static_cast<size_t>(C);
  } else {
    gr.dq = dqkv;
    gr.dk = dqkv + C;
    gr.dqk_stride = 3 * static_cast<size_t>(C);
  }
  if (far && cosine) {
    check_cuda(cudaMemsetAsync(dhat_far.as<float>(), 0, rows * 2 * C * sizeof(float), stream), "cudaMemsetAsync");
    gr.dq_far = dhat_far.as<float>();
    gr.dk_far = dhat_far.as<float>() + C;
  } else if (far) {
    gr.dq_far = dqkv_far;
    gr.dk_far = dqkv_far + C;
  }
  gr.dv = dqkv + 2 * static_cast<size_t>(C);
  gr.dv_stride = 3 * static_cast<size_t>(C);
  gr.row_ds = row_ds.as<float>();
  gr.dhead = dhead.as<double>();
  if (learned) check_cuda(cudaMemsetAsync(gr.dhead, 0, NH * sizeof(double), stream), "cudaMemsetAsync");
  gr.dsink = dsink.as<double>();
  if (sink) check_cuda(cudaMemsetAsync(gr.dsink, 0, NH * sizeof(double), stream), "cudaMemsetAsync");
  gr.dkerple = dkerple.as<double>();
  gr.dfcum = dhp.fcum;
  gr.dfire = spec.fire() ? dhp.fire : nullptr;
  if (kerple) check_cuda(cudaMemsetAsync(gr.dkerple, 0, 2 * NH * sizeof(double), stream), "cudaMemsetAsync");

  // Stick-breaking's running sums at every key block's last key (SbScratch);
  // those dq never reaches (past the rows' keys) stay 0, as their sums are.
  const bool sb_on = attn::stick_breaking(spec);
  SbScratch sb;
  sb.blocks = tiles(Tn, kKeysPerBlock);
  const size_t sb_at = sb_on ? rows * NH * sb.blocks : 0;
  Scratch sb_dp(sb_on ? rows * NH * sizeof(double) : 0, stream, "cudaMallocAsync of the stick-breaking row sums");
  Scratch sb_taken(sb_at * sizeof(float), stream, "cudaMallocAsync of the stick-breaking block sums");
  Scratch sb_gw(sb_at * sizeof(double), stream, "cudaMallocAsync of the stick-breaking block sums");
  if (sb_on) {
    sb.dp = sb_dp.as<double>();
    sb.taken = sb_taken.as<float>();
    sb.gw = sb_gw.as<double>();
    check_cuda(cudaMemsetAsync(sb.taken, 0, sb_at * sizeof(float), stream), "cudaMemsetAsync");
    check_cuda(cudaMemsetAsync(sb.gw, 0, sb_at * sizeof(double), stream), "cudaMemsetAsync");
  }

  dispatch(D, spec.positivity, [&](auto d, auto phi) {
    constexpr int kD = decltype(d)::value;
    constexpr Positivity kPhi = decltype(phi)::value;
    if constexpr (kPhi == Positivity::Sigmoid) {
      if (sb_on) {
        GPT_LAUNCH(dim3(tiles(Tn, kRowsPerBlock), B * NH), Geom<kD>::kRowThreads, stream, sb_dq_kernel<kD>)(in, gr,
                                                                                                           sb);
        check_launch("sb_dq_kernel launch");
        GPT_LAUNCH(dim3(tiles(Tn, kKeysPerBlock), B * NH), Geom<kD>::kKeyThreads, stream, sb_dkdv_kernel<kD>)(in, gr,
                                                                                                            sb);
        check_launch("sb_dkdv_kernel launch");
        return;
      }
    }
    GPT_LAUNCH(dim3(tiles(Tn, kRowsPerBlock), B * NH), Geom<kD>::kRowThreads, stream, dq_kernel<kD, kPhi>)(in, gr);
    check_launch("dq_kernel launch");
    GPT_LAUNCH(dim3(tiles(Tn, kKeysPerBlock), B * NH), Geom<kD>::kKeyThreads, stream, dkdv_kernel<kD, kPhi>)(in, gr);
    check_launch("dkdv_kernel launch");
  });
  if (cosine) {
    const int threads = 256;
    GPT_LAUNCH(elementwise_blocks(rows * 2 * NH, threads), threads, stream, normalize_backward_kernel)(
        dqkv, dhat.as<float>(), qkv, rows, C, NH);
    check_launch("normalize_backward_kernel launch");
    if (far) {
      GPT_LAUNCH(elementwise_blocks(rows * 2 * NH, threads), threads, stream, normalize_backward_kernel)(
          dqkv_far, dhat_far.as<float>(), qkv_far, rows, C, NH);
      check_launch("normalize_backward_kernel launch (far copy)");
    }
  }
  if (learned) {
    GPT_LAUNCH(tiles(NP, 128), 128, stream, add_head_scale_grad_kernel)(dhp.scale, gr.dhead, NP);
    check_launch("add_head_scale_grad_kernel launch");
  }
  if (sink) {
    GPT_LAUNCH(tiles(NP, 128), 128, stream, add_head_scale_grad_kernel)(dhp.sink, gr.dsink, NP);
    check_launch("add_head_scale_grad_kernel launch (sink logits)");
  }
  if (kerple) {
    GPT_LAUNCH(tiles(2 * NP, 128), 128, stream, add_head_scale_grad_kernel)(dhp.kerple, gr.dkerple, 2 * NP);
    check_launch("add_head_scale_grad_kernel launch (KERPLE)");
  }
}

}  // namespace gpt::cuda
