// The tensor-core layer: one warp-wide matrix multiply-accumulate on bf16
// operands with float32 accumulation (mma.sync.aligned.m16n8k16.row.col
// .f32.bf16.bf16.f32) and the warp-wide load of 8x8 b16 matrices from shared
// memory into its operand fragments (ldmatrix.sync.aligned.m8n8.b16, with
// and without .trans). Which lane holds which element: mma_layout.h.
//
// Under nvcc these are inline PTX (sm_80 and later). Against the CUDA
// emulator (tests/cuda_emulator/) they are warp collectives of the emulator
// that implement the same documented layouts on the CPU: every lane of the
// warp must take part (the instructions are .aligned), a lane that returned
// or diverged fails the launch, and ldmatrix refuses an address outside the
// block's shared memory or not 16-byte aligned. The emulator's layouts are
// written apart from mma_layout.h, and the tests check both against a
// third table (tests/kernels/cuda/mma_layout_test.cpp); scripts/gpu_check.sh
// runs the same tests on a GPU first, so that the table is the hardware's.
//
// Use: all 32 lanes of a warp call each function with the same arguments'
// shape; the block's x dimension is a multiple of 32, so lane = threadIdx.x % 32.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/mma_layout.h"

namespace gpt::cuda::mma {

struct FragA {  // a0..a7: register j holds a(2j) low, a(2j+1) high
  uint32_t r[4];
};
struct FragB {  // b0..b3 in two registers, likewise
  uint32_t r[2];
};
struct FragC {  // c0..c3, float32
  float x[4];
};

__device__ inline int lane_id() { return static_cast<int>(threadIdx.x & 31u); }

// Two bf16 bit patterns in one register: `lo` is the lower-numbered element.
__device__ inline uint32_t pack_bf16x2(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }

// d = a·b + c over the warp (d may be c).
__device__ inline void mma_bf16(FragC& d, const FragA& a, const FragB& b, const FragC& c) {
#ifdef GPT_CUDA_EMULATOR
  float out[4];
  ::cuemu::mma_m16n8k16_bf16(out, a.r, b.r, c.x);
  for (int i = 0; i < 4; ++i) d.x[i] = out[i];
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d.x[0]), "=f"(d.x[1]), "=f"(d.x[2]), "=f"(d.x[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]), "f"(c.x[0]), "f"(c.x[1]),
        "f"(c.x[2]), "f"(c.x[3]));
#else
  (void)d, (void)a, (void)b, (void)c;
  __trap();  // bf16 mma needs sm_80 or later
#endif
}

// Loads Num (1, 2 or 4) 8x8 b16 matrices from shared memory: lane l gives
// in `row` the address of row l % 8 of matrix l / 8 (16 bytes, 16-byte
// aligned; lanes past 8·Num give an address that is not read), and receives
// register m of matrix m as mma_layout.h's ld_row/ld_col say.
template <int Num, bool Trans>
__device__ inline void ldmatrix(uint32_t (&r)[Num], const void* row) {
  static_assert(Num == 1 || Num == 2 || Num == 4, "ldmatrix: 1, 2 or 4 matrices");
#ifdef GPT_CUDA_EMULATOR
  ::cuemu::ldmatrix_b16(r, Num, Trans, row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (Num == 1) {
    if constexpr (Trans)
      asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a) : "memory");
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a) : "memory");
  } else if constexpr (Num == 2) {
    if constexpr (Trans)
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                   : "=r"(r[0]), "=r"(r[1])
                   : "r"(a)
                   : "memory");
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                   : "=r"(r[0]), "=r"(r[1])
                   : "r"(a)
                   : "memory");
  } else {
    if constexpr (Trans)
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                   : "r"(a)
                   : "memory");
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                   : "r"(a)
                   : "memory");
  }
#else
  (void)r, (void)row;
  __trap();  // ldmatrix needs sm_75 or later
#endif
}

}  // namespace gpt::cuda::mma
