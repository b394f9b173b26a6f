// CUDA kernels for every op of Backend<float> except attention
// (kernels/cuda/attention.h): the same contracts as kernels/cpu/cpu_kernels.h
// (layouts llm.c-style, every backward ACCUMULATES, crossentropy_backward
// overwrites and may alias). float32 only; bf16 mixed precision is not done.
// All pointers are device memory and every launch goes to `stream`; a failed
// CUDA or cuBLAS call throws gpt::Error naming the call and the message.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace gpt::cuda {

// ---- error checking ---------------------------------------------------------------
// Throw gpt::Error("CUDA error in CALL at FILE:LINE: message") on failure.
void check_cuda(cudaError_t status, const char* call, const char* file, int line);
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);
#define GPT_CUDA_CHECK(call) ::gpt::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define GPT_CUBLAS_CHECK(call) ::gpt::cuda::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: launch-configuration errors (and, asynchronously,
// earlier faults) surface here.
#define GPT_CUDA_CHECK_LAUNCH(what) ::gpt::cuda::check_cuda(cudaGetLastError(), what, __FILE__, __LINE__)

// ---- embedding ------------------------------------------------------------------------
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int Tn, int C,
                     cudaStream_t stream);
// dwte rows are scattered with atomicAdd (repeated tokens); dwpe sums over b
// in a fixed order (no atomics).
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int Tn, int C,
                      cudaStream_t stream);

// ---- LayerNorm (eps 1e-5, biased variance) -----------------------------------------
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C, cudaStream_t stream);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C, cudaStream_t stream);

// ---- linear layer through cuBLASLt ----------------------------------------------------
// Owns the cuBLASLt handle and workspace. tf32 = false computes in strict
// float32 (CUBLAS_COMPUTE_32F, for parity); true allows TF32 tensor cores.
class Matmul {
 public:
  explicit Matmul(bool tf32);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;
  bool tf32() const { return tf32_; }

  // out (N,OC) = inp (N,C) · weightᵀ + bias (OC, may be null).
  void forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
               cudaStream_t stream);
  // dinp (N,C) += dout·W (dinp may be null); dweight (OC,C) += doutᵀ·inp;
  // dbias (OC) += Σ_n dout (may be null).
  void backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                int N, int C, int OC, cudaStream_t stream);

 private:
  // Column-major D (m,n) = alpha·op(A)·op(B) + beta·D, as cuBLAS sees it.
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* A, int lda, const float* B, int ldb,
            float* D, int ldd, float beta, cudaStream_t stream);
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool tf32_ = false;
};

// out (N,OC) += bias broadcast over rows.
void bias_add(float* out, const float* bias, int N, int OC, cudaStream_t stream);
// dbias (OC) += Σ_n dout[n,:].
void bias_backward(float* dbias, const float* dout, int N, int OC, cudaStream_t stream);

// ---- GELU (tanh approximation) -----------------------------------------------------------
void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, cudaStream_t stream);

// ---- element-wise ---------------------------------------------------------------------------
void residual_forward(float* out, const float* a, const float* b, size_t n, cudaStream_t stream);
void add_inplace(float* dst, const float* src, size_t n, cudaStream_t stream);
void scale_inplace(float* x, float s, size_t n, cudaStream_t stream);
// Σ x²: each of kSumSquaresBlocks blocks writes its partial sum (accumulated
// in double) to partial[block]; the caller adds them on the host in order,
// so the result does not depend on scheduling.
constexpr int kSumSquaresBlocks = 256;
void sum_squares_partials(double* partial, const float* x, size_t n, cudaStream_t stream);

// ---- RoPE ("half" pair layout, angle (pos0 + t)·theta^(-2i/D) in double) ----------------
void rope_forward(float* out, const float* inp, int B, int Tn, int C, int NH, double theta, int pos0,
                  cudaStream_t stream);
void rope_backward(float* dinp, const float* dout, int B, int Tn, int C, int NH, double theta, int pos0,
                   cudaStream_t stream);

// ---- fused classifier -----------------------------------------------------------------------
// One block per row. A target outside [0, V) (the model checks them on the
// host first) yields a NaN loss / NaN gradient row rather than a wild read.
void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V, int Vp,
                          cudaStream_t stream);
// dlogits = (softmax - onehot)·dloss over the first V columns, 0 in the
// padding; no probability buffer: each row takes its max and Σexp, then every
// thread rewrites the elements it read. dlogits may alias logits.
void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, const float* dloss, int N,
                           int V, int Vp, cudaStream_t stream);

// ---- optimizer ------------------------------------------------------------------------------
// Same formula as kernels/cpu/adamw.cpp (bias corrections computed in double
// on the host).
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, long t, cudaStream_t stream);

}  // namespace gpt::cuda
