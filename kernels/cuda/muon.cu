// Muon's kernels: the formulas of kernels/cpu/muon.cpp (kernels/muon_spec.h,
// docs/optimizers.md). Contracts: kernels/cuda/cuda_kernels.h.
//
// The Newton–Schulz GEMMs go through cuBLASLt, which counts column-major: the
// row-major iterate X (m×n, m <= n) is the column-major Xc = Xᵀ (n×m), so
// A = X·Xᵀ is Xcᵀ·Xc, A·A is A·A on the transposed storage (read back
// row-major it is A·A), and B·X is Xc·Bc read back row-major.
#include <algorithm>
#include <cmath>
#include <utility>

#include "core/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_syntax.h"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/muon_spec.h"

namespace gpt::cuda {

namespace {

__global__ void __launch_bounds__(kThreads)
    muon_momentum_kernel(float* grad, float* m, size_t n, float b, float one_m_b) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, n) {
    const float mi = b * m[i] + one_m_b * grad[i];
    m[i] = mi;
    grad[i] = one_m_b * grad[i] + b * mi;
  }
}

__global__ void __launch_bounds__(kThreads)
    muon_apply_kernel(float* param, const float* update, size_t n, float lr, float s, float wd) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, n) param[i] -= lr * (s * update[i] + wd * param[i]);
}

// inv = 1 / (sqrt(Σ partial) + eps), one block; the partials are added in
// a fixed order, as the CPU backend's sum_squares adds its chunks.
__global__ void __launch_bounds__(kThreads) ns_inverse_norm_kernel(float* inv, const double* partial) {
  GPT_BLOCK_BOUND(kThreads);
  double s = 0.0;
  for (int i = threadIdx.x; i < kSumSquaresBlocks; i += blockDim.x) s += partial[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *inv = float(1.0 / (sqrt(s) + muon::kNormEps));
}

// X (m, n) row-major from x (rows, cols): x·inv, or its transpose when tall.
__global__ void __launch_bounds__(kThreads)
    ns_load_kernel(float* X, const float* x, int m, int n, int cols, bool tall, const float* inv) {
  GPT_BLOCK_BOUND(kThreads);
  const size_t total = size_t(m) * n;
  const float s = *inv;
  GPT_GRID_STRIDE(k, total) {
    const size_t i = k / n, j = k % n;
    X[k] = (tall ? x[j * cols + i] : x[k]) * s;
  }
}

__global__ void __launch_bounds__(kThreads)
    ns_store_kernel(float* x, const float* X, int m, int n, int cols, bool tall) {
  GPT_BLOCK_BOUND(kThreads);
  const size_t total = size_t(m) * n;
  GPT_GRID_STRIDE(k, total) {
    const size_t i = k / n, j = k % n;
    (tall ? x[j * cols + i] : x[k]) = X[k];
  }
}

// out = alpha·x + beta·out (beta = 0: out = alpha·x, whatever out held).
__global__ void __launch_bounds__(kThreads)
    axpby_kernel(float* out, const float* x, float alpha, float beta, size_t n) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(i, n) out[i] = beta == 0.0f ? alpha * x[i] : alpha * x[i] + beta * out[i];
}

void axpby(float* out, const float* x, float alpha, float beta, size_t n, cudaStream_t stream) {
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, axpby_kernel)(out, x, alpha, beta, n);
  GPT_CUDA_CHECK_LAUNCH("axpby_kernel");
}

}  // namespace

void muon_momentum(float* grad, float* m, size_t n, double beta, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, muon_momentum_kernel)
  (grad, m, n, float(beta), float(1.0 - beta));
  GPT_CUDA_CHECK_LAUNCH("muon_momentum_kernel");
}

void muon_apply(float* param, const float* update, size_t n, double lr, double scale, double weight_decay,
                cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, muon_apply_kernel)
  (param, update, n, float(lr), float(scale), float(weight_decay));
  GPT_CUDA_CHECK_LAUNCH("muon_apply_kernel");
}

void newton_schulz(Matmul& mm, float* x, int rows, int cols, int steps, float* work, double* partial,
                   cudaStream_t stream) {
  GPT_CHECK(rows > 0 && cols > 0 && steps >= 0, "newton_schulz: need rows, cols > 0 and steps >= 0, got ", rows, ", ",
            cols, ", ", steps);
  const bool tall = rows > cols;
  const int m = tall ? cols : rows, n = tall ? rows : cols;
  const size_t mn = size_t(m) * n, msq = size_t(m) * m;
  float* X = work;
  float* A = X + mn;
  float* B = A + msq;
  float* Y = B + msq;
  float* inv = Y + mn;
  sum_squares_partials(partial, x, mn, stream);
  GPT_LAUNCH(1, kThreads, stream, ns_inverse_norm_kernel)(inv, partial);
  GPT_CUDA_CHECK_LAUNCH("ns_inverse_norm_kernel");
  GPT_LAUNCH(grid_for(mn, kThreads), kThreads, stream, ns_load_kernel)(X, x, m, n, cols, tall, inv);
  GPT_CUDA_CHECK_LAUNCH("ns_load_kernel");
  for (int s = 0; s < steps; ++s) {
    mm.gemm_f32(true, false, m, m, n, X, n, X, n, A, m, 0.0f, stream);   // A = X·Xᵀ
    mm.gemm_f32(false, false, m, m, m, A, m, A, m, B, m, 0.0f, stream);  // B = A·A
    axpby(B, A, float(muon::kB), float(muon::kC), msq, stream);          // B = b·A + c·A·A
    axpby(Y, X, float(muon::kA), 0.0f, mn, stream);                      // Y = a·X
    mm.gemm_f32(false, false, n, m, m, X, n, B, m, Y, n, 1.0f, stream);  // Y += B·X
    std::swap(X, Y);
  }
  GPT_LAUNCH(grid_for(mn, kThreads), kThreads, stream, ns_store_kernel)(x, X, m, n, cols, tall);
  GPT_CUDA_CHECK_LAUNCH("ns_store_kernel");
}

}  // namespace gpt::cuda
