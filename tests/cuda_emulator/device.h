// The device side of the CUDA emulator: what kernels/cuda/*.cu need of the
// CUDA language, so that g++ compiles them as C++ and the CPU runs them.
//
// A launch runs its blocks one after another (or a few at a time, taking
// turns at their barriers: GPT_EMU_INTERLEAVE). The threads of a block are
// fibers on one CPU thread, run warp by warp: the lanes of a warp run in
// turn, each until it waits at __syncthreads or at a warp shuffle, until
// the whole warp waits at a block barrier or has returned; then the next
// warp runs. A barrier opens when every thread of the block that has not
// returned has reached it, a shuffle when every live lane of the warp has.
// A warp thus runs ahead of the others as far as the barriers allow, and
// odd blocks take warps and lanes in reverse order: a missing barrier shows
// as reading what another thread has not written yet, or overwriting what
// it has not read yet, in one order or the other. Threads that wait at
// different __syncthreads calls, or some at a barrier and others at a
// shuffle (a deadlock), fail the launch.
// Shared memory is declared with GPT_SHARED (kernels/cuda/cuda_syntax.h;
// a bare __shared__ does not compile here): each block gets fresh arrays
// filled with 0xff bytes, so reading an element no thread of the block has
// written yet gives NaN (or -1), which a parity test notices.
//
// What this catches: wrong indices and bounds (device memory sits against an
// inaccessible guard page, with 0xff bytes around it that must stay so;
// host code that touches device memory faults; see runtime.cpp), host
// pointers passed to kernels, missing barriers between a write and a read
// of shared memory by other threads, threads at different barriers,
// shuffles with absent lanes, more than 48 KiB of shared memory, launch
// configurations beyond CUDA's limits; tensor-core instructions (mma.sync,
// ldmatrix: runtime.cpp) with a lane missing, lanes at different warp
// instructions, ldmatrix rows outside shared memory or misaligned. Races between blocks show by
// running them in another order (GPT_EMU_BLOCK_ORDER, emulator.h) and
// several at a time interleaved at their barriers (GPT_EMU_INTERLEAVE),
// and work on streams is queued and checked for races between streams
// (runtime.cpp). What it cannot: interleavings finer than a barrier,
// memory-model effects, partial-mask shuffles, and speed. Float math is the host's (expf is glibc's, not the
// GPU's), so parity tolerances still have to hold on a real GPU
// (docs/gpu.md lists all of it).
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <source_location>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "emulator.h"

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)

namespace cuemu {

// The CUDA thread that runs now (valid inside a kernel only).
struct ThreadIds {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
};
const ThreadIds& ids();

// The block's shared array for the GPT_SHARED declaration `key`: the first
// thread to reach it allocates it (0xff-filled), the others get the same.
void* shared_memory(size_t bytes, size_t align, const void* key);

// Blocks until every live thread of the block has arrived; every thread
// must wait at the same call site (`site`) or the launch fails.
void syncthreads(const std::source_location& site);
// Lane-exchange of 8 bytes: returns the bits given by lane `lane ^ lane_mask`
// of the calling lane's warp (within groups of `width` lanes).
uint64_t shfl_xor_bits(unsigned mask, uint64_t bits, int lane_mask, int width);

// The tensor-core instructions (kernels/cuda/mma.cuh), as warp collectives:
// every lane of the warp must call them. mma.sync.m16n8k16 with bf16
// operands and float32 accumulators: d = a·b + c over the warp's fragments.
void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
// ldmatrix.sync.m8n8.b16 of `num` (1, 2, 4) matrices, with or without .trans;
// `row` is this lane's row address in the block's shared memory.
void ldmatrix_b16(uint32_t* r, int num, bool trans, const void* row);

// A kernel failed (the message says how): the launch stops, and the runtime
// reports cudaErrorLaunchFailure from then on, as after a GPU fault.
[[noreturn]] void fail(const char* what);

// GPT_BLOCK_BOUND(n) (kernels/cuda/cuda_syntax.h), the first statement of
// every kernel: fails the launch when its block holds more than n threads,
// the kernel's __launch_bounds__, which a GPU refuses to launch above.
void block_bound(unsigned long long n, const char* kernel);

// Queues a launch on `stream` (runtime.cpp runs it, body once for every
// thread of the grid, when the stream's work has to run); false if the
// configuration was refused (cudaGetLastError then says why) or the launch
// races with work queued on another stream (emulator.h, enqueue). A kernel's
// footprint is the first element of each pointer argument, written unless
// the pointer is to const: how far the kernel reaches past it is unknown.
bool run_grid(dim3 grid, dim3 block, void* stream, const char* name, std::vector<Access> footprint,
              std::function<void()> body);

// A kernel argument that is a pointer must be null or point into device
// memory (a host pointer faults on a GPU); otherwise the launch fails.
bool argument_ok(const void* p, int index, const char* kernel);
template <typename T>
bool argument_ok(const T& v, int index, const char* kernel) {
  if constexpr (std::is_pointer_v<T>)
    return argument_ok(static_cast<const void*>(v), index, kernel);
  else
    return true;
}

// A pointer argument's part of the launch's footprint (run_grid).
template <typename T>
void add_access(std::vector<Access>& footprint, const T& v) {
  if constexpr (std::is_pointer_v<T>) {
    using E = std::remove_pointer_t<T>;
    if (!v) return;
    if constexpr (std::is_void_v<E>)
      footprint.push_back({static_cast<const void*>(v), 1, !std::is_const_v<E>});
    else
      footprint.push_back({static_cast<const void*>(v), sizeof(E), !std::is_const_v<E>});
  }
}

// kernel<<<grid, block, 0, stream>>>(args...) is
// launcher(grid, block, stream, kernel)(args...): every thread gets its own
// copy of the arguments, converted to the kernel's parameter types at the
// launch as CUDA does.
template <typename... P>
struct Launcher {
  void (*kernel)(P...);
  dim3 grid, block;
  void* stream;
  const char* name;
  template <typename... A>
  void operator()(A&&... a) const {
    const std::tuple<std::decay_t<P>...> args(std::forward<A>(a)...);
    const bool ok = std::apply(
        [&](const auto&... v) {
          int i = 0;
          return (argument_ok(v, i++, name) && ...);
        },
        args);
    if (!ok) return;
    std::vector<Access> footprint;
    std::apply([&](const auto&... v) { (add_access(footprint, v), ...); }, args);
    // The arguments are copied into the queued launch, as CUDA copies them
    // at the launch: the caller's variables may change before it runs.
    run_grid(grid, block, stream, name, std::move(footprint), [kernel = kernel, args] { std::apply(kernel, args); });
  }
};
template <typename S, typename... P>
Launcher<P...> launcher(dim3 grid, dim3 block, S stream, const char* name, void (*kernel)(P...)) {
  return {kernel, grid, block, static_cast<void*>(stream), name};
}

}  // namespace cuemu

#define threadIdx (::cuemu::ids().thread_idx)
#define blockIdx (::cuemu::ids().block_idx)
#define blockDim (::cuemu::ids().block_dim)
#define gridDim (::cuemu::ids().grid_dim)
constexpr int warpSize = 32;

inline void __syncthreads(const std::source_location& site = std::source_location::current()) {
  ::cuemu::syncthreads(site);
}

template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "__shfl_xor_sync: at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  bits = ::cuemu::shfl_xor_bits(mask, bits, lane_mask, width);
  T out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// Blocks run one at a time on one CPU thread, so a read-modify-write is
// atomic as it stands.
template <typename T>
T atomicAdd(T* address, T v) {
  static_assert(std::is_arithmetic_v<T>, "atomicAdd: arithmetic types only");
  const T old = *address;
  *address = old + v;
  return old;
}

// CUDA's integer atomicMax (the unsigned 64-bit form).
inline unsigned long long atomicMax(unsigned long long* address, unsigned long long v) {
  const unsigned long long old = *address;
  if (v > old) *address = v;
  return old;
}

inline long long __double_as_longlong(double d) { return std::bit_cast<long long>(d); }
inline double __longlong_as_double(long long i) { return std::bit_cast<double>(i); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline int __float_as_int(float f) { return static_cast<int>(__float_as_uint(f)); }
inline float __int_as_float(int i) { return __uint_as_float(static_cast<unsigned>(i)); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

// CUDA's global integer min and max (std:: ones in host code are untouched).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
