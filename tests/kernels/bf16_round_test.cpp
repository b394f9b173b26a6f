// kernels/bf16_round.h on the CPU (the CUDA backend's bf16 GEMM operands are
// rounded by the same function on the device): exact values, ties to even in
// both directions, just above and below a tie, signs, zeros, infinities,
// NaNs (quiet, signalling, large payloads), overflow to infinity at the top
// of the range, subnormals, and the nearest-neighbour property on random
// floats.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/bf16_round.h"

namespace gpt {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
// The bf16 pattern that float bits u round to.
uint16_t rb(uint32_t u) { return round_to_bf16_bits(from_bits(u)); }

TEST(Bf16Round, ExactValuesAreUnchanged) {
  int nans = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_bits_to_float(static_cast<uint16_t>(b));
    ASSERT_EQ(to_bits(f), b << 16);  // expansion is exact
    if (std::isnan(f)) {
      ++nans;
      ASSERT_TRUE(std::isnan(round_to_bf16(f))) << std::hex << b;
      continue;
    }
    ASSERT_EQ(round_to_bf16_bits(f), b) << std::hex << b;
    ASSERT_EQ(to_bits(round_to_bf16(f)), b << 16) << std::hex << b;
  }
  EXPECT_EQ(nans, 2 * 127);            // exponent all ones, mantissa non-zero, both signs
  EXPECT_EQ(rb(0x3f800000u), 0x3f80);  // 1
  EXPECT_EQ(rb(0xc0000000u), 0xc000);  // -2
}

TEST(Bf16Round, TiesGoToEven) {
  // 1 + 2^-8 lies half way between 1 (0x3f80, even) and 1 + 2^-7 (0x3f81): down.
  EXPECT_EQ(rb(0x3f808000u), 0x3f80);
  // 1 + 3·2^-8 lies half way between 0x3f81 (odd) and 0x3f82 (even): up.
  EXPECT_EQ(rb(0x3f818000u), 0x3f82);
  // The same for negative values (the magnitude is rounded; the sign is kept).
  EXPECT_EQ(rb(0xbf808000u), 0xbf80);
  EXPECT_EQ(rb(0xbf818000u), 0xbf82);
  // A tie whose upward neighbour is in the next binade: 0x3fff (odd) -> 0x4000 = 2.
  EXPECT_EQ(rb(0x3fff8000u), 0x4000);
  EXPECT_EQ(round_to_bf16(from_bits(0x3fff8000u)), 2.0f);
  // In value terms: 1.00390625 = 1 + 2^-8 -> 1, 1.01171875 = 1 + 3·2^-8 -> 1.015625.
  EXPECT_EQ(round_to_bf16(1.00390625f), 1.0f);
  EXPECT_EQ(round_to_bf16(1.01171875f), 1.015625f);
}

TEST(Bf16Round, JustAboveAndBelowHalfWay) {
  EXPECT_EQ(rb(0x3f808001u), 0x3f81);  // above the tie towards the even 0x3f80: up anyway
  EXPECT_EQ(rb(0x3f807fffu), 0x3f80);  // below: down
  EXPECT_EQ(rb(0x3f818001u), 0x3f82);  // above the tie towards the odd 0x3f81: up
  EXPECT_EQ(rb(0x3f817fffu), 0x3f81);  // below: down
  EXPECT_EQ(rb(0xbf808001u), 0xbf81);  // negative: away from zero above half
  EXPECT_EQ(rb(0xbf817fffu), 0xbf81);
  EXPECT_EQ(rb(0x3fffffffu), 0x4000);  // just below 2 carries into the exponent
}

TEST(Bf16Round, ZerosAndInfinitiesAreUnchanged) {
  EXPECT_EQ(round_to_bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(round_to_bf16_bits(-0.0f), 0x8000);
  EXPECT_TRUE(std::signbit(round_to_bf16(-0.0f)));
  EXPECT_EQ(round_to_bf16_bits(INFINITY), 0x7f80);
  EXPECT_EQ(round_to_bf16_bits(-INFINITY), 0xff80);
  EXPECT_EQ(round_to_bf16(INFINITY), INFINITY);
  EXPECT_EQ(round_to_bf16(-INFINITY), -INFINITY);
}

TEST(Bf16Round, NanStaysNan) {
  // Quiet NaN, a signalling NaN with the lowest payload bit (truncation
  // would give 0x7f80 = inf), one with its payload only in the low 16 bits,
  // the largest payload (the rounding carry would wrap it to -0), and their
  // negative twins.
  const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0x7fffffffu, 0x7fbfffffu,
                           0xffc00000u, 0xff800001u, 0xff80ffffu, 0xffffffffu};
  for (uint32_t u : nans) {
    ASSERT_TRUE(std::isnan(from_bits(u)));
    const uint16_t b = rb(u);
    EXPECT_TRUE(std::isnan(bf16_bits_to_float(b))) << std::hex << u << " -> " << b;
    EXPECT_EQ(b & 0x7f80u, 0x7f80u) << std::hex << u;              // exponent all ones
    EXPECT_NE(b & 0x0040u, 0u) << std::hex << u;                   // quiet bit set
    EXPECT_EQ(b & 0x8000u, (u >> 16) & 0x8000u) << std::hex << u;  // sign kept
    EXPECT_EQ(b & 0x003fu, (u >> 16) & 0x003fu) << std::hex << u;  // upper payload bits kept
  }
  EXPECT_TRUE(std::isnan(round_to_bf16(NAN)));
  EXPECT_TRUE(std::isnan(round_to_bf16(-NAN)));
}

TEST(Bf16Round, TopOfTheRangeRoundsToInfinityOrStaysFinite) {
  // Largest finite bf16: 0x7f7f = (2 - 2^-7)·2^127 ≈ 3.3895e38.
  const float max_bf16 = bf16_bits_to_float(0x7f7f);
  EXPECT_EQ(rb(0x7f7f0000u), 0x7f7f);
  EXPECT_EQ(rb(0x7f7f7fffu), 0x7f7f);  // just below the midpoint to 2^128: stays finite
  EXPECT_EQ(rb(0x7f7f8000u), 0x7f80);  // the midpoint: ties to even, which is infinity
  EXPECT_EQ(rb(0x7f7fffffu), 0x7f80);  // FLT_MAX -> inf
  EXPECT_EQ(round_to_bf16_bits(FLT_MAX), 0x7f80);
  EXPECT_EQ(round_to_bf16_bits(-FLT_MAX), 0xff80);
  EXPECT_EQ(rb(0xff7f7fffu), 0xff7f);
  EXPECT_EQ(round_to_bf16(-max_bf16), -max_bf16);
  EXPECT_TRUE(std::isfinite(round_to_bf16(from_bits(0x7f7f7fffu))));
  EXPECT_TRUE(std::isinf(round_to_bf16(from_bits(0x7f7f8000u))));
}

TEST(Bf16Round, Subnormals) {
  // Float subnormals below half the smallest bf16 subnormal (2^-133) go to ±0.
  EXPECT_EQ(rb(0x00000001u), 0x0000);
  EXPECT_EQ(rb(0x80000001u), 0x8000);
  EXPECT_EQ(rb(0x00008000u), 0x0000);  // exactly half of 0x0001: tie to even (0)
  EXPECT_EQ(rb(0x00008001u), 0x0001);  // just above: the smallest bf16 subnormal
  EXPECT_EQ(rb(0x00018000u), 0x0002);  // tie between 0x0001 and 0x0002: even
  EXPECT_EQ(rb(0x00400000u), 0x0040);  // 2^-127, exact
  EXPECT_EQ(rb(0x807fffffu), 0x8080);  // largest negative subnormal -> -FLT_MIN
  EXPECT_EQ(round_to_bf16(-from_bits(0x007fffffu)), -FLT_MIN);
  EXPECT_GT(round_to_bf16(from_bits(0x00010000u)), 0.0f);  // no flush to zero
}

// Random finite floats: the result is a neighbour of x (the bf16 just at or
// below |x|, or the next one), the nearer one, the even one on a tie; the
// relative error of normal values is at most 2^-8.
TEST(Bf16Round, NearestNeighbourOnRandomFloats) {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 300000; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t u = static_cast<uint32_t>(s >> 32);
    if ((u & 0x7f800000u) == 0x7f800000u) u &= 0xbfffffffu;  // finite only
    const float x = from_bits(u);
    const uint16_t lo = static_cast<uint16_t>(u >> 16), hi = static_cast<uint16_t>(lo + 1);
    const double dx = x, dlo = bf16_bits_to_float(lo), dhi = bf16_bits_to_float(hi);  // hi may be ±inf
    const uint16_t r = round_to_bf16_bits(x);
    ASSERT_TRUE(r == lo || r == hi) << std::hex << u;
    const double e_lo = std::fabs(dx - dlo),
                 e_hi = std::isinf(dhi) ? std::ldexp(1.0, 128) - std::fabs(dx) : std::fabs(dhi - dx);
    if (e_lo < e_hi) {
      ASSERT_EQ(r, lo) << std::hex << u;
    } else if (e_hi < e_lo) {
      ASSERT_EQ(r, hi) << std::hex << u;
    } else {
      ASSERT_EQ(r & 1u, 0u) << std::hex << u;  // tie: the even one
    }
    const float y = bf16_bits_to_float(r);
    if (std::fabs(x) >= FLT_MIN && std::isfinite(y)) {
      ASSERT_LE(std::fabs(double(y) - dx), kBf16UnitRoundoff * std::fabs(dx)) << std::hex << u;
    }
  }
}

}  // namespace
}  // namespace gpt
