// Small float math for element-wise kernels: branch-free, so that loops over
// arrays vectorise, and free of library calls. GPT_VEC_CLONES compiles a
// function for AVX-512, AVX2 and baseline x86-64 and lets the processor pick
// at load time. The project is built without -ffp-contract, so every clone
// rounds the same operations the same way and gives bit-identical results.
#pragma once
#include <bit>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GPT_VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GPT_VEC_CLONES
#endif

namespace gpt::cpu {

// e^x for float, within about 2 ulp over the normal range. Arguments are
// clamped to [-87, 88] (e^-87 is still normal, e^88 < FLT_MAX), so large
// negative x gives ~1.6e-38 instead of 0 and large positive x ~1.7e38
// instead of inf. x = n·ln2 + r with |r| <= ln2/2; e^r by its Taylor series
// to degree 7 (truncation error < 6e-9); 2^n assembled in the exponent bits.
inline float vec_exp(float x) {
  // (Vectorises only with -fno-trapping-math, which kernels/cpu is built with.)
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
  return p * std::bit_cast<float>((ni + 127) << 23);
}

}  // namespace gpt::cpu
