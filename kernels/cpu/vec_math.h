// Small float math for element-wise kernels: branch-free, so that loops over
// arrays vectorise, and free of library calls. GPT_VEC_CLONES compiles a
// function for AVX-512, AVX2 and baseline x86-64 and lets the processor pick
// at load time. GCC contracts a·b + c into one FMA where a clone's ISA has
// it (its default, -ffp-contract=fast), so the AVX2 and AVX-512 clones can
// differ from the baseline one in the last bits; tests compare the kernels
// with tolerances, not bit for bit. (Turning contraction off costs the lssar
// rows about 45% of their speed: 91.6 -> 50.4 GFLOP/s at T = 4096.)
#pragma once
#include <bit>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GPT_VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GPT_VEC_CLONES
#endif

namespace gpt::cpu {

// e^x for float, within about 2 ulp over the normal range. Arguments below
// -87 give 0 (e^-87 ~ 1.6e-38 is the last normal value: what lies below is
// denormal in float, and a row whose far keys all saturated at e^-87 made
// every later product denormal, 10-20x slower, as strong position biases do
// at long range); large positive x gives ~1.7e38 (e^88) instead of inf.
// x = n·ln2 + r with |r| <= ln2/2; e^r by its Taylor series to degree 7
// (truncation error < 6e-9); 2^n assembled in the exponent bits.
inline float vec_exp(float x) {
  // (Vectorises only with -fno-trapping-math, which kernels/cpu is built with.)
  const float keep = x >= -87.0f ? 1.0f : 0.0f;
  x = x > -87.0f ? x : -87.0f;
  x = x < 88.0f ? x : 88.0f;
  constexpr float kShifter = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer
  const float t = x * 1.44269504088896341f + kShifter;
  const float n = t - kShifter;
  // ln 2 = kLn2Hi + kLn2Lo, kLn2Hi = 355/512 with few bits so n·kLn2Hi is exact.
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440054690583e-4f;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kShifter);
  return keep * (p * std::bit_cast<float>((ni + 127) << 23));
}

// ln x for positive normal float x, within a few ulp (no special cases: zero,
// negative, denormal and non-finite x give meaningless values, so callers
// select those away). x = 2^e·m with m in [sqrt(1/2), sqrt(2)); with
// s = (m − 1)/(m + 1), ln m = 2·atanh s = 2s(1 + s²/3 + s⁴/5 + …) to s⁸/9
// (|s| <= 0.172, truncation error < 1e-9 relative).
inline float vec_log(float x) {
  const int32_t bits = std::bit_cast<int32_t>(x);
  const int32_t e = (bits - 0x3f3504f3) >> 23;  // 0x3f3504f3 = sqrt(1/2)
  const float m = std::bit_cast<float>(bits - static_cast<int32_t>(static_cast<uint32_t>(e) << 23));
  const float f = m - 1.0f;  // exact
  const float s = f / (2.0f + f);
  const float s2 = s * s;
  float p = 1.0f / 9.0f;
  p = p * s2 + 1.0f / 7.0f;
  p = p * s2 + 1.0f / 5.0f;
  p = p * s2 + 1.0f / 3.0f;
  p = p * s2 + 1.0f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440054690583e-4f;
  const float ef = static_cast<float>(e);
  return ef * kLn2Hi + (2.0f * s * p + ef * kLn2Lo);
}

// ln(1 + y) for y >= 0 (finite), accurate also for tiny y: with u = 1 + y
// rounded, ln(1 + y) = ln u · y / (u − 1) corrects the rounding of u.
inline float vec_log1p(float y) {
  const float u = 1.0f + y;
  const float d = u - 1.0f;
  return d == 0.0f ? y : vec_log(u) * (y / d);
}

}  // namespace gpt::cpu
