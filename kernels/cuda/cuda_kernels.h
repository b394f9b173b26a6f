// CUDA kernels for every op of Backend<float> except attention
// (kernels/cuda/attention.h): the same contracts as kernels/cpu/cpu_kernels.h
// (layouts llm.c-style, every backward ACCUMULATES, crossentropy_backward
// overwrites and may alias). Every tensor is float32, except the bf16
// conversions and the linear layer's bf16-operand entry points for bf16
// storage (the uint16_t overloads of Matmul::forward/backward and
// bias_backward) and the native bf16 forms of LayerNorm, GELU, the residual
// adds and the classifier (the bf16 overloads below: bf16 activations,
// weights and logits read and written as stored, the same float32 math in
// registers, float32 statistics, gradients of the weights and losses;
// kernels/cuda/storage.cuh); the
// other reduced precision is inside the GEMMs (Matmul: TF32, or bf16
// operands with float32 accumulation and output).
// All pointers are device memory and every launch goes to `stream`; a failed
// CUDA or cuBLAS call throws gpt::Error naming the call and the message.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/attention_spec.h"
#include "kernels/bf16_round.h"

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
// The same from bf16 tables (bit patterns; run.storage "bf16"): only the rows
// the tokens pick are widened.
void encoder_forward(float* out, const int32_t* tokens, const uint16_t* wte, const uint16_t* wpe, int B, int Tn, int C,
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
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight, const bf16* bias,
                       int N, int C, cudaStream_t stream);
void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C, cudaStream_t stream);

// ---- RMSNorm (as cpu::rmsnorm_forward / backward) -----------------------------------
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, double eps,
                     cudaStream_t stream);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C, cudaStream_t stream);

// ---- linear layer through cuBLASLt ----------------------------------------------------
// How the GEMMs of the linear layer compute (run.precision):
//   Fp32  strict float32 (CUBLAS_COMPUTE_32F on float32 matrices; for parity);
//   Tf32  float32 matrices, TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32);
//   Bf16  "autocast": both operands of every GEMM are rounded to bf16
//         (kernels/bf16_round.h, to nearest even) into scratch buffers, then
//         multiplied with float32 accumulation (CUBLAS_COMPUTE_32F) into the
//         float32 output. Weights, activations and gradients stay float32 in
//         memory; biases and bias gradients are float32 kernels.
enum class GemmPrecision { Fp32, Tf32, Bf16 };
const char* gemm_precision_name(GemmPrecision p);  // "fp32", "tf32", "bf16"

// Owns the cuBLASLt handle and workspace, and in Bf16 mode the bf16 scratch
// buffers of the operands (grown on demand, cudaMalloc'd, so 256-byte
// aligned; rows padded to a multiple of 8 elements). Calls must be ordered
// on one stream (the backend's): a scratch buffer is reused by the next call.
class Matmul {
 public:
  explicit Matmul(GemmPrecision precision);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;
  GemmPrecision precision() const { return precision_; }

  // out (N,OC) = inp (N,C) · weightᵀ + bias (OC, may be null).
  void forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
               cudaStream_t stream);
  // dinp (N,C) += dout·W; dweight (OC,C) += doutᵀ·inp; dbias (OC) += Σ_n
  // dout; each may be null (not wanted). Bf16: dout is rounded once and
  // used by both GEMMs; dbias sums the float32 dout.
  void backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                int N, int C, int OC, cudaStream_t stream);
  // The same on bf16 operands (bit patterns; bf16 storage, make_bf16_backend)
  // with float32 results: no conversion, the GEMMs read them as they are.
  // bf16 values are exact in float32, so in every precision these are bf16
  // GEMMs with float32 accumulation (CUBLAS_COMPUTE_32F; TF32 would not
  // change the products). dbias sums dout widened.
  void forward(float* out, const uint16_t* inp, const uint16_t* weight, const float* bias, int N, int C, int OC,
               cudaStream_t stream);
  void backward(float* dinp, float* dweight, float* dbias, const uint16_t* dout, const uint16_t* inp,
                const uint16_t* weight, int N, int C, int OC, cudaStream_t stream);
  // D (m×n) = op(A)·op(B) + beta·D on float32 operands, column-major as
  // cuBLAS counts (leading dimensions lda, ldb, ldd), in the float32 or TF32
  // arithmetic of the precision (float32 for bf16: no conversion). Muon's
  // Newton–Schulz iteration (kernels/cuda/muon.cu) is built from it.
  void gemm_f32(bool trans_a, bool trans_b, int m, int n, int k, const float* A, int lda, const float* B, int ldb,
                float* D, int ldd, float beta, cudaStream_t stream) {
    gemm(trans_a, trans_b, m, n, k, Operand{A, lda, false}, Operand{B, ldb, false}, D, ldd, beta, stream);
  }

 private:
  // A row-major (rows, cols) matrix of operands.
  struct Operand {
    const void* p;
    int ld;     // elements between rows
    bool bf16;  // bf16 elements (else float32)
  };
  // The float32 operand as it enters the GEMM: itself (Fp32, Tf32), or its
  // bf16 copy in scratch buffer `slot` (Bf16).
  Operand operand(int slot, const float* src, int rows, int cols, cudaStream_t stream);
  // A bf16 operand enters the GEMM as it is (contiguous rows).
  static Operand operand(int /*slot*/, const uint16_t* src, int /*rows*/, int cols, cudaStream_t /*stream*/) {
    return {src, cols, true};
  }
  // forward / backward for operands of element type E (float or uint16_t).
  template <typename E>
  void forward_of(float* out, const E* inp, const E* weight, const float* bias, int N, int C, int OC,
                  cudaStream_t stream);
  template <typename E>
  void backward_of(float* dinp, float* dweight, float* dbias, const E* dout, const E* inp, const E* weight, int N,
                   int C, int OC, cudaStream_t stream);
  // Column-major D (m,n) = op(A)·op(B) + beta·D, as cuBLAS sees it; A and B
  // are both float32 or both bf16 (Operand::bf16).
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, Operand A, Operand B, float* D, int ldd, float beta,
            cudaStream_t stream);
  static constexpr int kScratchSlots = 3;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  GemmPrecision precision_ = GemmPrecision::Fp32;
  uint16_t* scratch_[kScratchSlots] = {};
  size_t scratch_elems_[kScratchSlots] = {};
};

// dst (rows, ld_dst) = src (rows, cols, contiguous) rounded to bf16 bit
// patterns (kernels/bf16_round.h); columns cols..ld_dst-1 are set to 0.
void convert_to_bf16(uint16_t* dst, const float* src, int rows, int cols, int ld_dst, cudaStream_t stream);

// out (N,OC) += bias broadcast over rows.
void bias_add(float* out, const float* bias, int N, int OC, cudaStream_t stream);
// dbias (OC) += Σ_n dout[n,:] (dout float32, or bf16 bit patterns).
void bias_backward(float* dbias, const float* dout, int N, int OC, cudaStream_t stream);
void bias_backward(float* dbias, const uint16_t* dout, int N, int OC, cudaStream_t stream);

// ---- GELU (tanh approximation) -----------------------------------------------------------
void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, cudaStream_t stream);
void gelu_forward(bf16* out, const bf16* inp, size_t n, cudaStream_t stream);
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n, cudaStream_t stream);

// ---- grouped-query attention (as cpu::gqa_expand / gqa_reduce) --------------------------
void gqa_expand(float* qkv, const float* grouped, int N, int NH, int NKV, int D, cudaStream_t stream);
void gqa_reduce(float* dgrouped, const float* dqkv, int N, int NH, int NKV, int D, cudaStream_t stream);

// ---- QK-norm (as cpu::qknorm_forward / backward) ---------------------------------------
void qknorm_forward(float* out, float* rstd, const float* inp, const float* wq, const float* wk, const float* sq, int N,
                    int NH, int D, double eps, cudaStream_t stream);
void qknorm_backward(float* dinp, float* dwq, float* dwk, float* dsq, const float* dout, const float* inp,
                     const float* wq, const float* wk, const float* sq, const float* rstd, int N, int NH, int D,
                     cudaStream_t stream);

// ---- SwiGLU, ReLU² and exact GELU (as cpu::swiglu_* / relu2_* / gelu_erf_*) ----------------------------------------
void swiglu_forward(float* out, const float* inp, int N, int F, cudaStream_t stream);
void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F, cudaStream_t stream);
void gelu_erf_forward(float* out, const float* inp, size_t n, cudaStream_t stream);
void gelu_erf_backward(float* dinp, const float* inp, const float* dout, size_t n, cudaStream_t stream);
void relu2_forward(float* out, const float* inp, size_t n, cudaStream_t stream);
void relu2_backward(float* dinp, const float* inp, const float* dout, size_t n, cudaStream_t stream);

// ---- the sigmoid output gate (as cpu::sigmoid_gate_forward / backward) --------------------
void sigmoid_gate_forward(float* out, const float* y, const float* g, size_t n, cudaStream_t stream);
void sigmoid_gate_backward(float* dy, float* dg, const float* dout, const float* y, const float* g, size_t n,
                           cudaStream_t stream);

// ---- the forget gate (as cpu::forget_forward / forget_backward) ------------------------------
void forget_forward(float* c, const float* g, int B, int Tn, int NH, cudaStream_t stream);
void forget_backward(float* dg, const float* dc, const float* g, int B, int Tn, int NH, cudaStream_t stream);

// ---- FIRE's bias table (as cpu::fire_forward / fire_backward) --------------------------------
// table (NH,T,T) from a layer's parameter block p (attn::fire::count(NH)
// floats), the MLP evaluated in double per entry; dp += the gradient of
// Σ_b Σ dtable[b]·table (dtable (B,NH,T,T)), summed in double in a fixed
// order (no atomics).
void fire_forward(float* table, const float* p, int Tn, int NH, double L0, cudaStream_t stream);
void fire_backward(float* dp, const float* dtable, const float* p, int B, int Tn, int NH, double L0,
                   cudaStream_t stream);

// ---- the distance biases under position ids (as cpu::position_table_*) ----------------------
// The forward in double per entry as the CPU's; the backward's per-parameter
// sums in double, per block of pairs and then the blocks in order (no
// atomics; the CPU sums the pairs in one run).
void position_table_forward(float* table, const float* p, const int32_t* pos, int B, int Tn, int NH,
                            const AttentionSpec& s, cudaStream_t stream);
void position_table_backward(float* dp, const float* dtable, const float* p, const int32_t* pos, int B, int Tn,
                             int NH, const AttentionSpec& s, cudaStream_t stream);

// ---- PoPE (as cpu::pope_*) -------------------------------------------------------------------
void pope_forward(float* qkv2, const float* qkv, const float* delta, int B, int Tn, int C, int NH, double theta,
                  const int32_t* pos, cudaStream_t stream);
void pope_backward(float* dqkv, float* ddelta, const float* dqkv2, const float* qkv, const float* delta, int B, int Tn,
                   int C, int NH, double theta, const int32_t* pos, cudaStream_t stream);
void pope_output_forward(float* y, const float* y2, int N, int C, int NH, cudaStream_t stream);
void pope_output_backward(float* dy2, const float* dy, int N, int C, int NH, cudaStream_t stream);

// ---- differential attention (as cpu::diff_*, head_repeat, head_reduce) -----------------------
void diff_split_forward(float* qkv2, const float* qkv, int N, int C, int NH, cudaStream_t stream);
void diff_split_backward(float* dqkv, const float* dqkv2, int N, int C, int NH, cudaStream_t stream);
void diff_combine_forward(float* out, float* rstd, const float* y2, const float* lam, const float* gain, int N, int C,
                          int NH, double lambda_init, cudaStream_t stream);
void diff_combine_backward(float* dy2, float* dlam, float* dgain, const float* dout, const float* y2, const float* rstd,
                           const float* lam, const float* gain, int N, int C, int NH, double lambda_init,
                           cudaStream_t stream);
void head_repeat(float* dst, const float* src, size_t outer, int NH, size_t inner, int group, cudaStream_t stream);
void head_reduce(float* dst, const float* src, size_t outer, int NH, size_t inner, int group, cudaStream_t stream);

// ---- element-wise ---------------------------------------------------------------------------
void residual_forward(float* out, const float* a, const float* b, size_t n, cudaStream_t stream);
void add_inplace(float* dst, const float* src, size_t n, cudaStream_t stream);
void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n, cudaStream_t stream);
void add_inplace(bf16* dst, const bf16* src, size_t n, cudaStream_t stream);
// Element-wise conversions for bf16 storage (kernels/bf16_round.h: widening
// is exact, rounding to nearest even).
void bf16_to_float(float* dst, const uint16_t* src, size_t n, cudaStream_t stream);
void float_to_bf16(uint16_t* dst, const float* src, size_t n, cudaStream_t stream);
void scale_inplace(float* x, float s, size_t n, cudaStream_t stream);
// Σ x²: each of kSumSquaresBlocks blocks writes its partial sum (accumulated
// in double) to partial[block]; the caller adds them on the host in order,
// so the result does not depend on scheduling.
constexpr int kSumSquaresBlocks = 256;
void sum_squares_partials(double* partial, const float* x, size_t n, cudaStream_t stream);

// ---- RoPE ("half" pair layout over d_r channels, angle (pos0 + t or pos[b·T+t])·θ'_i in double) --
// The contract of cpu::rope_forward / rope_backward (kernels/cpu/cpu_kernels.h).
void rope_forward(float* out, const float* inp, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0,
                  const int32_t* pos, cudaStream_t stream);
void rope_backward(float* dinp, const float* dout, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0,
                   const int32_t* pos, cudaStream_t stream);

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
void crossentropy_forward(float* losses, const bf16* logits, const int32_t* targets, int N, int V, int Vp,
                          cudaStream_t stream);
void crossentropy_backward(bf16* dlogits, const bf16* logits, const int32_t* targets, const float* dloss, int N,
                           int V, int Vp, cudaStream_t stream);

// ---- optimizer ------------------------------------------------------------------------------
// Same formula as kernels/cpu/adamw.cpp (bias corrections computed in double
// on the host).
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, double lr, double beta1, double beta2,
                  double eps, double weight_decay, long t, cudaStream_t stream);
// Muon: the formulas of kernels/cpu/muon.cpp (contracts in cpu_kernels.h).
// newton_schulz runs its GEMMs through mm (gemm_f32) and its norm through
// partial (kSumSquaresBlocks doubles) and one float, all on the stream with no
// host synchronisation; work holds muon::work_size(rows, cols) floats.
void muon_momentum(float* grad, float* m, size_t n, double beta, cudaStream_t stream);
void newton_schulz(Matmul& mm, float* x, int rows, int cols, int steps, float* work, double* partial,
                   cudaStream_t stream);
void muon_apply(float* param, const float* update, size_t n, double lr, double scale, double weight_decay,
                cudaStream_t stream);

}  // namespace gpt::cuda
