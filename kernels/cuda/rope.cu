// RoPE: one thread per output element of (B,T,3C), with every frequency
// rule and remapping of kernels/attention/context_rules.h; the backward
// rotates back and accumulates.
// Contracts: kernels/cuda/cuda_kernels.h.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/attention_spec.h"
#include "kernels/bf16_round.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_syntax.h"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/cuda/reduce.cuh"

namespace gpt::cuda {

namespace {

// ---- RoPE: one thread per output element of (B,T,3C) -------------------------------------
// sign +1 applies R, -1 its transpose; accumulate adds into dst. The pairs are
// (k, k + d_r/2), or (2k, 2k + 1) interleaved, over the first d_r channels of
// a head; the rest pass through.
__global__ void __launch_bounds__(kThreads)
    rope_kernel(float* dst, const float* src, int Tn, int C, int NH, RopeSpec rs, int pos0, const int32_t* ids,
                double sign, bool accumulate, size_t total) {
  GPT_BLOCK_BOUND(kThreads);
  const size_t C3 = 3 * size_t(C);
  const int D = C / NH, d_r = rope::dims(rs, D), half = d_r / 2;
  GPT_GRID_STRIDE(i, total) {
    const size_t bt = i / C3, col = i % C3;
    const int j = static_cast<int>(col % D);
    float y;
    if (col >= 2 * size_t(C) || j >= d_r) {
      y = src[i];  // v and the channels past d_r pass through
    } else {
      const int k = rope::pair_of(rs, j, half);    // pair k: (k, k + half) or (2k, 2k + 1)
      const float* x = src + bt * C3 + (col - j);  // this head's D values
      const int t = pos0 + (ids ? ids[bt] : static_cast<int>(bt % Tn));
      // The far copy of a distance remapping rotates q and k at their own positions.
      const double pos = !rs.far_positions ? double(t)
                         : col < size_t(C) ? remap::far_query_pos(rs, t)
                                           : remap::far_key_pos(rs, t);
      const double a = pos * rope::inv_freq(rs, k, d_r, pos0 + Tn);
      double sn, cs;
      sincos(a, &sn, &cs);
      sn *= sign;
      const double x1 = x[rope::pair_first(rs, k, half)], x2 = x[rope::pair_second(rs, k, half)];
      y = static_cast<float>(rope::first_of_pair(rs, j, half) ? x1 * cs - x2 * sn : x1 * sn + x2 * cs);
    }
    dst[i] = accumulate ? dst[i] + y : y;
  }
}

void rope_apply(float* dst, const float* src, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0,
                const int32_t* ids, double sign, bool accumulate, cudaStream_t stream) {
  GPT_CHECK(B > 0 && Tn > 0 && C > 0 && NH > 0, "rope: B, T, C, NH must be positive, got B=", B, " T=", Tn, " C=", C,
            " NH=", NH);
  GPT_CHECK(C % NH == 0 && (C / NH) % 2 == 0, "rope: the head size C/NH must be an even integer, got C=", C,
            " NH=", NH);
  GPT_CHECK(rs.theta > 0.0, "rope: theta must be positive, got ", rs.theta);
  GPT_CHECK(!(rs.far_positions && ids), "rope: position ids do not compose with the far copy of a distance remapping");
  const int d_r = rope::dims(rs, C / NH);
  GPT_CHECK(d_r >= 2 && d_r % 2 == 0 && d_r <= C / NH,
            "rope: the rotated dimensions must be even and within the head (", C / NH, "), got ", d_r);
  const size_t total = size_t(B) * Tn * 3 * C;
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, rope_kernel)
  (dst, src, Tn, C, NH, rs, pos0, ids, sign, accumulate, total);
  GPT_CUDA_CHECK_LAUNCH("rope_kernel");
}

}  // namespace

void rope_forward(float* out, const float* inp, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0,
                  const int32_t* pos, cudaStream_t stream) {
  rope_apply(out, inp, B, Tn, C, NH, rs, pos0, pos, +1.0, false, stream);
}

void rope_backward(float* dinp, const float* dout, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0,
                   const int32_t* pos, cudaStream_t stream) {
  rope_apply(dinp, dout, B, Tn, C, NH, rs, pos0, pos, -1.0, true, stream);
}

}  // namespace gpt::cuda
