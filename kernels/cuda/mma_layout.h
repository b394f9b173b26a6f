// Where each element of a warp-level tensor-core operand lives: the fragment
// maps of mma.sync.m16n8k16 with bf16 multiplicands and float32
// accumulators, and of ldmatrix.m8n8 (b16), as the PTX ISA documents them
// (docs/gpu.md, "The tensor-core layer"). A kernel that applies per-element
// math to an accumulator (a mask, a bias, a positivity) finds the element's
// (row, column) here; kernels/cuda/mma.cuh issues the instructions.
//
// Plain C++ (host and device), so the host tests compare these maps with a
// table of their own (tests/kernels/cuda/mma_layout_test.cpp).
//
// Notation: lane = %laneid (0..31), g = lane / 4 (PTX's groupID),
// t = lane % 4 (threadID_in_group). A 32-bit register holds two 16-bit
// elements, the lower-numbered one in its low half.
//
//   A  16x16 (row = m, col = k)   8 elements a0..a7 in 4 registers
//        row: g for a0 a1 a4 a5, g + 8 for a2 a3 a6 a7
//        col: 2t + (i & 1), + 8 for a4..a7
//   B  16x8  (row = k, col = n)   4 elements b0..b3 in 2 registers
//        row: 2t + (i & 1), + 8 for b2 b3;  col: g
//   C, D 16x8 float32             4 elements c0..c3
//        row: g for c0 c1, g + 8 for c2 c3;  col: 2t + (i & 1)
//   ldmatrix .m8n8 .b16: lanes 8m..8m+7 give the addresses of rows 0..7 of
//        matrix m; every lane receives one register per matrix holding
//        row g, columns 2t and 2t + 1 (with .trans: column g of rows 2t and
//        2t + 1, i.e. the transposed matrix's row g).
#pragma once

#if defined(__CUDACC__)
#define GPT_MMA_HD __host__ __device__
#else
#define GPT_MMA_HD
#endif

namespace gpt::cuda::mma {

constexpr int kM = 16, kN = 8, kK = 16;  // the shape m16n8k16
constexpr int kElemsA = 8, kElemsB = 4, kElemsC = 4;

GPT_MMA_HD constexpr int group_of(int lane) { return lane >> 2; }
GPT_MMA_HD constexpr int thread_in_group(int lane) { return lane & 3; }

GPT_MMA_HD constexpr int a_row(int lane, int i) { return group_of(lane) + (((i >> 1) & 1) ? 8 : 0); }
GPT_MMA_HD constexpr int a_col(int lane, int i) { return 2 * thread_in_group(lane) + (i & 1) + (i >= 4 ? 8 : 0); }
GPT_MMA_HD constexpr int b_row(int lane, int i) { return 2 * thread_in_group(lane) + (i & 1) + (i >= 2 ? 8 : 0); }
GPT_MMA_HD constexpr int b_col(int lane, int /*i*/) { return group_of(lane); }
GPT_MMA_HD constexpr int c_row(int lane, int i) { return group_of(lane) + (i >= 2 ? 8 : 0); }
GPT_MMA_HD constexpr int c_col(int lane, int i) { return 2 * thread_in_group(lane) + (i & 1); }

// ldmatrix: the row and column, within its 8x8 matrix, of half `h` (0 low,
// 1 high) of the register a lane receives for each matrix.
GPT_MMA_HD constexpr int ld_row(int lane, int h, bool trans) { return trans ? 2 * thread_in_group(lane) + h : group_of(lane); }
GPT_MMA_HD constexpr int ld_col(int lane, int h, bool trans) { return trans ? group_of(lane) : 2 * thread_in_group(lane) + h; }
// The (matrix, row) whose address lane `lane` supplies.
GPT_MMA_HD constexpr int ld_address_matrix(int lane) { return lane >> 3; }
GPT_MMA_HD constexpr int ld_address_row(int lane) { return lane & 7; }

}  // namespace gpt::cuda::mma
