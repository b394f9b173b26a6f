// The CUDA emulator's cuBLASLt: the descriptor calls and cublasLtMatmul on
// the CPU, for the cases kernels/cuda/matmul.cu uses: A and B float32 (with
// CUBLAS_COMPUTE_32F or CUBLAS_COMPUTE_32F_FAST_TF32) or bf16 (with
// CUBLAS_COMPUTE_32F), C and D float32, scale type float32, op N or T.
// Anything else is refused as cuBLASLt would refuse it: the heuristic finds
// no algorithm. The checks a GPU would make by faulting are made here
// explicitly: every matrix must lie inside one device buffer, and every
// pointer must have the alignment the preference promised.
//
// Arithmetic: each element of D is a float32 sum over k in order, of
// products of the operands as the compute type sees them (bf16 widened
// exactly; in FAST_TF32 mode float32 rounded to TF32 here, to nearest even,
// while NVIDIA documents neither the rounding nor that a TF32 kernel is
// chosen at all).
// Tensor cores sum in another order, so results agree with a GPU to the
// tolerance of float32 accumulation, not bit for bit.
#include "cublasLt.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "emulator.h"
#include "kernels/bf16_round.h"

struct cublasLtContext {
  int unused;
};
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t workspace = 0;
  // cuBLASLt assumes 256-byte alignment unless the preference says less.
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
};

namespace {

size_t element_bytes(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : 4; }

bool supported(const cublasLtMatmulDescOpaque_t& op, const cublasLtMatrixLayoutOpaque_t& a,
               const cublasLtMatrixLayoutOpaque_t& b, const cublasLtMatrixLayoutOpaque_t& c,
               const cublasLtMatrixLayoutOpaque_t& d) {
  if (op.scale != CUDA_R_32F || c.type != CUDA_R_32F || d.type != CUDA_R_32F || a.type != b.type) return false;
  if (a.type == CUDA_R_32F) {
    if (op.compute != CUBLAS_COMPUTE_32F && op.compute != CUBLAS_COMPUTE_32F_FAST_TF32) return false;
  } else if (a.type != CUDA_R_16BF || op.compute != CUBLAS_COMPUTE_32F) {
    return false;
  }
  const uint64_t m = d.rows, n = d.cols;
  const uint64_t am = op.transa == CUBLAS_OP_N ? a.rows : a.cols, ak = op.transa == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t bk = op.transb == CUBLAS_OP_N ? b.rows : b.cols, bn = op.transb == CUBLAS_OP_N ? b.cols : b.rows;
  if (am != m || bn != n || ak != bk || c.rows != m || c.cols != n) return false;
  for (const auto* l : {&a, &b, &c, &d})
    if (l->ld < 0 || static_cast<uint64_t>(l->ld) < l->rows || l->ld == 0) return false;
  return true;
}

// Bytes a column-major layout spans from its first element.
size_t span_bytes(const cublasLtMatrixLayoutOpaque_t& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  return ((l.cols - 1) * static_cast<uint64_t>(l.ld) + l.rows) * element_bytes(l.type);
}

float tf32(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7f800000u) != 0x7f800000u) {  // finite: round 13 bits away, ties to even
    u += 0xfffu + ((u >> 13) & 1u);
    u &= ~0x1fffu;
  }
  return std::bit_cast<float>(u);
}

// Element (r, c) of a column-major matrix as the compute type sees it.
float element(const void* p, const cublasLtMatrixLayoutOpaque_t& l, uint64_t r, uint64_t c, bool round_tf32) {
  const uint64_t i = r + c * static_cast<uint64_t>(l.ld);
  if (l.type == CUDA_R_16BF) return gpt::bf16_bits_to_float(static_cast<const uint16_t*>(p)[i]);
  const float f = static_cast<const float*>(p)[i];
  return round_tf32 ? tf32(f) : f;
}

bool complain(const char* what) {
  std::fprintf(stderr, "cuda emulator: cublasLtMatmul: %s\n", what);
  return false;
}

// D = alpha·op(A)·op(B) + beta·C (defined after cublasLtMatmul, which queues it).
void product(const cublasLtMatmulDescOpaque_t& dsc, const void* A, const cublasLtMatrixLayoutOpaque_t& la,
             const void* B, const cublasLtMatrixLayoutOpaque_t& lb, float alpha, float beta, const void* C,
             const cublasLtMatrixLayoutOpaque_t& lc, void* D, const cublasLtMatrixLayoutOpaque_t& ld, uint64_t m,
             uint64_t n, uint64_t k);
}  // namespace

const char* cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasLtGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
  }
  return "unknown status";
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasLtContext{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  *desc = new cublasLtMatmulDescOpaque_t{compute, scale_type};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (!desc || !buf || size != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
  cublasOperation_t op;
  std::memcpy(&op, buf, sizeof op);
  if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      desc->transa = op;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSB:
      desc->transb = op;
      return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new cublasLtMatmulPreferenceOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (!pref || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    if (size != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&pref->workspace, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  const int i = static_cast<int>(attr) - static_cast<int>(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES);
  if (i < 0 || i > 3 || size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
  uint32_t align;
  std::memcpy(&align, buf, size);
  if (align == 0 || (align & (align - 1)) != 0) return CUBLAS_STATUS_INVALID_VALUE;  // a power of two
  pref->align[i] = align;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* found) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !a || !b || !c || !d || !pref || requested < 1 || !results || !found) return CUBLAS_STATUS_INVALID_VALUE;
  *found = 0;
  if (!supported(*desc, *a, *b, *c, *d)) return CUBLAS_STATUS_NOT_SUPPORTED;
  // The "algorithm" remembers the alignments it was chosen for.
  results[0] = cublasLtMatmulHeuristicResult_t{};
  for (int i = 0; i < 4; ++i) results[0].algo.data[i] = pref->align[i];
  results[0].algo.data[4] = 0x63756d75;  // marks an algorithm this heuristic made
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha_p, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta_p,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
  (void)workspace, (void)workspace_bytes;
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !a || !b || !c || !d || !alpha_p || !beta_p) return CUBLAS_STATUS_INVALID_VALUE;
  if (cuemu::sticky_error()) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (!supported(*desc, *a, *b, *c, *d)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (algo && algo->data[4] != 0x63756d75)
    return complain("algo was not made by cublasLtMatmulAlgoGetHeuristic"), CUBLAS_STATUS_INVALID_VALUE;
  const float alpha = *static_cast<const float*>(alpha_p), beta = *static_cast<const float*>(beta_p);
  const uint64_t m = d->rows, n = d->cols, k = desc->transa == CUBLAS_OP_N ? a->cols : a->rows;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  // What a GPU would find out by faulting or by a misaligned vector load.
  const void* ptrs[4] = {A, B, C, D};
  const cublasLtMatrixLayoutOpaque_t* lays[4] = {a, b, c, d};
  const char* names[4] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; ++i) {
    if (i == 2 && beta == 0.0f) continue;  // C is not read
    if (i < 2 && k == 0) continue;
    char msg[160];
    if (!cuemu::is_device(ptrs[i], span_bytes(*lays[i]))) {
      std::snprintf(msg, sizeof msg, "%s (%llu x %llu, ld %lld) is not inside one device buffer", names[i],
                    (unsigned long long)lays[i]->rows, (unsigned long long)lays[i]->cols, (long long)lays[i]->ld);
      return complain(msg), CUBLAS_STATUS_EXECUTION_FAILED;
    }
    const uint64_t promised = algo ? algo->data[i] : 256;
    if (reinterpret_cast<uintptr_t>(ptrs[i]) % promised != 0 ||
        reinterpret_cast<uintptr_t>(ptrs[i]) % element_bytes(lays[i]->type) != 0) {
      std::snprintf(msg, sizeof msg, "%s at %p is not aligned to the %llu bytes the preference promised", names[i],
                    ptrs[i], (unsigned long long)promised);
      return complain(msg), CUBLAS_STATUS_EXECUTION_FAILED;
    }
  }
  // D is written while A and B are read: it must not overlap them; and C = D
  // (in place) needs the same layout for both.
  auto overlaps = [](const void* p, const cublasLtMatrixLayoutOpaque_t& lp, const void* q,
                     const cublasLtMatrixLayoutOpaque_t& lq) {
    const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
    return a < b + span_bytes(lq) && b < a + span_bytes(lp);
  };
  if (k > 0 && (overlaps(D, *d, A, *a) || overlaps(D, *d, B, *b)))
    return complain("D overlaps A or B"), CUBLAS_STATUS_INVALID_VALUE;
  if (C == D && (c->ld != d->ld || c->type != d->type))
    return complain("C and D are the same memory with different layouts"), CUBLAS_STATUS_INVALID_VALUE;
  // The product runs when the stream gets there (runtime.cpp), with copies
  // of the descriptors (the caller may destroy them after the call) and of
  // alpha and beta (read at the call, as with CUBLAS_POINTER_MODE_HOST).
  std::vector<cuemu::Access> footprint;
  if (k > 0) {
    footprint.push_back({A, span_bytes(*a), false});
    footprint.push_back({B, span_bytes(*b), false});
  }
  if (beta != 0.0f) footprint.push_back({C, span_bytes(*c), false});
  footprint.push_back({D, span_bytes(*d), true});
  const bool queued = cuemu::enqueue(
      stream, "cublasLtMatmul", std::move(footprint),
      [desc_v = *desc, a_v = *a, b_v = *b, c_v = *c, d_v = *d, A, B, C, D, alpha, beta, m, n, k] {
        product(desc_v, A, a_v, B, b_v, alpha, beta, C, c_v, D, d_v, m, n, k);
      });
  return queued ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

namespace {
// D = alpha·op(A)·op(B) + beta·C, run from the stream's queue.
void product(const cublasLtMatmulDescOpaque_t& dsc, const void* A, const cublasLtMatrixLayoutOpaque_t& la,
             const void* B, const cublasLtMatrixLayoutOpaque_t& lb, float alpha, float beta, const void* C,
             const cublasLtMatrixLayoutOpaque_t& lc, void* D, const cublasLtMatrixLayoutOpaque_t& ld, uint64_t m,
             uint64_t n, uint64_t k) {
  const auto* desc = &dsc;
  const auto *a = &la, *b = &lb, *c = &lc, *d = &ld;
  cuemu::DeviceAccess open(true);
  const bool round_tf32 = desc->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  // op(A) (m×k) and op(B) (k×n), column-major and contiguous.
  std::vector<float> opa(m * k), opb(k * n), acc(m);
  for (uint64_t p = 0; p < k; ++p)
    for (uint64_t i = 0; i < m; ++i)
      opa[i + p * m] =
          desc->transa == CUBLAS_OP_N ? element(A, *a, i, p, round_tf32) : element(A, *a, p, i, round_tf32);
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t p = 0; p < k; ++p)
      opb[p + j * k] =
          desc->transb == CUBLAS_OP_N ? element(B, *b, p, j, round_tf32) : element(B, *b, j, p, round_tf32);
  float* dp = static_cast<float*>(D);
  const float* cp = static_cast<const float*>(C);
  for (uint64_t j = 0; j < n; ++j) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (uint64_t p = 0; p < k; ++p) {
      const float bv = opb[p + j * k];
      const float* col = &opa[p * m];
      for (uint64_t i = 0; i < m; ++i) acc[i] += col[i] * bv;
    }
    for (uint64_t i = 0; i < m; ++i) {
      const float cv = beta == 0.0f ? 0.0f : beta * cp[i + j * static_cast<uint64_t>(c->ld)];
      dp[i + j * static_cast<uint64_t>(d->ld)] = alpha * acc[i] + cv;
    }
  }
}
}  // namespace
