// When a CPU kernel's loop is worth the OpenMP team.
#pragma once
#include <cstddef>

namespace gpt::cpu {

// Loops over fewer elements (GEMMs: multiply-adds) than this run on the
// calling thread: waking the OpenMP team costs microseconds, and a scheduler
// tick on a busy machine.
inline constexpr size_t kMinParallelWork = size_t(1) << 15;

}  // namespace gpt::cpu
