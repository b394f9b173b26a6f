// The attention kernels' shared parts: the tile geometry, the Slice<D> row
// type, the kernels' arguments (Inputs, RowConsts), the logit of a pair, the
// walk of a block of query rows over its key tiles (KeyWalk) and the query of
// a near or far part.
// Included once, by kernels/cuda/attention.cu (one translation unit: the
// kernels and their launches are instantiated together).
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention_spec.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_syntax.h"

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
__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
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
// Maximum over the L lanes of a group (all lanes of the warp must call it).
template <int L>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
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
// *dst = max(*dst, the warp's largest v), for v >= 0 (and *dst >= 0): such
// doubles order as their bit patterns, so the integer atomicMax serves.
__device__ __forceinline__ void warp_atomic_max(double* dst, double v) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0)
    atomicMax(reinterpret_cast<unsigned long long*>(dst), static_cast<unsigned long long>(__double_as_longlong(v)));
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
  bool fire_per_sequence = false;  // the table is (B,NH,T,T), one per sequence (HeadParams::fire_per_sequence)
  const int32_t* doc = nullptr;  // the document mask's (B,T) document starts (HeadParams::doc), or null
  const int32_t* far_end = nullptr;  // dual_chunk: remap::far_end(m) for m = 0..T−1 (far_pair), else null
};

// The constants of stages 1–2 for row i (1-based) of head h, exactly as the
// CPU kernel rounds them: lf = float(λ_i·f) for the logits, and λ_i, f
// separately for the backward's dσ = λ_i·f·dx.
struct RowConsts {
  float lf, lambda, f, bias, slope;
  float zeta;              // the sink key's logit (attn::sink_logit)
  float r1, r2, dr1, dr2;  // KERPLE's r₁, r₂ of the head and dr/dρ (attn::kerple_r)
  const float* fc;         // the forget gate's c of this (b,h) slice (T values), or null
  const float* fb;         // FIRE's table of head h (of sequence b where per sequence) (T, T), or null
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
  rc.fb = s.fire() && in.fire ? in.fire + fire_slice(in.fire_per_sequence, b, h, NH, T) : nullptr;
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
// Scale-invariant attention (attn::si_*): a_t of the pair at distance t =
// i0 − j (1 for every other scale), in float.
__device__ __forceinline__ float si_gain(const AttentionSpec& s, int i0, int j) {
  if (!attn::scale_invariant(s)) return 1.f;
  return sqrtf(2.f * log1pf(static_cast<float>(i0 > j ? i0 - j : 0) / static_cast<float>(s.tau)) + 1.f);
}
__device__ __forceinline__ float logit(const AttentionSpec& s, const RowConsts& rc, float lf, float qk, int i0, int j) {
  if (attn::scale_invariant(s)) {  // σ′ = a_t·σ + m_t/lf, as the CPU kernels
    const float l = log1pf(static_cast<float>(i0 > j ? i0 - j : 0) / static_cast<float>(s.tau));
    qk = sqrtf(2.f * l + 1.f) * qk - 2.f * l / lf;
  }
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

// The spec of this block's sequence with the template's φ written in, so
// that attn:: functions that switch on s.positivity fold to the one case;
// with a document mask, its sequence's document starts (every attention
// kernel's blockIdx.y is b·NH + h).
template <Positivity PHI>
__device__ __forceinline__ AttentionSpec spec_with(const Inputs& in) {
  AttentionSpec s = attn::for_sequence(in.spec, in.doc, static_cast<int>(blockIdx.y) / in.NH, in.T);
  s.positivity = PHI;
  return s;
}

__device__ __forceinline__ size_t row_offset(int b, int t, int T, size_t stride, int h, int D) {
  return (static_cast<size_t>(b) * T + t) * stride + static_cast<size_t>(h) * D;
}

// A distance remapping splits every key loop into two parts: part 0 the near
// pairs, scored with q and k; part 1 the far pairs (remap::far), scored with
// the far copies q̃ and k̃. Without a remapping part 0 is the whole loop.
//
// The far test is remap::far: for every remapping but dual_chunk m − n >= W,
// from the spec alone; dual_chunk's per-row chunk boundary remap::far_end(m)
// is read from a table the host fills once per call (Inputs::far_end,
// far_end_kernel in attention.cu), by the float32 forward kernels only
// (kFarTable: forward, diagnostics, stick-breaking's forward). The backward
// refuses dual_chunk (attention_backward), as reading the table there made
// dkdv_kernel<16, *> spill 44-52 bytes per thread on sm_90, and the
// tensor-core forward leaves it to the float32 one (tensor_core_fallback), as
// it made tc_forward_kernel<128, *, cosine> spill 8-36; computing the boundary
// per pair or holding it per row pushed forward_kernel<32> and <64> past 255
// registers (PtxasResources). With kFarTable false a kernel is the one it was.
// Whether the float32 forward kernels of head size D read the table: not at
// 16, where it made forward_kernel<16> spill 16-32 bytes (the host refuses
// dual_chunk there, attention.cu).
template <int D>
inline constexpr bool kFarTableAt = D != 16;
template <bool kFarTable>
__device__ __forceinline__ bool far_pair(const RopeSpec& r, const Inputs& in, int m, int n) {
  if (r.remap == RemapKind::None) return false;
  if constexpr (kFarTable) {
    if (in.far_end) return n < in.far_end[m];  // m < T: callers test row_ok first
  }
  return m - n >= r.remap_window;
}
template <bool kFarTable>
__device__ __forceinline__ bool pair_in(const AttentionSpec& s, const Inputs& in, int part, int i0, int j) {
  return attn::key_kept(s, i0, j) && (far_pair<kFarTable>(s.rope, in, i0, j) == (part == 1));
}
// Whether the tile of rows q_first..q_last and keys k_first..k_last holds a
// pair of the part (uniform across a block, like block_seen). The far keys of
// a row are a prefix that never shrinks with the row (remap::far_end), so the
// last row has the most far keys and the first the most near ones.
template <bool kFarTable>
__device__ __forceinline__ bool part_tile_seen(const AttentionSpec& s, const Inputs& in, int part, int q_first,
                                               int q_last, int k_first, int k_last) {
  if (!attn::block_seen(s, q_first, q_last, k_first, k_last)) return false;
  if (!remap::on(s.rope)) return part == 0;
  if constexpr (kFarTable) {
    if (in.far_end)  // (the block's last row may lie past T; the first never does)
      return part == 1 ? k_first < in.far_end[q_last < in.T ? q_last : in.T - 1] : k_last >= in.far_end[q_first];
  }
  const int W = s.rope.remap_window;
  return part == 1 ? k_first <= q_last - W : k_last > q_first - W;
}

__device__ __forceinline__ int key_parts(const Inputs& in) { return in.qf ? 2 : 1; }

// The walk of a block of kRowsPerBlock query rows (q0, q0+1, ...) over the keys
// of its head, tile by tile: written once for every row kernel (forward, diag,
// dq, stick-breaking). Part 0 walks the near keys k, then, under a distance
// remapping, part 1 walks the far copy k̃; within a part the tiles of kKeyTile
// keys go from the first key on, or from the last back for stick-breaking.
// Keys past the block's last row are never visited (causal).
//
//   for (KeyWalk<D> w(s, in, b, h, q0); w.next();) {  // tiles some row sees
//     pq.select(q, w, i0, row_ok);                    // q or q̃ for w.part
//     w.load(ks, vs);                                 // keys w.j0 .. w.j0 + kKeyTile − 1
//     ...
//   }
//
// next() skips a tile no row of the block sees; step() visits every tile and
// seen() says whether the block sees it. Both are uniform across the block,
// so the barriers inside load() are reached by every thread or by none.
// kFarTable: the walk of a float32 forward kernel, which reads dual_chunk's
// boundaries (far_pair); every other kernel walks without.
template <int D, bool kFarTable = false>
struct KeyWalk {
  const AttentionSpec& s;
  const Inputs& in;
  const float *k, *kf, *v;  // this head's rows: keys, far keys, values
  int b, h, q0, n_tiles, parts;
  bool from_last;
  int it = -1, part = 0, j0 = 0;  // the tile: its part and its first key

  __device__ __forceinline__ KeyWalk(const AttentionSpec& spec, const Inputs& inputs, int b_, int h_, int q0_,
                                     bool from_last_ = false)
      : s(spec),
        in(inputs),
        k(inputs.k + row_offset(b_, 0, inputs.T, inputs.qk_stride, h_, D)),
        kf(inputs.kf ? inputs.kf + row_offset(b_, 0, inputs.T, inputs.qk_stride, h_, D) : k),
        v(inputs.v + row_offset(b_, 0, inputs.T, inputs.v_stride, h_, D)),
        b(b_),
        h(h_),
        q0(q0_),
        n_tiles(ceil_div(min(inputs.T, q0_ + kRowsPerBlock), kKeyTile)),
        parts(key_parts(inputs)),
        from_last(from_last_) {}

  // To the next tile, seen or not; false after the last.
  __device__ __forceinline__ bool step() {
    if (++it >= parts * n_tiles) return false;
    part = it / n_tiles;
    const int t = it % n_tiles;
    j0 = (from_last ? n_tiles - 1 - t : t) * kKeyTile;
    return true;
  }
  // Whether some row of the block has a pair of this part among the tile's keys.
  __device__ __forceinline__ bool seen() const {
    return part_tile_seen<kFarTable>(s, in, part, q0, q0 + kRowsPerBlock - 1, j0, j0 + kKeyTile - 1);
  }
  // To the next tile the block sees; false after the last.
  __device__ __forceinline__ bool next() {
    while (step())
      if (seen()) return true;
    return false;
  }
  // Waits until every thread is done with the previous tile, loads this
  // tile's keys (of its part) into ks and, unless vs is null, its values, and
  // waits for the loads.
  __device__ __forceinline__ void load(float4* ks, float4* vs) const {
    __syncthreads();
    load_tile<D>(ks, part ? kf : k, in.qk_stride, j0, kKeyTile, in.T);
    if (vs) load_tile<D>(vs, v, in.v_stride, j0, kKeyTile, in.T);
    __syncthreads();
  }
};

// The query row a thread holds across the parts of its key walks: q in part
// 0, q̃ in part 1 (reloaded when the part changes; it outlives one walk).
template <int D>
struct PartQuery {
  int part = 0;  // the part q holds
  // Loads the query row of the walk's part into q if it is not there yet;
  // true when that starts the far part (part 1).
  template <bool kFarTable>
  __device__ bool select(Slice<D>& q, const KeyWalk<D, kFarTable>& w, int i0, bool row_ok) {
    if (w.part == part) return false;
    part = w.part;
    const Inputs& in = w.in;
    q.load((part ? in.qf : in.q) + row_offset(w.b, i0, in.T, in.qk_stride, w.h, D), threadIdx.x % Geom<D>::L, row_ok);
    return part == 1;
  }
};

}  // namespace
}  // namespace gpt::cuda
