// TEMPORARY: stands in for the fused attention kernel (kernels/cuda/attention.cu,
// written on another branch) so that this branch links. DELETE THIS FILE when
// attention.cu is merged: both define the functions of kernels/cuda/attention.h.
#include "core/check.h"
#include "kernels/cuda/attention.h"

namespace gpt::cuda {

void attention_forward(float*, float*, const float*, int, int, int, int, const AttentionSpec&, const float*, double*,
                       cudaStream_t) {
  fail("attention: CUDA kernel not merged yet");
}

void attention_backward(float*, float*, const float*, const float*, const float*, const float*, int, int, int, int,
                        const AttentionSpec&, const float*, cudaStream_t) {
  fail("attention: CUDA kernel not merged yet");
}

}  // namespace gpt::cuda
