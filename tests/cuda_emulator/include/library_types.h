// The CUDA emulator's stand-in for <library_types.h>: the data types the
// cuBLASLt calls of kernels/cuda/matmul.cu name.
#pragma once

enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_16BF = 14,
};
using cudaDataType = cudaDataType_t;
