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
//   tc_forward the same forward with q·kᵀ and the weighted sum on tensor
//             cores (attention/forward_tc.cuh; attention_forward_tc), and
//             stick-breaking's (attention/stick_breaking_tc.cuh).
//   diag      query rows; recomputes w from the stats (as the backward does)
//             and accumulates the per-head diagnostics (evaluation only).
//   dq        query rows; D_i = dy_i·y_i and, under sharpening, a first pass for
//             S_i = Σ_j a_ij h_ij; then dq_i and the ssmax scale's gradient.
//             Saves D_i, S_i for:
//   dkdv      key rows (FlashAttention-2's key-major backward): dk_j, dv_j
//             summed over the query tiles in registers, no atomics.
//   tc_dq, tc_dkdv the same backward with its products on tensor cores
//             (attention/backward_tc.cuh; attention_backward_tc).
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
#include "kernels/cuda/attention/backward.cuh"
#include "kernels/cuda/attention/backward_tc.cuh"
#include "kernels/cuda/attention/common.cuh"
#include "kernels/cuda/attention/forward.cuh"
#include "kernels/cuda/attention/forward_tc.cuh"
#include "kernels/cuda/attention/stick_breaking_tc.cuh"
#include "kernels/cuda/attention/stick_breaking.cuh"

namespace gpt::cuda {

namespace {

// ---- cosine scores ----------------------------------------------------------------------
// One thread per (row, q|k, head): dst (rows, 2C) = q̂, k̂ of qkv (rows, 3C),
// with the CPU kernel's rounding (norm in double, then 1/norm in float).
__device__ __forceinline__ float inv_head_norm(const float* x, int D) {
  float ss = 0.f;
  for (int d = 0; d < D; ++d) ss += x[d] * x[d];
  return 1.f / static_cast<float>(sqrt(static_cast<double>(ss) + attn::kNormEps * attn::kNormEps));
}

// Threads per block of the cosine score's normalisation kernels.
constexpr int kNormThreads = 256;

__global__ void __launch_bounds__(kNormThreads)
    normalize_kernel(float* dst, const float* qkv, size_t rows, int C, int NH) {
  GPT_BLOCK_BOUND(kNormThreads);
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * 2 * NH) return;
  const int D = C / NH, h = static_cast<int>(idx % NH), part = static_cast<int>(idx / NH % 2);
  const size_t r = idx / (2 * NH);
  const float* x = qkv + r * 3 * C + part * C + h * D;
  float* o = dst + r * 2 * C + part * C + h * D;
  const float inv = inv_head_norm(x, D);
  for (int d = 0; d < D; ++d) o[d] = x[d] * inv;
}

// Dual Chunk Attention's far boundary remap::far_end(m) of every query m of a
// sequence (the same for all): the table far_pair reads (common.cuh).
__global__ void __launch_bounds__(kNormThreads) far_end_kernel(int32_t* far_end, RopeSpec r, int T) {
  GPT_BLOCK_BOUND(kNormThreads);
  const int m = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (m < T) far_end[m] = remap::far_end(r, m);
}

// dqkv (q and k parts) += (dx̂ − (dx̂·x̂) x̂) / ‖x‖ for dhat (rows, 2C) = dL/d(x̂).
__global__ void __launch_bounds__(kNormThreads)
    normalize_backward_kernel(float* dqkv, const float* dhat, const float* qkv, size_t rows, int C, int NH) {
  GPT_BLOCK_BOUND(kNormThreads);
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

__global__ void __launch_bounds__(128) add_head_scale_grad_kernel(float* dhead_scale, const double* acc, int NH) {
  GPT_BLOCK_BOUND(128);
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
  GPT_CHECK(supported, fn, ": head size C/NH = ", D,
            " is not supported by the CUDA attention kernels; supported: 16, 32, 64, 128");
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
    const int threads = kNormThreads;
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
  in.fire_per_sequence = head.fire_per_sequence;
  in.doc = head.doc;
  return in;
}

// The far copy's q and k (or, for cosine scores, their normalised copy in norm_far).
// far_end: room for dual_chunk's table (T ints), null for every other rule.
void add_far_inputs(Inputs& in, const float* qkv_far, float* norm_far, int32_t* far_end, int B, int Tn, int C,
                    int NH, cudaStream_t stream) {
  if (!qkv_far) return;
  if (far_end) {
    GPT_LAUNCH(tiles(Tn, kNormThreads), kNormThreads, stream, far_end_kernel)(far_end, in.spec.rope, Tn);
    check_launch("far_end_kernel launch");
    in.far_end = far_end;
  }
  const Inputs f = make_inputs(qkv_far, norm_far, B, Tn, C, NH, in.spec,
                               {in.head_scale, in.head_sink, in.head_kerple, in.fcum, in.fire}, stream);
  in.qf = f.q;
  in.kf = f.k;
}

// Whether the call runs Dual Chunk Attention, whose far boundary the kernels
// read from a table (Inputs::far_end).
bool dual_chunk(const AttentionSpec& spec, const float* qkv_far) {
  return qkv_far && spec.rope.remap == RemapKind::DualChunk;
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

const char* tensor_core_fallback(const AttentionSpec& spec, int D) {
  (void)D;  // every head size of the float kernels (16, 32, 64, 128) has a tensor-core instantiation
  if (attn::stick_breaking(spec) && spec.score == Score::Cosine)
    return "stick-breaking with cosine scores: its tensor-core forward has no split-score (bf16 hi + lo) form "
           "(the float32 kernel runs)";
  if (spec.rope.remap == RemapKind::DualChunk)
    return "dual_chunk's per-row chunk boundaries (a table read per pair) made the tensor-core forward at head "
           "size 128 with cosine scores spill 8-36 bytes per thread for every run; the float32 kernel runs it";
  return nullptr;
}

namespace {

void forward(const char* fn, bool tensor_cores, float* out, float* stats, const float* qkv, int B, int Tn, int C,
             int NH, const AttentionSpec& spec, const HeadParams<float>& head, double* diag, cudaStream_t stream,
             const float* qkv_far) {
  check_args(fn, B, Tn, C, NH, spec, head);
  check_far(fn, spec, qkv_far);
  GPT_CHECK(out && qkv, fn, ": out and qkv must be non-null");
  GPT_CHECK(aligned16(out) && aligned16(qkv), fn, ": out and qkv must be 16-byte aligned");
  const int D = C / NH;
  GPT_CHECK(!dual_chunk(spec, qkv_far) || D != 16, fn,
            ": dual_chunk (Dual Chunk Attention) at head size 16 is not on CUDA: reading its per-row chunk "
            "boundaries made the head-size-16 forward kernels spill in every run (common.cuh, kFarTableAt); "
            "evaluate it with --device cpu");
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
  Scratch far_end(dual_chunk(spec, qkv_far) ? Tn * sizeof(int32_t) : 0, stream,
                  "cudaMallocAsync of dual_chunk's far boundaries");
  add_far_inputs(in, qkv_far, norm_far.as<float>(), far_end.as<int32_t>(), B, Tn, C, NH, stream);
  const dim3 grid(tiles(Tn, kRowsPerBlock), B * NH);
  dispatch(D, spec.positivity, [&](auto d, auto phi) {
    constexpr int kD = decltype(d)::value;
    constexpr Positivity kPhi = decltype(phi)::value;
    if constexpr (kPhi == Positivity::Sigmoid) {  // stick-breaking needs sigmoid (check_args)
      if (attn::stick_breaking(spec)) {
        // On tensor cores unless the diagnostics are asked for (the float32
        // kernel sums them as it walks; stick_breaking_tc.cuh).
        if (tensor_cores && !diag && !tensor_core_fallback(spec, kD)) {
          GPT_LAUNCH(grid, kTcThreads, stream, tc_sb_forward_kernel<kD>)(in, out, stats);
          check_launch("tc_sb_forward_kernel launch");
          return;
        }
        GPT_LAUNCH(grid, Geom<kD>::kRowThreads, stream, sb_forward_kernel<kD>)(in, out, stats, diag);
        check_launch("sb_forward_kernel launch");
        return;
      }
    }
    if (tensor_cores && !tensor_core_fallback(spec, kD)) {
      if (spec.score == Score::Cosine)  // q̂, k̂ split into bf16 hi + lo (forward_tc.cuh)
        GPT_LAUNCH(grid, kTcThreads, stream, tc_forward_kernel<kD, kPhi, true>)(in, out, stats);
      else
        GPT_LAUNCH(grid, kTcThreads, stream, tc_forward_kernel<kD, kPhi, false>)(in, out, stats);
      check_launch("tc_forward_kernel launch");
    } else {
      GPT_LAUNCH(grid, Geom<kD>::kRowThreads, stream, forward_kernel<kD, kPhi>)(in, out, stats);
      check_launch("forward_kernel launch");
    }
    if (diag) {
      GPT_LAUNCH(grid, Geom<kD>::kRowThreads, stream, diag_kernel<kD, kPhi>)(in, stats, diag);
      check_launch("diag_kernel launch");
    }
  });
}

}  // namespace

void attention_forward(float* out, float* stats, const float* qkv, int B, int Tn, int C, int NH,
                       const AttentionSpec& spec, const HeadParams<float>& head, double* diag, cudaStream_t stream,
                       const float* qkv_far) {
  forward("cuda::attention_forward", false, out, stats, qkv, B, Tn, C, NH, spec, head, diag, stream, qkv_far);
}

void attention_forward_tc(float* out, float* stats, const float* qkv, int B, int Tn, int C, int NH,
                          const AttentionSpec& spec, const HeadParams<float>& head, double* diag, cudaStream_t stream,
                          const float* qkv_far) {
  forward("cuda::attention_forward_tc", true, out, stats, qkv, B, Tn, C, NH, spec, head, diag, stream, qkv_far);
}

const char* tensor_core_backward_fallback(const AttentionSpec& spec, int D) {
  if (attn::stick_breaking(spec))
    return "stick-breaking's reverse scan over key blocks is not on tensor cores yet (the float32 kernels run)";
  if (D != 64)
    return "the tensor-core backward runs at head size 64 only (backward_tc.cuh, kTcBackwardAt): at 128 a warp's "
           "fragments of 16 rows x 128 channels (q and dq in tc_dq; k, v, dk and dv in tc_dkdv) with the stage math "
           "exceed 255 registers and spill (sm_90: tc_dq 96-152 bytes, tc_dkdv 528-944 bytes per thread), and 16 and "
           "32 are not instantiated (build time); the float32 kernels run";
  if (spec.score == Score::Cosine && spec.positivity != Positivity::Exp && spec.positivity != Positivity::Softplus)
    return "cosine scores with sigmoid or relu: the tensor-core backward's split-score kernels are instantiated for "
           "exp and softplus only, the cosine-score presets' positivities (backward_tc.cuh, kTcSplitBackwardFor; "
           "build time); the float32 kernels run";
  return nullptr;
}

namespace {

void backward(const char* fn, bool tensor_cores, float* dqkv, const HeadGrads<float>& dhp, const float* dout,
              const float* out, const float* stats, const float* qkv, int B, int Tn, int C, int NH,
              const AttentionSpec& spec, const HeadParams<float>& head, cudaStream_t stream, float* dqkv_far,
              const float* qkv_far) {
  check_args(fn, B, Tn, C, NH, spec, head);
  check_far(fn, spec, qkv_far);
  GPT_CHECK(spec.rope.remap != RemapKind::DualChunk,
            fn, ": dual_chunk (Dual Chunk Attention, a training-free method) runs forward only on "
            "CUDA: reading each row's chunk boundary in the backward kernels made dkdv_kernel<16> spill 44-52 bytes "
            "per thread in every run (docs/context_extension.md §2); train or fine-tune with it with --device cpu");
  GPT_CHECK(!qkv_far || (dqkv_far && aligned16(dqkv_far)),
            fn, ": a distance remapping needs a 16-byte aligned dqkv_far");
  GPT_CHECK(stats != nullptr, fn, ": the forward's stats are required");
  GPT_CHECK(!spec.learned_scale() || dhp.scale != nullptr, fn, ": ssmax needs dhead_scale");
  GPT_CHECK(!spec.learned_sink() || dhp.sink != nullptr, fn, ": the sink needs the sink gradients");
  GPT_CHECK(!spec.kerple() || dhp.kerple != nullptr, fn, ": KERPLE needs the gradients of r1, r2");
  GPT_CHECK(!spec.forget() || dhp.fcum != nullptr, fn, ": the forget gate needs dL/dc");
  GPT_CHECK(!spec.fire() || dhp.fire != nullptr, fn, ": FIRE needs dL/db (B, NH, T, T)");
  GPT_CHECK(dqkv && dout && out && qkv, fn, ": dqkv, dout, out and qkv must be non-null");
  GPT_CHECK(aligned16(dqkv) && aligned16(dout) && aligned16(out) && aligned16(qkv),
            fn, ": dqkv, dout, out and qkv must be 16-byte aligned");
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
  add_far_inputs(in, qkv_far, norm_far.as<float>(), nullptr, B, Tn, C, NH, stream);

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
        GPT_LAUNCH(dim3(tiles(Tn, kRowsPerBlock), B * NH), Geom<kD>::kRowThreads, stream, sb_dq_kernel<kD>)(in, gr, sb);
        check_launch("sb_dq_kernel launch");
        GPT_LAUNCH(dim3(tiles(Tn, kKeysPerBlock), B * NH), Geom<kD>::kKeyThreads, stream, sb_dkdv_kernel<kD>)
        (in, gr, sb);
        check_launch("sb_dkdv_kernel launch");
        return;
      }
    }
    // The tensor-core kernels where they are instantiated and take the spec
    // (tensor_core_backward_fallback says so, with its reason otherwise).
    [[maybe_unused]] const bool tc = tensor_cores && !tensor_core_backward_fallback(spec, kD);
    const dim3 rows_grid(tiles(Tn, kRowsPerBlock), B * NH), keys_grid(tiles(Tn, kKeysPerBlock), B * NH);
    if constexpr (kTcBackwardAt<kD>) {
      if (tc && spec.score != Score::Cosine) {
        GPT_LAUNCH(rows_grid, kTcThreads, stream, tc_dq_kernel<kD, kPhi, false>)(in, gr);
        check_launch("tc_dq_kernel launch");
        GPT_LAUNCH(keys_grid, kTcThreads, stream, tc_dkdv_kernel<kD, kPhi, false>)(in, gr);
        check_launch("tc_dkdv_kernel launch");
        return;
      }
      if constexpr (kTcSplitBackwardFor<kPhi>) {
        if (tc) {  // cosine scores: q̂, k̂ split into bf16 hi + lo (backward_tc.cuh)
          GPT_LAUNCH(rows_grid, kTcThreads, stream, tc_dq_kernel<kD, kPhi, true>)(in, gr);
          check_launch("tc_dq_kernel launch");
          GPT_LAUNCH(keys_grid, kTcThreads, stream, tc_dkdv_kernel<kD, kPhi, true>)(in, gr);
          check_launch("tc_dkdv_kernel launch");
          return;
        }
      }
    }
    GPT_LAUNCH(rows_grid, Geom<kD>::kRowThreads, stream, dq_kernel<kD, kPhi>)(in, gr);
    check_launch("dq_kernel launch");
    GPT_LAUNCH(keys_grid, Geom<kD>::kKeyThreads, stream, dkdv_kernel<kD, kPhi>)(in, gr);
    check_launch("dkdv_kernel launch");
  });
  if (cosine) {
    const int threads = kNormThreads;
    GPT_LAUNCH(elementwise_blocks(rows * 2 * NH, threads), threads, stream, normalize_backward_kernel)
    (dqkv, dhat.as<float>(), qkv, rows, C, NH);
    check_launch("normalize_backward_kernel launch");
    if (far) {
      GPT_LAUNCH(elementwise_blocks(rows * 2 * NH, threads), threads, stream, normalize_backward_kernel)
      (dqkv_far, dhat_far.as<float>(), qkv_far, rows, C, NH);
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

}  // namespace

void attention_backward(float* dqkv, const HeadGrads<float>& dhp, const float* dout, const float* out,
                        const float* stats, const float* qkv, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                        const HeadParams<float>& head, cudaStream_t stream, float* dqkv_far, const float* qkv_far) {
  backward("cuda::attention_backward", false, dqkv, dhp, dout, out, stats, qkv, B, Tn, C, NH, spec, head, stream,
           dqkv_far, qkv_far);
}

void attention_backward_tc(float* dqkv, const HeadGrads<float>& dhp, const float* dout, const float* out,
                           const float* stats, const float* qkv, int B, int Tn, int C, int NH,
                           const AttentionSpec& spec, const HeadParams<float>& head, cudaStream_t stream,
                           float* dqkv_far, const float* qkv_far) {
  backward("cuda::attention_backward_tc", true, dqkv, dhp, dout, out, stats, qkv, B, Tn, C, NH, spec, head, stream,
           dqkv_far, qkv_far);
}

}  // namespace gpt::cuda
