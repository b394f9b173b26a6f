// Linear layer y = x·Wᵀ + b and its backward pass. All three products (out,
// dinp, dweight) go through one GEMM, C += A·B (kernels/cpu/gemm.h), whose
// operands are read through (row, column) strides so no transposed copies
// are needed. Results do not depend on the thread count.
#include "kernels/cpu/cpu_kernels.h"

#include <algorithm>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

namespace {

// Channels per work item for the column sums of dbias.
constexpr int kChannelBlock = 32;

// T: the results' type; S: how inp, weight and dout are stored (T, or bf16
// read through the GEMM's widening packers).
template <typename T, typename S>
void forward_impl(T* out, const S* inp, const S* weight, const T* bias, int N, int C, int OC) {
#pragma omp parallel for schedule(static) if (size_t(N) * OC >= kMinParallelWork)
  for (int n = 0; n < N; ++n) {
    // (N,OC) row n starts as the bias
    T* o = out + static_cast<size_t>(n) * OC;
    for (int j = 0; j < OC; ++j) o[j] = bias ? bias[j] : T(0);
  }
  // out (N,OC) += inp (N,C) · weightᵀ, weightᵀ[c,o] = weight[o*C + c]
  gemm_accumulate(out, OC, MatView<S>{inp, size_t(C), 1}, MatView<S>{weight, 1, size_t(C)}, N, OC, C);
}

template <typename T, typename S>
void backward_impl(T* dinp, T* dweight, T* dbias, const S* dout, const S* inp, const S* weight, int N, int C, int OC) {
  // dinp (N,C) += dout (N,OC) · weight (OC,C)
  if (dinp) gemm_accumulate(dinp, C, MatView<S>{dout, size_t(OC), 1}, MatView<S>{weight, size_t(C), 1}, N, C, OC);
  // dweight (OC,C) += doutᵀ (OC,N) · inp (N,C), doutᵀ[o,n] = dout[n*OC + o]
  if (dweight) gemm_accumulate(dweight, C, MatView<S>{dout, 1, size_t(OC)}, MatView<S>{inp, size_t(C), 1}, OC, C, N);
  if (!dbias) return;
  // dbias (OC) += Σ_n dout[n,:]; split over channels so each sum runs in n order
  const int nblocks = (OC + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (size_t(N) * OC >= kMinParallelWork)
  for (int blk = 0; blk < nblocks; ++blk) {
    const int o0 = blk * kChannelBlock, o1 = std::min(OC, o0 + kChannelBlock);
    for (int n = 0; n < N; ++n) {
      const S* d = dout + static_cast<size_t>(n) * OC;
      for (int o = o0; o < o1; ++o) dbias[o] += stored_value(d[o]);
    }
  }
}

}  // namespace

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  forward_impl(out, inp, weight, bias, N, C, OC);
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C,
                     int OC) {
  backward_impl(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

void matmul_forward_bf16(float* out, const bf16* inp, const bf16* weight, const float* bias, int N, int C, int OC) {
  forward_impl(out, inp, weight, bias, N, C, OC);
}

void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                          const bf16* weight, int N, int C, int OC) {
  backward_impl(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int, int, int);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int, int, int);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*, const float*, int, int, int);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*, const double*, int, int,
                                      int);

}  // namespace gpt::cpu
