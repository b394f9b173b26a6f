#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "kernels/cuda/device_info.h"

namespace gpt::cuda {

std::string device_report() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return std::string("no CUDA device (") + cudaGetErrorString(err) + ")";
  if (count == 0) return "no CUDA device";
  std::string out;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    char line[128];
    std::snprintf(line, sizeof line, ", compute capability %d.%d, %.1f GiB, %d SMs", prop.major, prop.minor,
                  prop.totalGlobalMem / 1073741824.0, prop.multiProcessorCount);
    out += "cuda:" + std::to_string(d) + " " + prop.name + line + (d + 1 < count ? "\n" : "");
  }
  return out;
}

}  // namespace gpt::cuda
