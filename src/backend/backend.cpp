// make_backend: run.device and run.precision -> the backend that runs the model.
#include <string>

#include "backend/backend.h"
#include "core/check.h"

namespace gpt {

#ifdef GPT_HAVE_CUDA
// src/backend/cuda_backend.cpp
bool cuda_device_present(std::string* why);
std::unique_ptr<Backend<float>> make_cuda_backend(const std::string& precision);
#endif

bool cuda_available(std::string* why) {
#ifdef GPT_HAVE_CUDA
  return cuda_device_present(why);
#else
  if (why) *why = "this binary was built without CUDA (nvcc was not found at configure time)";
  return false;
#endif
}

#ifndef GPT_HAVE_CUDA
std::string cuda_device_name() { return ""; }
size_t cuda_memory_in_use() { return 0; }
#endif

std::unique_ptr<Backend<float>> make_backend(const std::string& device, const std::string& precision) {
  GPT_CHECK(device == "cpu" || device == "cuda", "run.device \"", device, "\" is not a device; valid: cpu, cuda");
  GPT_CHECK(precision == "fp32" || precision == "tf32" || precision == "bf16", "run.precision \"", precision,
            "\" is not a precision; valid: fp32, tf32, bf16");
  if (device == "cpu") {
    GPT_CHECK(precision == "fp32", "run.precision \"", precision, "\" with run.device \"cpu\": the cpu backend ",
              "computes in float32 only; valid: run.precision \"fp32\" on cpu, or \"tf32\" / \"bf16\" with ",
              "run.device \"cuda\"");
    return make_cpu_backend<float>();
  }
#ifdef GPT_HAVE_CUDA
  return make_cuda_backend(precision);
#else
  fail("run.device \"cuda\": this binary was built without CUDA (nvcc was not found at configure time); valid: cpu");
#endif
}

}  // namespace gpt
