// Muon's constants and sizes, shared by the CPU and CUDA kernels and the
// optimizer (docs/optimizers.md). Muon (Jordan et al. 2024, "Muon: an
// optimizer for hidden layers") replaces the update of a hidden weight matrix
// with an approximately orthogonal matrix: Nesterov momentum, then a quintic
// Newton–Schulz iteration X ← a·X + (b·A + c·A²)·X, A = X·Xᵀ, started from the
// update divided by its Frobenius norm, on the wide orientation (rows <=
// columns; a tall matrix is transposed in and out).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>

namespace gpt::muon {

// The iteration's coefficients and the norm's guard, as the reference
// implementation (KellerJordan/Muon, zeropower_via_newtonschulz5) sets them.
inline constexpr double kA = 3.4445, kB = -4.7750, kC = 2.0315;
inline constexpr double kNormEps = 1e-7;
inline constexpr int kSteps = 5;

// Scratch elements newton_schulz needs for a rows × cols matrix: the
// iterate and the next one (m·n each), A and B (m·m each), m = min, n = max,
// and one for the norm (the CUDA kernel keeps it on the device).
inline size_t work_size(int rows, int cols) {
  const size_t m = static_cast<size_t>(std::min(rows, cols)), n = static_cast<size_t>(std::max(rows, cols));
  return 2 * m * n + 2 * m * m + 1;
}

// The reference's update scale: sqrt(max(1, rows / cols)) for a (rows = out,
// cols = in) matrix, so a tall matrix's update keeps its RMS per element.
inline double update_scale(int rows, int cols) {
  return std::sqrt(std::max(1.0, static_cast<double>(rows) / static_cast<double>(cols)));
}

}  // namespace gpt::muon
