// What the emulator's cuBLASLt (cublaslt.cpp) needs of its runtime
// (runtime.cpp); not part of the CUDA API.
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

namespace cuemu {

// Device buffers are accessible while one of these lives. device_code:
// kernels or cuBLASLt run meanwhile, which may write out of bounds, so the
// 0xff bytes around every buffer are checked when the last one closes
// (copies and memsets are bounds-checked before they start).
struct DeviceAccess {
  explicit DeviceAccess(bool device_code = false);
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

// Whether [p, p + bytes) lies inside one cudaMalloc'd buffer.
bool is_device(const void* p, size_t bytes);

// Whether a kernel has failed (every later call reports it).
bool sticky_error();

// The order a launch's blocks run in: forward (index order, the default),
// reverse, or a seeded shuffle, new for every launch. From the environment
// variable GPT_EMU_BLOCK_ORDER = forward | reverse | shuffle[:SEED]; tests
// may override it (set_block_order, null: back to the environment's).
// With interleave = k > 1 (GPT_EMU_INTERLEAVE=k, 1 to 8), k blocks of that
// order are in flight at once, each run up to its next barrier in turn.
struct BlockOrder {
  enum Kind { Forward, Reverse, Shuffle } kind = Forward;
  unsigned long long seed = 1;
  unsigned interleave = 1;
};
BlockOrder block_order();
void set_block_order(const BlockOrder* order);

// Stream order (runtime.cpp): work is queued on its stream and runs only
// where real CUDA would have to have run it (a synchronisation, an event
// waited for, a blocking copy). One piece of queued work touches the
// `footprint`'s byte ranges; work queued on another stream that is not
// ordered before it (no event, no implicit order of the legacy default
// stream, no host synchronisation in between) and touches the same bytes,
// one of the two writing, is a race: enqueue reports it on stderr, makes the
// error sticky (cudaErrorLaunchFailure) and returns false.
struct Access {
  const void* p;
  size_t bytes;
  bool write;
};
bool enqueue(const void* stream, const char* what, std::vector<Access> footprint, std::function<void()> run);

}  // namespace cuemu
