// Softmax cross-entropy over the first V of Vp logit columns (Vp pads the
// vocabulary to a friendly multiple; padding columns never enter the softmax).
// A target of -1 (kIgnoreTarget, a position a loss mask does not score) has
// loss 0 and a zero gradient row, whatever its dloss.
#include "kernels/cpu/cpu_kernels.h"

#include <cmath>

#include "core/check.h"
#include "core/tokens.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

namespace {

// Targets come from data files, so a bad id is a user error; check them
// before entering the parallel loop (throwing inside it would terminate).
void check_targets(const int32_t* targets, int N, int V) {
  for (int n = 0; n < N; ++n)
    GPT_CHECK(targets[n] == kIgnoreTarget || (targets[n] >= 0 && targets[n] < V), "crossentropy: target token ",
              targets[n], " at row ", n, " is outside the vocabulary [0, ", V, ") and is not ", kIgnoreTarget,
              " (not scored)");
}

// log Σ_i exp(x_i) over x[0..V), shifted by the maximum so no exp overflows.
template <typename T>
T logsumexp(const T* x, int V) {
  T mx = x[0];
  for (int i = 1; i < V; ++i) mx = x[i] > mx ? x[i] : mx;
  double sum = 0.0;  // up to ~50k terms: sum in double for float inputs too
  for (int i = 0; i < V; ++i) sum += static_cast<double>(std::exp(x[i] - mx));
  return mx + static_cast<T>(std::log(sum));
}

}  // namespace

template <typename T>
void crossentropy_forward(T* losses, const T* logits, const int32_t* targets, int N, int V, int Vp) {
  check_targets(targets, N, V);
#pragma omp parallel for schedule(static) if (size_t(N) * V >= kMinParallelWork)
  for (int n = 0; n < N; ++n) {
    // (N,Vp) row n
    const T* x = logits + static_cast<size_t>(n) * Vp;
    losses[n] = targets[n] == kIgnoreTarget ? T(0) : logsumexp(x, V) - x[targets[n]];
  }
}

template <typename T>
void crossentropy_backward(T* dlogits, const T* logits, const int32_t* targets, const T* dloss, int N, int V, int Vp) {
  check_targets(targets, N, V);
#pragma omp parallel for schedule(static) if (size_t(N) * V >= kMinParallelWork)
  for (int n = 0; n < N; ++n) {
    // (N,Vp) row n. dlogits may alias logits: each element is read before
    // it is written, and the row statistic is taken before any write.
    const T* x = logits + static_cast<size_t>(n) * Vp;
    T* dx = dlogits + static_cast<size_t>(n) * Vp;
    if (targets[n] == kIgnoreTarget) {
      for (int i = 0; i < Vp; ++i) dx[i] = T(0);
      continue;
    }
    const T lse = logsumexp(x, V);
    const T dl = dloss[n];
    const int target = targets[n];
    for (int i = 0; i < V; ++i) {
      const T p = std::exp(x[i] - lse);
      dx[i] = (p - (i == target ? T(1) : T(0))) * dl;
    }
    for (int i = V; i < Vp; ++i) dx[i] = T(0);
  }
}

template void crossentropy_forward<float>(float*, const float*, const int32_t*, int, int, int);
template void crossentropy_forward<double>(double*, const double*, const int32_t*, int, int, int);
template void crossentropy_backward<float>(float*, const float*, const int32_t*, const float*, int, int, int);
template void crossentropy_backward<double>(double*, const double*, const int32_t*, const double*, int, int, int);

}  // namespace gpt::cpu
