// make_backend: run.device -> the backend that runs the model.
#include <cstdlib>
#include <string>

#include "backend/backend.h"
#include "core/check.h"

namespace gpt {

#ifdef GPT_HAVE_CUDA
// src/backend/cuda_backend.cpp
bool cuda_device_present(std::string* why);
std::unique_ptr<Backend<float>> make_cuda_backend(bool tf32);
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
#endif

bool cuda_tf32_from_env() {
  const char* v = std::getenv("GPT_CUDA_TF32");
  if (!v || std::string(v).empty() || std::string(v) == "0") return false;
  if (std::string(v) == "1") return true;
  fail("environment variable GPT_CUDA_TF32=\"", v, "\": valid: 0 (strict float32 GEMMs) or 1 (allow TF32)");
}

std::unique_ptr<Backend<float>> make_backend(const std::string& device) {
  if (device == "cpu") return make_cpu_backend<float>();
  if (device == "cuda") {
#ifdef GPT_HAVE_CUDA
    return make_cuda_backend(cuda_tf32_from_env());
#else
    fail("run.device \"cuda\": this binary was built without CUDA (nvcc was not found at configure time); valid: cpu");
#endif
  }
  fail("run.device \"", device, "\" is not a device; valid: cpu, cuda");
}

}  // namespace gpt
