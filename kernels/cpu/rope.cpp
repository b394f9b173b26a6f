// Rotary position embedding (RoPE) on the q and k parts of qkv over the first
// d_r channels of a head (d_r = D unless partial): x[i] and x[i + d_r/2]
// ("half" layout; interleaved: x[2i] and x[2i + 1], rope::pair_first /
// pair_second) form the pair rotated by angle (pos0 + t) · θ'_i (t: the
// token's index, or its position id where ids are given), with θ'_i = rope::inv_freq of kernels/attention_spec.h
// (θ^(-2i/d_r), or one of the context-extension rules for windows of L = pos0 + T tokens); channels past d_r pass
// through. The angles are computed in double because evaluation positions reach ~16x the training context, where a
// float angle would lose several bits before the sine is even taken.
#include "kernels/cpu/cpu_kernels.h"

#include <cmath>
#include <vector>

#include "core/check.h"

namespace gpt::cpu {

namespace {

constexpr double kMinParallelWork = 1 << 14;

void check_shapes(int B, int Tn, int C, int NH, const RopeSpec& rs) {
  const double theta = rs.theta;
  GPT_CHECK(B > 0 && Tn > 0 && C > 0 && NH > 0, "rope: B, T, C, NH must be positive, got B=", B, " T=", Tn, " C=", C,
            " NH=", NH);
  GPT_CHECK(C % NH == 0 && (C / NH) % 2 == 0, "rope: the head size C/NH must be an even integer, got C=", C,
            " NH=", NH);
  GPT_CHECK(theta > 0.0, "rope: theta must be positive, got ", theta);
  const int d_r = rope::dims(rs, C / NH);
  GPT_CHECK(d_r >= 2 && d_r % 2 == 0 && d_r <= C / NH,
            "rope: the rotated dimensions must be even and within the head (", C / NH, "), got ", d_r);
}

// θ'_i for i < d_r/2, shared by all positions of windows of L tokens.
std::vector<double> inverse_frequencies(const RopeSpec& rs, int d_r, int L) {
  std::vector<double> f(d_r / 2);
  for (int i = 0; i < d_r / 2; ++i) f[i] = rope::inv_freq(rs, i, d_r, L);
  return f;
}

// cos/sin of the angles of one position.
void position_angles(double* cs, double* sn, const std::vector<double>& inv_freq, double pos) {
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double a = pos * inv_freq[i];
    cs[i] = std::cos(a);
    sn[i] = std::sin(a);
  }
}

// Applies the rotation R (sign = +1) or its transpose Rᵀ (sign = -1) to one
// head vector x (D channels, the first 2·half rotated), writing
// (accumulate = false) or adding into y.
template <typename T>
void rotate_head(T* y, const T* x, const double* cs, const double* sn, const RopeSpec& rs, int half, int D, double sign,
                 bool accumulate) {
  for (int c = 2 * half; c < D; ++c) y[c] = accumulate ? y[c] + x[c] : x[c];
  for (int i = 0; i < half; ++i) {
    const int a = rope::pair_first(rs, i, half), b = rope::pair_second(rs, i, half);
    const double x1 = x[a], x2 = x[b];
    const double s = sign * sn[i];
    const T y1 = static_cast<T>(x1 * cs[i] - x2 * s);
    const T y2 = static_cast<T>(x1 * s + x2 * cs[i]);
    if (accumulate) {
      y[a] += y1;
      y[b] += y2;
    } else {
      y[a] = y1;
      y[b] = y2;
    }
  }
}

// Shared body of forward (R, write) and backward (Rᵀ, accumulate). The
// cos/sin of every position are computed once per call (Tn·D/2 of each) and
// shared by the B sequences. With rs.far_positions (the far copy of a
// distance remapping) q and k of token t are rotated at
// remap::far_query_pos(t) and remap::far_key_pos(t) instead of t, each with
// its own table.
template <typename T>
void rope_apply(T* dst, const T* src, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0, const int32_t* ids,
                double sign, bool accumulate) {
  check_shapes(B, Tn, C, NH, rs);
  const bool far = rs.far_positions;
  GPT_CHECK(!(far && ids), "rope: position ids do not compose with the far copy of a distance remapping");
  const int D = C / NH, d_r = rope::dims(rs, D), half = d_r / 2;
  const std::vector<double> inv_freq = inverse_frequencies(rs, d_r, pos0 + Tn);
  const size_t C3 = 3 * static_cast<size_t>(C);
  // Without position ids the angles depend on t alone: one table for the B
  // sequences. With them each token has its own, made where it is used.
  const size_t table_rows = ids ? 0 : static_cast<size_t>(Tn);
  std::vector<double> cs(table_rows * half), sn(cs.size());
  std::vector<double> cs_k(far ? cs.size() : 0), sn_k(cs_k.size());
  // Tiny calls (gradient checks) run on one thread: a parallel region would
  // cost more than the work.
#pragma omp parallel if (static_cast <double>(B) * Tn * C > kMinParallelWork)
  {
#pragma omp for schedule(static)
    for (int t = 0; t < static_cast<int>(table_rows); ++t) {
      const size_t o = static_cast<size_t>(t) * half;
      const int pos = pos0 + t;
      position_angles(cs.data() + o, sn.data() + o, inv_freq, far ? remap::far_query_pos(rs, pos) : pos);
      if (far) position_angles(cs_k.data() + o, sn_k.data() + o, inv_freq, remap::far_key_pos(rs, pos));
    }
    std::vector<double> own_cs(ids ? half : 0), own_sn(own_cs.size());
#pragma omp for schedule(static)
    for (long bt = 0; bt < static_cast<long>(B) * Tn; ++bt) {
      const size_t t = static_cast<size_t>(bt % Tn);
      const double* c = nullptr;
      const double* s = nullptr;
      if (ids) {
        position_angles(own_cs.data(), own_sn.data(), inv_freq, static_cast<double>(pos0) + ids[bt]);
        c = own_cs.data();
        s = own_sn.data();
      } else {
        c = cs.data() + t * half;
        s = sn.data() + t * half;
      }
      // (B,T,3C) row bt: q heads at h*D, k heads at C + h*D, v at 2C..3C
      T* y = dst + bt * C3;
      const T* x = src + bt * C3;
      const double* ck = far ? cs_k.data() + t * half : c;
      const double* sk = far ? sn_k.data() + t * half : s;
      for (int h = 0; h < 2 * NH; ++h) {
        const size_t off = static_cast<size_t>(h) * D;  // q then k: contiguous 2C columns
        rotate_head(y + off, x + off, h < NH ? c : ck, h < NH ? s : sk, rs, half, D, sign, accumulate);
      }
      for (size_t col = 2 * static_cast<size_t>(C); col < C3; ++col) y[col] = accumulate ? y[col] + x[col] : x[col];
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(T* out, const T* inp, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0,
                  const int32_t* pos) {
  rope_apply(out, inp, B, Tn, C, NH, rs, pos0, pos, +1.0, false);
}

template <typename T>
void rope_backward(T* dinp, const T* dout, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0,
                   const int32_t* pos) {
  rope_apply(dinp, dout, B, Tn, C, NH, rs, pos0, pos, -1.0, true);
}

template void rope_forward<float>(float*, const float*, int, int, int, int, const RopeSpec&, int, const int32_t*);
template void rope_forward<double>(double*, const double*, int, int, int, int, const RopeSpec&, int, const int32_t*);
template void rope_backward<float>(float*, const float*, int, int, int, int, const RopeSpec&, int, const int32_t*);
template void rope_backward<double>(double*, const double*, int, int, int, int, const RopeSpec&, int, const int32_t*);

}  // namespace gpt::cpu
