// Muon's kernels (kernels/muon_spec.h, docs/optimizers.md): Nesterov
// momentum, the quintic Newton–Schulz orthogonalisation and the update.
#include <algorithm>
#include <cmath>
#include <utility>

#include "core/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/muon_spec.h"

namespace gpt::cpu {

template <typename T>
void muon_momentum(T* grad, T* m, size_t n, double beta) {
  const T b = T(beta), one_m_b = T(1.0 - beta);
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) {
    const T mi = b * m[i] + one_m_b * grad[i];
    m[i] = mi;
    grad[i] = one_m_b * grad[i] + b * mi;
  }
}

template <typename T>
void newton_schulz(T* x, int rows, int cols, int steps, T* work) {
  GPT_CHECK(rows > 0 && cols > 0 && steps >= 0, "newton_schulz: need rows, cols > 0 and steps >= 0, got ", rows, ", ",
            cols, ", ", steps);
  const bool tall = rows > cols;
  const int m = tall ? cols : rows, n = tall ? rows : cols;
  const size_t mn = static_cast<size_t>(m) * n, mm = static_cast<size_t>(m) * m;
  T* X = work;
  T* A = X + mn;
  T* B = A + mm;
  T* Y = B + mm;
  const T inv = T(1.0 / (std::sqrt(sum_squares(x, mn)) + muon::kNormEps));
  // X (m, n): x itself, or its transpose when x is tall.
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      X[static_cast<size_t>(i) * n + j] = (tall ? x[static_cast<size_t>(j) * cols + i] : x[static_cast<size_t>(i) * n + j]) * inv;
  const T a = T(muon::kA), b = T(muon::kB), c = T(muon::kC);
  for (int s = 0; s < steps; ++s) {
    std::fill(A, A + mm, T(0));
    gemm_accumulate(A, m, MatView<T>{X, size_t(n), 1}, MatView<T>{X, 1, size_t(n)}, m, m, n);  // X·Xᵀ
    std::fill(B, B + mm, T(0));
    gemm_accumulate(B, m, MatView<T>{A, size_t(m), 1}, MatView<T>{A, size_t(m), 1}, m, m, m);  // A·A
    for (size_t k = 0; k < mm; ++k) B[k] = b * A[k] + c * B[k];
    for (size_t k = 0; k < mn; ++k) Y[k] = a * X[k];
    gemm_accumulate(Y, n, MatView<T>{B, size_t(m), 1}, MatView<T>{X, size_t(n), 1}, m, n, m);  // + B·X
    std::swap(X, Y);
  }
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      (tall ? x[static_cast<size_t>(j) * cols + i] : x[static_cast<size_t>(i) * n + j]) = X[static_cast<size_t>(i) * n + j];
}

template <typename T>
void muon_apply(T* param, const T* update, size_t n, double lr, double scale, double weight_decay) {
  const T lr_t = T(lr), s = T(scale), wd = T(weight_decay);
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) param[i] -= lr_t * (s * update[i] + wd * param[i]);
}

template void muon_momentum<float>(float*, float*, size_t, double);
template void muon_momentum<double>(double*, double*, size_t, double);
template void newton_schulz<float>(float*, int, int, int, float*);
template void newton_schulz<double>(double*, int, int, int, double*);
template void muon_apply<float>(float*, const float*, size_t, double, double, double);
template void muon_apply<double>(double*, const double*, size_t, double, double, double);

}  // namespace gpt::cpu
