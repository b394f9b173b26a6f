// Fused softmax cross-entropy over the first V of Vp logit columns. One block
// per row: the row maximum, then Σ exp(x - max), then (backward) every thread
// rewrites the elements it reads with (p - onehot)·dloss. No probability
// buffer; the gradient may overwrite the logits in place.
#include <cmath>

#include "core/tokens.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_syntax.h"
#include "kernels/cuda/reduce.cuh"

namespace gpt::cuda {

namespace {

constexpr int kThreads = 512;

// log Σ_{i<V} exp(x_i), shifted by the row maximum. Every thread of the block
// returns it; all reads of x happen before the last barrier inside.
__device__ float row_logsumexp(const float* x, int V) {
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, x[i]);
  mx = block_max(mx);
  float s = 0.f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(x[i] - mx);
  const double sum = block_sum(double(s));  // up to ~50k terms: the block total in double
  return mx + static_cast<float>(log(sum));
}

__global__ void __launch_bounds__(kThreads)
    crossentropy_forward_kernel(float* losses, const float* logits, const int32_t* targets, int V, int Vp) {
  GPT_BLOCK_BOUND(kThreads);
  const size_t n = blockIdx.x;
  const int target = targets[n];
  if (target == kIgnoreTarget) {  // not scored (the whole block leaves together)
    if (threadIdx.x == 0) losses[n] = 0.f;
    return;
  }
  const float* x = logits + n * Vp;
  const float lse = row_logsumexp(x, V);
  if (threadIdx.x == 0) losses[n] = target >= 0 && target < V ? lse - x[target] : NAN;
}

__global__ void __launch_bounds__(kThreads)
    crossentropy_backward_kernel(float* dlogits, const float* logits, const int32_t* targets, const float* dloss, int V,
                                 int Vp) {
  GPT_BLOCK_BOUND(kThreads);
  const size_t n = blockIdx.x;
  const float* x = logits + n * Vp;
  float* dx = dlogits + n * Vp;  // may be x itself
  const int target = targets[n];
  if (target == kIgnoreTarget) {  // not scored: a zero gradient row
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) dx[i] = 0.f;
    return;
  }
  const float lse = row_logsumexp(x, V);
  const bool valid = target >= 0 && target < V;
  const float dl = dloss[n];
  // Each element is read and then written by the same thread, after every
  // thread has finished the reads of row_logsumexp (its barriers).
  for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
    float d = 0.f;
    if (i < V) d = valid ? (expf(x[i] - lse) - (i == target ? 1.f : 0.f)) * dl : NAN;
    dx[i] = d;
  }
}

}  // namespace

void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V, int Vp,
                          cudaStream_t stream) {
  if (N <= 0) return;
  GPT_LAUNCH(N, kThreads, stream, crossentropy_forward_kernel)(losses, logits, targets, V, Vp);
  GPT_CUDA_CHECK_LAUNCH("crossentropy_forward_kernel");
}

void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, const float* dloss, int N,
                           int V, int Vp, cudaStream_t stream) {
  if (N <= 0) return;
  GPT_LAUNCH(N, kThreads, stream, crossentropy_backward_kernel)(dlogits, logits, targets, dloss, V, Vp);
  GPT_CUDA_CHECK_LAUNCH("crossentropy_backward_kernel");
}

}  // namespace gpt::cuda
