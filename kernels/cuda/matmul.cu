// The linear layer through cuBLASLt, float32 in and out (CUBLAS_COMPUTE_32F,
// or CUBLAS_COMPUTE_32F_FAST_TF32 when TF32 is allowed). cuBLAS is
// column-major: a row-major (R,K) matrix is a column-major (K,R) one, so
//   out  (N,OC) = inp·Wᵀ     is  outᵀ  (OC,N) = op_T(W: C×OC)  · inpᵀ (C×N)
//   dinp (N,C) += dout·W     is  dinpᵀ (C,N) += Wᵀ (C×OC)      · doutᵀ (OC×N)
//   dW  (OC,C) += doutᵀ·inp  is  dWᵀ  (C,OC) += inpᵀ (C×N)     · op_T(doutᵀ: OC×N)
// The bias is added and reduced by small kernels (kernels/cuda/ops.cu).
// Descriptors are made per call: simple, and cheap next to the GEMMs of a
// GPT-2 step.
#include <cstdint>

#include "core/check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace gpt::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

// Destroys whatever cuBLASLt descriptors were created, also when a check throws.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// Largest power of two (at most 256) dividing the address: cuBLASLt's
// heuristic assumes 256-byte alignment unless told otherwise, and parameter
// tensors inside the flat buffer are only float-aligned.
uint32_t alignment_of(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 4 && addr % a != 0) a /= 2;
  return a;
}

}  // namespace

Matmul::Matmul(bool tf32) : tf32_(tf32) {
  GPT_CUBLAS_CHECK(cublasLtCreate(&handle_));
  const cudaError_t st = cudaMalloc(&workspace_, kWorkspaceBytes);
  if (st != cudaSuccess) {
    cublasLtDestroy(handle_);
    handle_ = nullptr;
    GPT_CUDA_CHECK(st);
  }
  workspace_bytes_ = kWorkspaceBytes;
}

Matmul::~Matmul() {
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

void Matmul::gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* A, int lda, const float* B, int ldb,
                  float* D, int ldd, float beta, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    GPT_CHECK(beta == 1.0f, "matmul: inner dimension 0 with beta ", beta, " is not supported");
    return;  // D += nothing
  }
  Descriptors g;
  GPT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&g.op, tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                            CUDA_R_32F));
  const cublasOperation_t opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  GPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  GPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  // Stored shapes: op(A) is m×k, so A is k×m when transposed; likewise B.
  GPT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_32F, trans_a ? k : m, trans_a ? m : k, lda));
  GPT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.b, CUDA_R_32F, trans_b ? n : k, trans_b ? k : n, ldb));
  GPT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.d, CUDA_R_32F, m, n, ldd));
  GPT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&g.pref));
  const uint64_t ws = workspace_bytes_;
  GPT_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(g.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const uint32_t align_a = alignment_of(A), align_b = alignment_of(B), align_d = alignment_of(D);
  GPT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(g.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                        sizeof align_a));
  GPT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(g.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                        sizeof align_b));
  GPT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(g.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                        sizeof align_d));
  GPT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(g.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                        sizeof align_d));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  GPT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, g.op, g.a, g.b, g.d, g.d, g.pref, 1, &heuristic, &found));
  GPT_CHECK(found > 0, "cuBLASLt found no float32 GEMM algorithm for m=", m, " n=", n, " k=", k,
            " (alignments A ", align_a, ", B ", align_b, ", D ", align_d, " bytes)");
  const float alpha = 1.0f;
  GPT_CUBLAS_CHECK(cublasLtMatmul(handle_, g.op, &alpha, A, g.a, B, g.b, &beta, D, g.d, D, g.d, &heuristic.algo,
                                  workspace_, workspace_bytes_, stream));
}

void Matmul::forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                     cudaStream_t stream) {
  gemm(true, false, OC, N, C, weight, C, inp, C, out, OC, 0.0f, stream);
  if (bias) bias_add(out, bias, N, OC, stream);
}

void Matmul::backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                      const float* weight, int N, int C, int OC, cudaStream_t stream) {
  if (dinp) gemm(false, false, C, N, OC, weight, C, dout, OC, dinp, C, 1.0f, stream);
  gemm(false, true, C, OC, N, inp, C, dout, OC, dweight, C, 1.0f, stream);
  if (dbias) bias_backward(dbias, dout, N, OC, stream);
}

}  // namespace gpt::cuda
