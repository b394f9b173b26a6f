// CUDA device query, for `gpt info`. Compiled only when nvcc is found.
#pragma once
#include <string>

namespace gpt::cuda {

// One line per visible device (name, compute capability, memory), or the
// reason none is usable ("no CUDA device", driver errors).
std::string device_report();

}  // namespace gpt::cuda
