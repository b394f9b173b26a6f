// float32 -> bfloat16 rounding, the one definition used everywhere: by the
// CUDA backend's bf16 GEMM operands (kernels/cuda/matmul.cu converts with it
// on the device), by bf16 storage (Device::convert on the CPU and CUDA), by
// the llm.c bf16 export (src/convert/llmc.cpp) and by the tests' CPU
// references. Plain C++: with nvcc the functions are
// __host__ __device__, with g++ they are ordinary inline functions.
//
// bfloat16 is the upper 16 bits of a float32 (sign, 8 exponent bits, 7
// mantissa bits), so it has float32's range and 8 significant bits: the
// relative rounding error of round-to-nearest is at most 2^-8 (kBf16UnitRoundoff).
// Rounding: to nearest, ties to even, on the bit pattern:
//   * finite values round to the nearer bf16; a value exactly half way goes to
//     the one whose last kept bit is 0; subnormals round the same way (no
//     flush to zero); values at or past the midpoint between the largest
//     finite bf16 (0x7f7f, 3.3895e38) and 2^128 round to infinity, as IEEE
//     rounding does;
//   * ±0 and ±inf are unchanged;
//   * NaN stays NaN: the sign and the upper 7 payload bits are kept and the
//     quiet bit is set, so a NaN whose payload lies only in the low 16 bits
//     (which truncation would turn into inf) stays a NaN.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GPT_BF16_HD __host__ __device__
#else
#define GPT_BF16_HD
#endif

namespace gpt {

// A bfloat16 value in memory (run.storage "bf16"): the bit pattern, which
// the functions below convert. Storage only: ops widen it to float32.
struct bf16 {
  uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2);

// Largest relative error |round(x) - x| / |x| of a finite, normal x whose
// rounding stays finite: half a unit in the last of 8 significant bits.
constexpr double kBf16UnitRoundoff = 1.0 / 256.0;

GPT_BF16_HD inline uint32_t bf16_float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

GPT_BF16_HD inline float bf16_bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// The 16-bit pattern of the bf16 nearest to x (ties to even; NaN stays NaN).
GPT_BF16_HD inline uint16_t round_to_bf16_bits(float x) {
  const uint32_t u = bf16_float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: quiet, kept
  // Add just under half a bf16 ulp plus the lowest kept bit, then truncate:
  // below half rounds down, above half up, exactly half up only when the kept
  // part is odd (to even). A carry may ripple into the exponent: the next
  // binade, or infinity past the largest finite bf16 (correct IEEE rounding).
  // No overflow of the 32 bits: u <= 0xff800000 (-inf) here, plus at most 0x8000.
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

// The float32 value of a bf16 bit pattern (exact).
GPT_BF16_HD inline float bf16_bits_to_float(uint16_t b) { return bf16_bits_float(static_cast<uint32_t>(b) << 16); }

// x rounded to the nearest bf16, as a float32 (exactly representable).
GPT_BF16_HD inline float round_to_bf16(float x) { return bf16_bits_to_float(round_to_bf16_bits(x)); }

// A stored element as the type kernels compute in: a float or double as it
// is, a bf16 widened to float32 (exactly). Lets one kernel template read
// either storage (the CPU GEMM's packers, the embedding of bf16 tables).
template <typename T>
GPT_BF16_HD inline T stored_value(T x) {
  return x;
}
GPT_BF16_HD inline float stored_value(bf16 x) { return bf16_bits_to_float(x.bits); }

}  // namespace gpt

#undef GPT_BF16_HD
