// The linear layer through cuBLASLt, float32 in and out. run.precision picks
// how the GEMMs compute (GemmPrecision, kernels/cuda/cuda_kernels.h):
//   fp32  float32 matrices, CUBLAS_COMPUTE_32F (strict float32);
//   tf32  float32 matrices, CUBLAS_COMPUTE_32F_FAST_TF32;
//   bf16  both operands rounded to bf16 by convert_to_bf16 (the rounding of
//         kernels/bf16_round.h, to nearest even, NaN kept) into scratch
//         buffers owned by Matmul, then A and B CUDA_R_16BF, C and D
//         CUDA_R_32F, compute CUBLAS_COMPUTE_32F, scale type CUDA_R_32F
//         (products of two bf16 are exact in float32; the sums are float32).
//         Only the GEMM operands are bf16: the parameters, activations,
//         gradients and the output stay float32 in memory, so this is
//         "autocast" for the matrix multiplies, not bf16 storage.
// cuBLAS is column-major: a row-major (R,K) matrix is a column-major (K,R)
// one, so
//   out  (N,OC) = inp·Wᵀ     is  outᵀ  (OC,N) = op_T(W: C×OC)  · inpᵀ (C×N)
//   dinp (N,C) += dout·W     is  dinpᵀ (C,N) += Wᵀ (C×OC)      · doutᵀ (OC×N)
//   dW  (OC,C) += doutᵀ·inp  is  dWᵀ  (C,OC) += inpᵀ (C×N)     · op_T(doutᵀ: OC×N)
// The bf16 copies keep this layout with rows padded to a multiple of 8
// elements (16 bytes, what the tensor-core kernels want), so the leading
// dimension of a bf16 operand may exceed the float32 one.
// The bias is added and reduced by small float32 kernels (kernels/cuda/bias.cu).
// Descriptors are made per call: simple, and cheap next to the GEMMs of a
// GPT-2 step.
#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "kernels/bf16_round.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_syntax.h"

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
// tensors inside the flat buffer are only element-aligned (2 bytes for bf16).
uint32_t alignment_of(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 2 && addr % a != 0) a /= 2;
  return a;
}

// Rows padded to a multiple of this many bf16 elements (16 bytes).
constexpr int kBf16RowMultiple = 8;

// Threads per block of the bf16 rounding kernels.
constexpr int kThreads = 256;

// Contiguous case (cols == ld): one flat grid-stride loop.
__global__ void __launch_bounds__(kThreads)
    bf16_flat_kernel(uint16_t* __restrict__ dst, const float* __restrict__ src, size_t n) {
  GPT_BLOCK_BOUND(kThreads);
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = round_to_bf16_bits(src[i]);
}

// Padded rows: blocks stride over rows, threads over the columns of a row;
// the padding columns are written as 0 (never read by the GEMM; set so that
// the scratch holds no stale values).
__global__ void __launch_bounds__(kThreads)
    bf16_rows_kernel(uint16_t* __restrict__ dst, const float* __restrict__ src, int rows, int cols, int ld_dst) {
  GPT_BLOCK_BOUND(kThreads);
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* s = src + size_t(r) * cols;
    uint16_t* d = dst + size_t(r) * ld_dst;
    for (int c = threadIdx.x; c < ld_dst; c += blockDim.x) d[c] = c < cols ? round_to_bf16_bits(s[c]) : uint16_t(0);
  }
}

}  // namespace

const char* gemm_precision_name(GemmPrecision p) {
  switch (p) {
    case GemmPrecision::Fp32:
      return "fp32";
    case GemmPrecision::Tf32:
      return "tf32";
    case GemmPrecision::Bf16:
      return "bf16";
  }
  return "?";
}

void convert_to_bf16(uint16_t* dst, const float* src, int rows, int cols, int ld_dst, cudaStream_t stream) {
  GPT_CHECK(rows >= 0 && cols >= 0 && ld_dst >= cols, "convert_to_bf16: rows ", rows, ", cols ", cols, ", ld ", ld_dst,
            " (need rows, cols >= 0 and ld >= cols)");
  if (rows == 0 || ld_dst == 0) return;
  if (ld_dst == cols) {
    const size_t n = size_t(rows) * cols;
    const size_t blocks = std::min<size_t>((n + kThreads - 1) / kThreads, 4096);
    GPT_LAUNCH(static_cast<unsigned>(blocks), kThreads, stream, bf16_flat_kernel)(dst, src, n);
  } else {
    // Narrow rows get a narrow block (a multiple of the warp size).
    const int threads = std::min(kThreads, (ld_dst + 31) / 32 * 32);
    const int blocks = std::min(rows, 8192);
    GPT_LAUNCH(blocks, threads, stream, bf16_rows_kernel)(dst, src, rows, cols, ld_dst);
  }
  GPT_CUDA_CHECK_LAUNCH("convert_to_bf16");
}

Matmul::Matmul(GemmPrecision precision) : precision_(precision) {
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
  for (uint16_t* p : scratch_)
    if (p) cudaFree(p);
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

Matmul::Operand Matmul::operand(int slot, const float* src, int rows, int cols, cudaStream_t stream) {
  if (precision_ != GemmPrecision::Bf16) return {src, cols, false};
  const int ld = (cols + kBf16RowMultiple - 1) / kBf16RowMultiple * kBf16RowMultiple;
  const size_t need = size_t(rows) * ld;
  if (scratch_elems_[slot] < need) {
    if (scratch_[slot]) {
      // Earlier GEMMs queued on the stream may still read the old buffer.
      GPT_CUDA_CHECK(cudaStreamSynchronize(stream));
      GPT_CUDA_CHECK(cudaFree(scratch_[slot]));
      scratch_[slot] = nullptr;
      scratch_elems_[slot] = 0;
    }
    void* p = nullptr;
    GPT_CUDA_CHECK(cudaMalloc(&p, need * sizeof(uint16_t)));
    scratch_[slot] = static_cast<uint16_t*>(p);
    scratch_elems_[slot] = need;
  }
  convert_to_bf16(scratch_[slot], src, rows, cols, ld, stream);
  return {scratch_[slot], ld, true};
}

void Matmul::gemm(bool trans_a, bool trans_b, int m, int n, int k, Operand A, Operand B, float* D, int ldd, float beta,
                  cudaStream_t stream) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    GPT_CHECK(beta == 1.0f, "matmul: inner dimension 0 with beta ", beta, " is not supported");
    return;  // D += nothing
  }
  GPT_CHECK(A.bf16 == B.bf16, "matmul: operands of two types (one bf16, one float32)");
  const bool bf16 = A.bf16;
  // A and B: bf16 or float32; C = D: float32; scale type (alpha, beta): float32.
  // TF32 only for float32 operands (bf16 products are exact in float32).
  const cudaDataType_t ab_type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute =
      precision_ == GemmPrecision::Tf32 && !bf16 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  Descriptors g;
  GPT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&g.op, compute, CUDA_R_32F));
  const cublasOperation_t opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  GPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  GPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  // Stored shapes: op(A) is m×k, so A is k×m when transposed; likewise B.
  GPT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.a, ab_type, trans_a ? k : m, trans_a ? m : k, A.ld));
  GPT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.b, ab_type, trans_b ? n : k, trans_b ? k : n, B.ld));
  GPT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.d, CUDA_R_32F, m, n, ldd));
  GPT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&g.pref));
  const uint64_t ws = workspace_bytes_;
  GPT_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(g.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const uint32_t align_a = alignment_of(A.p), align_b = alignment_of(B.p), align_d = alignment_of(D);
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
  GPT_CHECK(found > 0, "cuBLASLt found no ", bf16 ? "bf16-operand" : gemm_precision_name(precision_),
            " GEMM algorithm (A and B ", bf16 ? "bf16" : "float32", ", D float32) for m=", m, " n=", n, " k=", k,
            " (alignments A ", align_a, ", B ", align_b, ", D ", align_d, " bytes; leading dimensions ", A.ld, ", ",
            B.ld, ", ", ldd, ")");
  const float alpha = 1.0f;
  GPT_CUBLAS_CHECK(cublasLtMatmul(handle_, g.op, &alpha, A.p, g.a, B.p, g.b, &beta, D, g.d, D, g.d, &heuristic.algo,
                                  workspace_, workspace_bytes_, stream));
}

template <typename E>
void Matmul::forward_of(float* out, const E* inp, const E* weight, const float* bias, int N, int C, int OC,
                        cudaStream_t stream) {
  if (N > 0 && OC > 0 && C > 0) {
    const Operand w = operand(0, weight, OC, C, stream), x = operand(1, inp, N, C, stream);
    gemm(true, false, OC, N, C, w, x, out, OC, 0.0f, stream);
  } else if (N > 0 && OC > 0) {
    // No inputs (C = 0): out = 0 (+ bias), as the CPU kernel.
    GPT_CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(N) * OC * sizeof(float), stream));
  }
  if (bias) bias_add(out, bias, N, OC, stream);
}

template <typename E>
void Matmul::backward_of(float* dinp, float* dweight, float* dbias, const E* dout, const E* inp, const E* weight, int N,
                         int C, int OC, cudaStream_t stream) {
  if (N > 0 && C > 0 && OC > 0) {
    // dout once, for both GEMMs (slot 0); W (slot 1) only when dinp is wanted,
    // inp (slot 2) only when dweight is (the bf16 adapter asks for them apart).
    const Operand dy = operand(0, dout, N, OC, stream);
    if (dinp) gemm(false, false, C, N, OC, operand(1, weight, OC, C, stream), dy, dinp, C, 1.0f, stream);
    if (dweight) gemm(false, true, C, OC, N, operand(2, inp, N, C, stream), dy, dweight, C, 1.0f, stream);
  }
  // Empty shapes: nothing to add (every GEMM above would be D += 0).
  if (dbias) bias_backward(dbias, dout, N, OC, stream);
}

void Matmul::forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                     cudaStream_t stream) {
  forward_of(out, inp, weight, bias, N, C, OC, stream);
}

void Matmul::backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                      const float* weight, int N, int C, int OC, cudaStream_t stream) {
  backward_of(dinp, dweight, dbias, dout, inp, weight, N, C, OC, stream);
}

void Matmul::forward(float* out, const uint16_t* inp, const uint16_t* weight, const float* bias, int N, int C, int OC,
                     cudaStream_t stream) {
  forward_of(out, inp, weight, bias, N, C, OC, stream);
}

void Matmul::backward(float* dinp, float* dweight, float* dbias, const uint16_t* dout, const uint16_t* inp,
                      const uint16_t* weight, int N, int C, int OC, cudaStream_t stream) {
  backward_of(dinp, dweight, dbias, dout, inp, weight, N, C, OC, stream);
}

}  // namespace gpt::cuda
