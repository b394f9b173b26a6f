// The GEMM behind the linear layer (kernels/cpu/matmul.cpp): C += A·B with
// operands read through (row, column) strides, so transposed operands need no
// copies. float runs a register-tile kernel chosen at run time from what the
// processor supports (AVX-512, AVX2+FMA, or the portable baseline); double
// always runs the portable kernel (it serves gradient checks, not speed).
//
// Whatever the kernel, every element of C is summed over k in ascending
// order by one thread, so results do not depend on the thread count.
#pragma once
#include <cstddef>

#include "kernels/bf16_round.h"

namespace gpt::cpu {

// A read-only matrix view: element (i, j) is at p[i*row + j*col].
template <typename T>
struct MatView {
  const T* p;
  size_t row, col;
};

// C (M,N), row-major with leading dimension ldc, += A (M,K) · B (K,N).
void gemm_accumulate(float* c, size_t ldc, MatView<float> a, MatView<float> b, int M, int N, int K);
void gemm_accumulate(double* c, size_t ldc, MatView<double> a, MatView<double> b, int M, int N, int K);
// The float product of bf16 operands (run.storage "bf16"): each is widened
// as it is packed, so C is bit for bit what the float GEMM gives on the
// operands converted to float32 whole, without a float32 copy of either.
void gemm_accumulate(float* c, size_t ldc, MatView<bf16> a, MatView<bf16> b, int M, int N, int K);
// The same product on the calling thread only, for kernels that parallelise
// their own outer loop (the attention kernel multiplies per-thread panels).
void gemm_accumulate_serial(float* c, size_t ldc, MatView<float> a, MatView<float> b, int M, int N, int K);
void gemm_accumulate_serial(double* c, size_t ldc, MatView<double> a, MatView<double> b, int M, int N, int K);

// The float kernels. Auto picks the fastest the processor supports; the
// environment variable GPT_GEMM_KERNEL (generic, avx2, avx512) overrides the
// initial choice, e.g. to measure the portable build on a newer machine.
enum class GemmKernel { Auto, Generic, Avx2, Avx512 };
bool gemm_kernel_available(GemmKernel k);
// Selects the kernel for later calls (not thread-safe against concurrent
// GEMMs); throws gpt::Error when the processor lacks the instructions.
void set_gemm_kernel(GemmKernel k);
GemmKernel gemm_kernel();                    // the active one (never Auto)
const char* gemm_kernel_name(GemmKernel k);  // "generic", "avx2", "avx512"

}  // namespace gpt::cpu
