// Probes of the tensor-core layer (kernels/cuda/mma.cuh) for the layout
// tests (tests/kernels/cuda/mma_layout_test.cpp), which scripts/gpu_check.sh
// runs first on a GPU and CI runs on the CUDA emulator. Host arrays in and
// out (each call allocates, copies, launches one warp and synchronises);
// a failed CUDA call throws gpt::Error. bf16 values are bit patterns.
#pragma once
#include <cstdint>

namespace gpt::cuda::mma_probe {

// One mma.m16n8k16 (bf16 × bf16 + float32) whose fragments are filled by a
// caller's table: lane l's element i of A is A[a_at[8l + i]] (A 16x16 row
// major), of B is B[b_at[4l + i]] (B 16x8, row = k), of C is C[c_at[4l + i]];
// d_raw[4l + i] is element i of lane l's result, as the instruction left it.
void mma_by_table(const uint16_t* A, const uint16_t* B, const float* C, const int* a_at, const int* b_at,
                  const int* c_at, float* d_raw);

// One ldmatrix of `num` (1, 2, 4) 8x8 matrices M[64m + 8·row + col], laid
// out in shared memory with their rows interleaved (row r of matrix m at
// row 4r + m of a 32-row tile); out[4l + m] is the register lane l received
// for matrix m (m < num).
void ldmatrix_raw(const uint16_t* M, int num, bool trans, uint32_t* out);

// The two products of an attention tile as a kernel forms them, every
// operand through ldmatrix and every result placed by mma_layout.h's maps:
// S = Q·Kᵀ (Q 16x16 row major, K 8 rows of 16: ldmatrix .x4 and .x2) and
// O = Q·V (V 16 rows of 8: ldmatrix .x2 .trans). S and O are 16x8 row major.
void attention_tile(const uint16_t* Q, const uint16_t* K, const uint16_t* V, float* S, float* O);

}  // namespace gpt::cuda::mma_probe
