// The two pieces of CUDA syntax the kernels write through macros, so that
// the same source builds under nvcc and, as C++, against the CPU emulator
// (-DGPT_CUDA_EMULATOR=ON, tests/cuda_emulator/device.h):
//
//   GPT_LAUNCH(grid, block, stream, kernel)(args...)
//       kernel<<<grid, block, 0, stream>>>(args...); the kernel comes last
//       so that its template arguments may hold commas.
//   GPT_BLOCK_BOUND(n);
//       the first statement of every kernel, n the same expression as its
//       __launch_bounds__(n): nothing under nvcc (the GPU itself refuses a
//       launch above the bound); under the emulator a launch with more than
//       n threads per block fails, so the parity tests check that the host
//       code launches within every kernel's declared bound.
//       KernelSources.EveryKernelDeclaresItsLaunchBound holds every kernel
//       to both.
//   GPT_SHARED(type, name, [n]...);
//       __shared__ type name[n]...; one array per declaration. The emulator
//       gives each block fresh shared memory filled with 0xff bytes (NaN as
//       float), so a read before any thread wrote the element (a missing
//       barrier) shows up as NaN, and it refuses more than 48 KiB a block.
#pragma once
#include <cuda_runtime.h>

#ifdef GPT_CUDA_EMULATOR
#define GPT_LAUNCH(grid, block, stream, ...) ::cuemu::launcher((grid), (block), (stream), #__VA_ARGS__, __VA_ARGS__)
#define GPT_BLOCK_BOUND(n) ::cuemu::block_bound(static_cast<unsigned long long>(n), __func__)
#define GPT_SHARED(type, name, dims)                          \
  static char name##_cuemu_key;                               \
  using name##_cuemu_type = type dims;                        \
  name##_cuemu_type& name = *static_cast<name##_cuemu_type*>( \
      ::cuemu::shared_memory(sizeof(name##_cuemu_type), alignof(name##_cuemu_type), &name##_cuemu_key))
#else
#define GPT_LAUNCH(grid, block, stream, ...) __VA_ARGS__<<<(grid), (block), 0, (stream)>>>
#define GPT_BLOCK_BOUND(n) ((void)0)
#define GPT_SHARED(type, name, dims) __shared__ type name dims
#endif
