// The tensor-core layer (kernels/cuda/mma_layout.h, mma.cuh) against a table
// read off the PTX ISA's fragment figures (§9.7.14.5.8, "Matrix Fragments
// for mma.m16n8k16 with floating point type", figures for A, B and C/D with
// .bf16; §9.7.14.5.15, ldmatrix's fragment figure). The figures say, for
// each element of a matrix, which lane holds it and in which position; the
// table below is written that way round (element -> holder), the opposite
// way to mma_layout.h's maps (holder -> element) and to the emulator's
// register-by-register code, so a mistake shared by two of them still
// disagrees with the third.
//
// MmaLayout.* needs no device. CudaMmaLayout.* run the instructions: on the
// CUDA emulator in CI, on a GPU as the first step of scripts/gpu_check.sh,
// where they check the table against the hardware itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/bf16_round.h"
#include "kernels/cuda/mma_layout.h"
#ifdef GPT_HAVE_CUDA
#include "backend/backend.h"
#include "kernels/cuda/mma_probe.h"
#endif

namespace gpt {
namespace {

namespace mma = gpt::cuda::mma;

struct Holder {
  int lane, elem;  // elem: a0..a7, b0..b3, c0..c3; for ldmatrix the half (0 low, 1 high)
  bool operator==(const Holder&) const = default;
};

// A 16x16: rows r and r + 8 are held by the same four lanes 4(r mod 8) ..
// 4(r mod 8) + 3, two adjacent columns each; the right half (columns 8..15)
// in a4..a7, the lower half (rows 8..15) in a2 a3 / a6 a7.
Holder holds_a(int r, int c) { return {4 * (r % 8) + (c % 8) / 2, c % 2 + 2 * (r / 8) + 4 * (c / 8)}; }
// B 16x8 (k, n): column n is held by lanes 4n .. 4n + 3, two adjacent k
// each; k 8..15 in b2 b3.
Holder holds_b(int k, int n) { return {4 * n + (k % 8) / 2, k % 2 + 2 * (k / 8)}; }
// C/D 16x8: like A's left half, rows 8..15 in c2 c3.
Holder holds_c(int r, int c) { return {4 * (r % 8) + c / 2, c % 2 + 2 * (r / 8)}; }
// ldmatrix, element (r, c) of an 8x8 matrix: a row is spread over four
// lanes 4r .. 4r + 3, two columns each; .trans swaps the roles of r and c.
Holder holds_ld(int r, int c, bool trans) {
  return trans ? Holder{4 * c + r / 2, r % 2} : Holder{4 * r + c / 2, c % 2};
}

TEST(MmaLayout, KernelMapsAreThePtxTable) {
  std::vector<int> seen_a(256, 0), seen_b(128, 0), seen_c(128, 0);
  for (int l = 0; l < 32; ++l) {
    for (int i = 0; i < mma::kElemsA; ++i) {
      const int r = mma::a_row(l, i), c = mma::a_col(l, i);
      ASSERT_TRUE(r >= 0 && r < 16 && c >= 0 && c < 16) << "a" << i << " lane " << l;
      EXPECT_EQ(holds_a(r, c), (Holder{l, i})) << "A(" << r << "," << c << ") from a" << i << " of lane " << l;
      ++seen_a[r * 16 + c];
    }
    for (int i = 0; i < mma::kElemsB; ++i) {
      const int k = mma::b_row(l, i), n = mma::b_col(l, i);
      ASSERT_TRUE(k >= 0 && k < 16 && n >= 0 && n < 8) << "b" << i << " lane " << l;
      EXPECT_EQ(holds_b(k, n), (Holder{l, i})) << "B(" << k << "," << n << ") from b" << i << " of lane " << l;
      ++seen_b[k * 8 + n];
    }
    for (int i = 0; i < mma::kElemsC; ++i) {
      const int r = mma::c_row(l, i), c = mma::c_col(l, i);
      ASSERT_TRUE(r >= 0 && r < 16 && c >= 0 && c < 8) << "c" << i << " lane " << l;
      EXPECT_EQ(holds_c(r, c), (Holder{l, i})) << "C(" << r << "," << c << ") from c" << i << " of lane " << l;
      ++seen_c[r * 8 + c];
    }
    for (bool trans : {false, true})
      for (int h = 0; h < 2; ++h) {
        const int r = mma::ld_row(l, h, trans), c = mma::ld_col(l, h, trans);
        EXPECT_EQ(holds_ld(r, c, trans), (Holder{l, h})) << "ldmatrix trans " << trans << " lane " << l << " half " << h;
      }
    // Lanes 8m .. 8m + 7 give rows 0..7 of matrix m.
    EXPECT_EQ(mma::ld_address_matrix(l) * 8 + mma::ld_address_row(l), l);
  }
  // Every element of every operand is held exactly once.
  for (int v : seen_a) EXPECT_EQ(v, 1);
  for (int v : seen_b) EXPECT_EQ(v, 1);
  for (int v : seen_c) EXPECT_EQ(v, 1);
}

#ifdef GPT_HAVE_CUDA

class CudaMmaLayout : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) GTEST_SKIP() << "no CUDA device (" << why << ")";
  }
};

uint16_t bits_of(float x) { return round_to_bf16_bits(x); }
float value_of(uint16_t b) { return bf16_bits_to_float(b); }

// Small integers: every product and sum below is exact in float32, so the
// instruction's result must equal the reference exactly, on any hardware.
TEST_F(CudaMmaLayout, MmaFragmentsAreThePtxTable) {
  std::vector<int> a_at(256), b_at(128), c_at(128);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) a_at[8 * holds_a(r, c).lane + holds_a(r, c).elem] = r * 16 + c;
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) b_at[4 * holds_b(k, n).lane + holds_b(k, n).elem] = k * 8 + n;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c) c_at[4 * holds_c(r, c).lane + holds_c(r, c).elem] = r * 8 + c;
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> small(-4, 4);
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<uint16_t> A(256), B(128);
    std::vector<float> C(128), d(128, NAN);
    for (auto& x : A) x = bits_of(float(small(rng)));
    for (auto& x : B) x = bits_of(float(small(rng)));
    for (auto& x : C) x = float(small(rng));
    cuda::mma_probe::mma_by_table(A.data(), B.data(), C.data(), a_at.data(), b_at.data(), c_at.data(), d.data());
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 8; ++c) {
        double want = C[r * 8 + c];
        for (int k = 0; k < 16; ++k) want += double(value_of(A[r * 16 + k])) * value_of(B[k * 8 + c]);
        const Holder h = holds_c(r, c);
        EXPECT_EQ(d[4 * h.lane + h.elem], want) << "D(" << r << "," << c << ") in c" << h.elem << " of lane " << h.lane
                                                << ", trial " << trial;
      }
  }
}

// Distinct values 1..256 (exact in bf16) in four 8x8 matrices: each lane's
// registers must hold the elements the table names, for every count and
// with and without .trans.
TEST_F(CudaMmaLayout, LdmatrixFragmentsAreThePtxTable) {
  std::vector<uint16_t> M(256);
  for (int e = 0; e < 256; ++e) M[e] = bits_of(float(e + 1));
  for (int num : {1, 2, 4})
    for (bool trans : {false, true}) {
      std::vector<uint32_t> out(128, 0);
      cuda::mma_probe::ldmatrix_raw(M.data(), num, trans, out.data());
      for (int m = 0; m < num; ++m)
        for (int r = 0; r < 8; ++r)
          for (int c = 0; c < 8; ++c) {
            const Holder h = holds_ld(r, c, trans);
            const uint16_t got = static_cast<uint16_t>(out[4 * h.lane + m] >> (16 * h.elem));
            EXPECT_EQ(value_of(got), value_of(M[64 * m + 8 * r + c]))
                << "x" << num << (trans ? ".trans" : "") << " matrix " << m << " (" << r << "," << c << ") in lane "
                << h.lane << " half " << h.elem;
          }
    }
}

// An attention tile as kernels form it (ldmatrix for every operand, results
// placed by mma_layout.h): S = Q·Kᵀ and O = Q·V against a double reference.
// Products of bf16 values are exact in float32; the accumulation may round
// (the emulator once, a tensor core per partial sum): |error| <= 1e-5·Σ|q·k|.
TEST_F(CudaMmaLayout, AttentionTileMatchesADoubleReference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<uint16_t> Q(256), K(128), V(128);
  for (auto& x : Q) x = bits_of(u(rng));
  for (auto& x : K) x = bits_of(u(rng));
  for (auto& x : V) x = bits_of(u(rng));
  std::vector<float> S(128, NAN), O(128, NAN);
  cuda::mma_probe::attention_tile(Q.data(), K.data(), V.data(), S.data(), O.data());
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double s = 0, s_abs = 0, o = 0, o_abs = 0;
      for (int k = 0; k < 16; ++k) {
        const double q = value_of(Q[i * 16 + k]);
        s += q * value_of(K[j * 16 + k]);
        s_abs += std::fabs(q * value_of(K[j * 16 + k]));
        o += q * value_of(V[k * 8 + j]);
        o_abs += std::fabs(q * value_of(V[k * 8 + j]));
      }
      EXPECT_NEAR(S[i * 8 + j], s, 1e-5 * s_abs + 1e-30) << "S(" << i << "," << j << ")";
      EXPECT_NEAR(O[i * 8 + j], o, 1e-5 * o_abs + 1e-30) << "O(" << i << "," << j << ")";
    }
}

#endif  // GPT_HAVE_CUDA

}  // namespace
}  // namespace gpt
