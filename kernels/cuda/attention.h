// Fused causal self-attention on the GPU for every stage combination of
// kernels/attention_spec.h: the contract the CUDA backend calls. Same
// layouts and meaning as gpt::cpu::attention_forward/backward
// (kernels/cpu/cpu_kernels.h) so that parity tests compare them directly,
// statistics included. Compiled only when nvcc is found.
#pragma once
#include <cuda_runtime.h>

#include "kernels/attention_spec.h"

namespace gpt::cuda {

// All pointers are device memory. qkv (B,T,3C); out (B,T,C); stats
// (B,NH,T,AttentionSpec::kStatsPerRow) or null (inference); head: the learned
// per-head parameters (NH each, device memory: the ssmax scales, the sink
// logits), ignored where the variant has none; diag (NH, kAttentionDiagStats)
// device doubles accumulated (+=) when non-null. No T×T buffer.
// qkv_far: the far copy of a distance remapping (as cpu::attention_forward), null without one.
void attention_forward(float* out, float* stats, const float* qkv, int B, int Tn, int C, int NH,
                       const AttentionSpec& spec, const HeadParams<float>& head, double* diag, cudaStream_t stream,
                       const float* qkv_far = nullptr);

// The same forward with q·kᵀ and the weighted sum of values on tensor cores
// (kernels/cuda/attention/forward_tc.cuh; docs/gpu.md): q, k, v and the
// weights rounded to bf16, products accumulated in float32, the stage math
// and statistics in float32 as above. What it does not cover runs the
// float32 kernel: tensor_core_fallback says which and why.
void attention_forward_tc(float* out, float* stats, const float* qkv, int B, int Tn, int C, int NH,
                          const AttentionSpec& spec, const HeadParams<float>& head, double* diag, cudaStream_t stream,
                          const float* qkv_far = nullptr);
// Null when attention_forward_tc runs `spec` at head size D on tensor
// cores; otherwise the reason it runs the float32 kernel.
const char* tensor_core_fallback(const AttentionSpec& spec, int D);

// dqkv (B,T,3C) += gradient; dhead.scale (NH) += dL/ds_h (ssmax only) and
// dhead.sink (NH) += dL/dζ_h (sink only; each may be null otherwise); from
// dout (B,T,C) and the forward's out and stats; with a
// distance remapping dqkv_far += the far copy's gradient (q and k parts).
void attention_backward(float* dqkv, const HeadGrads<float>& dhead, const float* dout, const float* out,
                        const float* stats, const float* qkv, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                        const HeadParams<float>& head, cudaStream_t stream, float* dqkv_far = nullptr,
                        const float* qkv_far = nullptr);

// The same backward with its products on tensor cores
// (kernels/cuda/attention/backward_tc.cuh; docs/gpu.md): q, k, v, dy, the
// weights and the logit gradients rounded to bf16 before the products,
// float32 accumulation, stage math and row sums as above. What it does not
// cover runs the float32 kernels: tensor_core_backward_fallback says which
// and why. The statistics may come from either forward.
void attention_backward_tc(float* dqkv, const HeadGrads<float>& dhead, const float* dout, const float* out,
                           const float* stats, const float* qkv, int B, int Tn, int C, int NH,
                           const AttentionSpec& spec, const HeadParams<float>& head, cudaStream_t stream,
                           float* dqkv_far = nullptr, const float* qkv_far = nullptr);
// Null when attention_backward_tc runs `spec` at head size D on tensor
// cores; otherwise the reason it runs the float32 kernels.
const char* tensor_core_backward_fallback(const AttentionSpec& spec, int D);

}  // namespace gpt::cuda
