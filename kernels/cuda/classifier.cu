// Fused softmax cross-entropy over the first V of Vp logit columns. One block
// per row: the row maximum, then Σ exp(x - max), then (backward) every thread
// rewrites the elements it reads with (p - onehot)·dloss. No probability
// buffer; the gradient may overwrite the logits in place.
#include <cmath>

#include "core/tokens.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_syntax.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/storage.cuh"

namespace gpt::cuda {

namespace {

constexpr int kThreads = 512;

// log Σ_{i<V} exp(x_i), shifted by the row maximum. Every thread of the block
// returns it; all reads of x happen before the last barrier inside.
// S: the logits' storage type, float or bf16 (storage.cuh).
template <typename S>
__device__ float row_logsumexp(const S* x, int V) {
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, load(x, i));
  mx = block_max(mx);
  float s = 0.f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(load(x, i) - mx);
  const double sum = block_sum(double(s));  // up to ~50k terms: the block total in double
  return mx + static_cast<float>(log(sum));
}

template <typename S>
__global__ void __launch_bounds__(kThreads)
    crossentropy_forward_kernel(float* losses, const S* logits, const int32_t* targets, int V, int Vp) {
  GPT_BLOCK_BOUND(kThreads);
  const size_t n = blockIdx.x;
  const int target = targets[n];
  if (target == kIgnoreTarget) {  // not scored (the whole block leaves together)
    if (threadIdx.x == 0) losses[n] = 0.f;
    return;
  }
  const S* x = logits + n * Vp;
  const float lse = row_logsumexp(x, V);
  if (threadIdx.x == 0) losses[n] = target >= 0 && target < V ? lse - load(x, target) : NAN;
}

template <typename S>
__global__ void __launch_bounds__(kThreads)
    crossentropy_backward_kernel(S* dlogits, const S* logits, const int32_t* targets, const float* dloss, int V,
                                 int Vp) {
  GPT_BLOCK_BOUND(kThreads);
  const size_t n = blockIdx.x;
  const S* x = logits + n * Vp;
  S* dx = dlogits + n * Vp;  // may be x itself
  const int target = targets[n];
  if (target == kIgnoreTarget) {  // not scored: a zero gradient row
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) store(dx, i, 0.f);
    return;
  }
  const float lse = row_logsumexp(x, V);
  const bool valid = target >= 0 && target < V;
  const float dl = dloss[n];
  // Each element is read and then written by the same thread, after every
  // thread has finished the reads of row_logsumexp (its barriers).
  for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
    float d = 0.f;
    if (i < V) d = valid ? (expf(load(x, i) - lse) - (i == target ? 1.f : 0.f)) * dl : NAN;
    store(dx, i, d);
  }
}

template <typename S>
void crossentropy_forward_on(float* losses, const S* logits, const int32_t* targets, int N, int V, int Vp,
                             cudaStream_t stream) {
  if (N <= 0) return;
  GPT_LAUNCH(N, kThreads, stream, crossentropy_forward_kernel<S>)(losses, logits, targets, V, Vp);
  GPT_CUDA_CHECK_LAUNCH("crossentropy_forward_kernel");
}
template <typename S>
void crossentropy_backward_on(S* dlogits, const S* logits, const int32_t* targets, const float* dloss, int N, int V,
                              int Vp, cudaStream_t stream) {
  if (N <= 0) return;
  GPT_LAUNCH(N, kThreads, stream, crossentropy_backward_kernel<S>)(dlogits, logits, targets, dloss, V, Vp);
  GPT_CUDA_CHECK_LAUNCH("crossentropy_backward_kernel");
}

}  // namespace

void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V, int Vp,
                          cudaStream_t stream) {
  crossentropy_forward_on(losses, logits, targets, N, V, Vp, stream);
}
void crossentropy_forward(float* losses, const bf16* logits, const int32_t* targets, int N, int V, int Vp,
                          cudaStream_t stream) {
  crossentropy_forward_on(losses, logits, targets, N, V, Vp, stream);
}
void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, const float* dloss, int N,
                           int V, int Vp, cudaStream_t stream) {
  crossentropy_backward_on(dlogits, logits, targets, dloss, N, V, Vp, stream);
}
void crossentropy_backward(bf16* dlogits, const bf16* logits, const int32_t* targets, const float* dloss, int N,
                           int V, int Vp, cudaStream_t stream) {
  crossentropy_backward_on(dlogits, logits, targets, dloss, N, V, Vp, stream);
}

}  // namespace gpt::cuda
