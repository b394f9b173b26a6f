// CUDA and cuBLAS status -> gpt::Error naming the call, the place and the
// library's message.
#include "core/check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace gpt::cuda {

void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  fail("CUDA error in ", call, " [", file, ":", line, "]: ", cudaGetErrorName(status), ": ",
       cudaGetErrorString(status));
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail("cuBLAS error in ", call, " [", file, ":", line, "]: status ", static_cast<int>(status), " (",
       cublasLtGetStatusName(status), ": ", cublasLtGetStatusString(status), ")");
}

}  // namespace gpt::cuda
