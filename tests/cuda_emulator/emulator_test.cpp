// The CUDA emulator itself (tests/cuda_emulator/): the CUDA parity tests
// run on it in CI, so it must run kernels as CUDA defines them and must
// expose the faults a GPU would have. Each test states one of those
// promises. Faults that end the process (a segfault) or poison it (a failed
// launch is sticky, as on a GPU) run in a death-test child.
// Compiled only in a build configured with -DGPT_CUDA_EMULATOR=ON.
#ifdef GPT_CUDA_EMULATOR
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#if GPT_HAVE_NCCL
#include <nccl.h>
#endif

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_emulator/emulator.h"
#include "kernels/bf16_round.h"
#include "kernels/cuda/cuda_syntax.h"
#include "kernels/cuda/mma.cuh"

namespace gpt {
namespace {

// ---- kernels under test ------------------------------------------------------------------

__global__ void ids_kernel(unsigned* out) {
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  out[bid * blockDim.x * blockDim.y * blockDim.z + tid] = bid * 1000 + tid;
}

// Each thread reads its right neighbour's element of a shared array.
template <bool kBarrier>
__global__ void rotate_kernel(float* out) {
  GPT_SHARED(float, s, [64]);
  const unsigned t = threadIdx.x;
  s[t] = float(t) + 100.f * blockIdx.x;
  if (kBarrier) __syncthreads();
  out[blockIdx.x * 64 + t] = s[(t + 1) % 64];
}

__global__ void warp_sum_kernel(const float* in, float* out) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = in[i];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[i] = v;
}

// Lane 5 returns; lane 4 then reads it in a shuffle.
__global__ void absent_lane_kernel(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

// Half a warp waits at the block barrier, the other half at a shuffle.
__global__ void divergent_kernel(float* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  }
}

__global__ void write_at_kernel(float* p, size_t i) { p[i] = 1.0f; }

__global__ void too_much_shared_kernel(float* out) {
  GPT_SHARED(float, a, [8192]);
  GPT_SHARED(float, b, [8192]);  // 64 KiB in all
  a[threadIdx.x] = b[threadIdx.x] = 0.0f;
  out[threadIdx.x] = a[threadIdx.x] + b[threadIdx.x];
}

__global__ void atomic_kernel(float* sum) { atomicAdd(sum, 1.0f); }
// A race between blocks: every block's thread 0 stores its index in one
// place (the last block to run wins), and reads a flag block 0 sets.
__global__ void racing_blocks_kernel(unsigned* last, unsigned* flag, unsigned* seen) {
  if (threadIdx.x != 0) return;
  *last = blockIdx.x;
  if (blockIdx.x == 0) *flag = 1;
  if (blockIdx.x == gridDim.x - 1) *seen = *flag;
}

// Each block parks its index in one global slot, meant as the block's own
// scratch but shared by all (the bug), and reads it back after a barrier.
__global__ void shared_scratch_kernel(unsigned* scratch, unsigned* same) {
  if (threadIdx.x == 0) *scratch = blockIdx.x;
  __syncthreads();
  if (threadIdx.x == 0) same[blockIdx.x] = *scratch == blockIdx.x ? 1u : 0u;
}

// Thread 0 writes a value all threads read, without a barrier between.
__global__ void broadcast_kernel(float* out) {
  GPT_SHARED(float, v, [1]);
  if (threadIdx.x == 0) v[0] = 7.0f;
  out[blockIdx.x * blockDim.x + threadIdx.x] = v[0];
}

// Two branches, each with its own barrier.
__global__ void two_barriers_kernel(float* out) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0f;
}

__global__ void fill_kernel(float* out, float v, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = v;
}
__global__ void copy_kernel(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i];
}

// Tensor-core instructions (kernels/cuda/mma.cuh) used wrongly.
namespace mma = gpt::cuda::mma;
// A kernel declared for at most 64 threads per block.
__global__ void __launch_bounds__(64) bounded_kernel(float* out) {
  GPT_BLOCK_BOUND(64);
  if (threadIdx.x == 0) out[0] = 1.0f;
}

// mode 0: lane 31 has returned; 1: half the warp at an mma, half at a
// shuffle; 2: a block of 16 threads (no full warp).
__global__ void mma_misuse_kernel(float* out, int mode) {
  if (mode == 0 && threadIdx.x == 31) return;
  mma::FragA a{};
  mma::FragB b{};
  mma::FragC c{}, d{};
  if (mode == 1 && threadIdx.x >= 16) {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
    return;
  }
  mma::mma_bf16(d, a, b, c);
  out[threadIdx.x] = d.x[0];
}
// mode 0: rows in global memory; 1: a row address 8 bytes off alignment.
__global__ void ldmatrix_misuse_kernel(float* out, int mode) {
  GPT_SHARED(float4, tile, [32]);
  for (int i = 0; i < 4; ++i) reinterpret_cast<float*>(&tile[0])[threadIdx.x * 4 + i] = 0.f;
  __syncthreads();
  const char* row = mode == 0 ? reinterpret_cast<const char*>(out) : reinterpret_cast<const char*>(&tile[0]) + 8;
  uint32_t r[1];
  mma::ldmatrix<1, false>(r, row + 16 * (threadIdx.x % 8));
  out[threadIdx.x] = float(r[0]);
}

// ---- helpers --------------------------------------------------------------------------------

template <typename T>
T* device_copy(const std::vector<T>& h) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, std::max<size_t>(h.size(), 1) * sizeof(T)), cudaSuccess);
  if (!h.empty()) {
    EXPECT_EQ(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  return d;
}
template <typename T>
std::vector<T> host_copy(const T* d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

class CudaEmulator : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// ---- the execution model -----------------------------------------------------------------

TEST_F(CudaEmulator, EveryThreadOfTheGridRunsOnceWithItsIndices) {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  const size_t n = 12 * 24;
  unsigned* d = device_copy(std::vector<unsigned>(n, 0xdeadbeefu));
  GPT_LAUNCH(grid, block, nullptr, ids_kernel)(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto h = host_copy(d, n);
  for (unsigned b = 0; b < 12; ++b)
    for (unsigned t = 0; t < 24; ++t) ASSERT_EQ(h[b * 24 + t], b * 1000 + t) << "block " << b << " thread " << t;
  cudaFree(d);
}

// The block order (GPT_EMU_BLOCK_ORDER; set_block_order in tests): every
// order runs each block once with its indices, and a kernel whose blocks
// race through global memory gives different results in different orders,
// which is how a suite run under two orders finds such races.
TEST_F(CudaEmulator, BlockOrderRunsEveryBlockOnceAndShowsRacesBetweenBlocks) {
  for (auto kind : {cuemu::BlockOrder::Forward, cuemu::BlockOrder::Reverse, cuemu::BlockOrder::Shuffle}) {
    cuemu::BlockOrder order;
    order.kind = kind;
    cuemu::set_block_order(&order);
    const dim3 grid(3, 2, 2), block(4, 3, 2);
    unsigned* d = device_copy(std::vector<unsigned>(12 * 24, 0xdeadbeefu));
    GPT_LAUNCH(grid, block, nullptr, ids_kernel)(d);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    const auto h = host_copy(d, 12 * 24);
    for (unsigned b = 0; b < 12; ++b)
      for (unsigned t = 0; t < 24; ++t) ASSERT_EQ(h[b * 24 + t], b * 1000 + t) << "order " << kind << " block " << b;
    cudaFree(d);
  }
  auto race = [](cuemu::BlockOrder::Kind kind) {
    cuemu::BlockOrder order;
    order.kind = kind;
    cuemu::set_block_order(&order);
    unsigned* d = device_copy(std::vector<unsigned>(3, 0u));
    GPT_LAUNCH(8, 32, nullptr, racing_blocks_kernel)(d, d + 1, d + 2);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    const auto h = host_copy(d, 3);
    cudaFree(d);
    return std::make_pair(h[0], h[2]);
  };
  const auto fwd = race(cuemu::BlockOrder::Forward), rev = race(cuemu::BlockOrder::Reverse);
  cuemu::set_block_order(nullptr);
  EXPECT_EQ(fwd, std::make_pair(7u, 1u)) << "forward: block 7 writes last and sees block 0's flag";
  EXPECT_EQ(rev, std::make_pair(0u, 0u)) << "reverse: block 0 writes last, block 7 runs before the flag is set";
}

// Blocks interleaved at their barriers (GPT_EMU_INTERLEAVE): a block sees
// what another block wrote to global memory between two of its barriers,
// which no order of whole blocks shows; every block still runs once.
TEST_F(CudaEmulator, InterleavedBlocksShowScratchSharedBetweenBlocks) {
  auto run = [](cuemu::BlockOrder::Kind kind, unsigned interleave) {
    cuemu::BlockOrder order;
    order.kind = kind;
    order.interleave = interleave;
    cuemu::set_block_order(&order);
    unsigned* d = device_copy(std::vector<unsigned>(1 + 6, 7u));
    GPT_LAUNCH(6, 64, nullptr, shared_scratch_kernel)(d, d + 1);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto h = host_copy(d + 1, 6);
    cudaFree(d);
    unsigned same = 0;
    for (unsigned x : h) same += x;
    return same;
  };
  EXPECT_EQ(run(cuemu::BlockOrder::Forward, 1), 6u);
  EXPECT_EQ(run(cuemu::BlockOrder::Reverse, 1), 6u);
  EXPECT_EQ(run(cuemu::BlockOrder::Shuffle, 1), 6u);
  // k in flight, each to its barrier in turn: every block of a group reads
  // the index of the group's last, so one block in k finds its own.
  EXPECT_EQ(run(cuemu::BlockOrder::Forward, 2), 3u);
  EXPECT_EQ(run(cuemu::BlockOrder::Forward, 3), 2u);
  EXPECT_EQ(run(cuemu::BlockOrder::Shuffle, 3), 2u);
  // Interleaved, the grid still runs every block once with its indices.
  cuemu::BlockOrder order;
  order.interleave = 4;
  cuemu::set_block_order(&order);
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  unsigned* d = device_copy(std::vector<unsigned>(12 * 24, 0xdeadbeefu));
  GPT_LAUNCH(grid, block, nullptr, ids_kernel)(d);
  const auto h = host_copy(d, 12 * 24);
  for (unsigned b = 0; b < 12; ++b)
    for (unsigned t = 0; t < 24; ++t) ASSERT_EQ(h[b * 24 + t], b * 1000 + t) << "block " << b;
  cudaFree(d);
  cuemu::set_block_order(nullptr);
}

TEST_F(CudaEmulator, BarrierMakesOtherThreadsWritesVisible) {
  float* d = device_copy(std::vector<float>(128, 0.0f));
  GPT_LAUNCH(2, 64, nullptr, rotate_kernel<true>)(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto h = host_copy(d, 128);
  for (unsigned b = 0; b < 2; ++b)
    for (unsigned t = 0; t < 64; ++t) EXPECT_EQ(h[b * 64 + t], float((t + 1) % 64) + 100.f * b) << b << "," << t;
  cudaFree(d);
}

// Without the barrier, threads read elements their neighbours have not
// written yet: fresh shared memory is 0xff bytes, NaN as float. (On a GPU
// this race may go unnoticed for years.)
TEST_F(CudaEmulator, MissingBarrierReadsUnwrittenSharedMemoryAsNan) {
  float* d = device_copy(std::vector<float>(128, 0.0f));
  GPT_LAUNCH(2, 64, nullptr, rotate_kernel<false>)(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto h = host_copy(d, 128);
  int nans = 0;
  for (float x : h) nans += std::isnan(x);
  EXPECT_GT(nans, 0) << "every thread saw its neighbour's write without a barrier";
  // The second block starts from fresh shared memory too, not the first's.
  int nans_second = 0;
  for (int t = 0; t < 64; ++t) nans_second += std::isnan(h[64 + t]);
  EXPECT_GT(nans_second, 0);
  cudaFree(d);
}

// Even blocks run thread 0 first and hide this race; odd blocks run the
// threads in reverse order and show it.
TEST_F(CudaEmulator, MissingBarrierAfterOneWriterShowsInSomeBlock) {
  float* d = device_copy(std::vector<float>(128, 0.0f));
  GPT_LAUNCH(2, 64, nullptr, broadcast_kernel)(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto h = host_copy(d, 128);
  int nans = 0;
  for (float x : h) nans += std::isnan(x);
  EXPECT_GT(nans, 0);
  cudaFree(d);
}

TEST_F(CudaEmulator, WarpShuffleSumsEachWarp) {
  std::vector<float> in(96);
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(i % 7) + (i >= 32 ? 100.f : 0.f);
  float* din = device_copy(in);
  float* dout = device_copy(std::vector<float>(96, 0.0f));
  GPT_LAUNCH(1, 96, nullptr, warp_sum_kernel)(din, dout);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto h = host_copy(dout, 96);
  for (int w = 0; w < 3; ++w) {
    float want = 0;
    for (int l = 0; l < 32; ++l) want += in[w * 32 + l];
    for (int l = 0; l < 32; ++l) EXPECT_EQ(h[w * 32 + l], want) << "warp " << w << " lane " << l;
  }
  cudaFree(din);
  cudaFree(dout);
}

TEST_F(CudaEmulator, AtomicsFromEveryThreadAddUp) {
  float* d = device_copy(std::vector<float>(1, 0.0f));
  GPT_LAUNCH(10, 128, nullptr, atomic_kernel)(d);
  EXPECT_EQ(host_copy(d, 1)[0], 1280.0f);
  cudaFree(d);
}

// ---- stream order ---------------------------------------------------------------------------

// Work waits in its stream's queue until a synchronisation needs it: a host
// destination in pinned memory holds NaN until then, the first query says
// "not ready", event times exist only once the stream got there. A copy to
// pageable memory returns when done, as CUDA's does, and a launch takes its
// arguments' values at the launch.
TEST_F(CudaEmulator, QueuedWorkRunsAtTheSynchronisationThatNeedsIt) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  float* d = device_copy(std::vector<float>(64, 0.0f));
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 64 * sizeof(float)), cudaSuccess);
  cudaEvent_t start = nullptr, stop = nullptr;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(start, s), cudaSuccess);
  GPT_LAUNCH(1, 64, s, fill_kernel)(d, 3.0f, 64);
  ASSERT_EQ(cudaMemcpyAsync(pinned, d, 64 * sizeof(float), cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(stop, s), cudaSuccess);
  EXPECT_TRUE(std::isnan(pinned[0]));
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  EXPECT_TRUE(std::isnan(pinned[63]));
  float ms = -1.0f;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotReady);
  ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
  EXPECT_EQ(pinned[0], 3.0f);
  EXPECT_EQ(pinned[63], 3.0f);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
  EXPECT_GE(ms, 0.0f);
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);

  GPT_LAUNCH(1, 64, s, fill_kernel)(d, 5.0f, 64);
  std::vector<float> h(64, 0.0f);
  ASSERT_EQ(cudaMemcpyAsync(h.data(), d, 64 * sizeof(float), cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(h[10], 5.0f);

  float v = 7.0f;
  GPT_LAUNCH(1, 64, s, fill_kernel)(d, v, 64);
  v = 8.0f;
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(host_copy(d, 64)[20], 7.0f);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFreeHost(pinned);
  cudaFree(d);
  cudaStreamDestroy(s);
}

// What orders work on two streams: an event one waits for, and the legacy
// default stream's implicit order with the blocking streams.
TEST_F(CudaEmulator, EventsAndTheLegacyStreamOrderWorkOnOtherStreams) {
  cudaStream_t a = nullptr, b = nullptr, c = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&c), cudaSuccess);  // blocking
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  float* x = device_copy(std::vector<float>(64, 0.0f));
  float* y = device_copy(std::vector<float>(64, 0.0f));
  GPT_LAUNCH(1, 64, a, fill_kernel)(x, 2.0f, 64);
  ASSERT_EQ(cudaEventRecord(e, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, e), cudaSuccess);
  GPT_LAUNCH(1, 64, b, copy_kernel)(x, y, 64);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);  // runs a's fill first
  EXPECT_EQ(host_copy(y, 64)[5], 2.0f);
  GPT_LAUNCH(1, 64, c, fill_kernel)(x, 4.0f, 64);
  EXPECT_EQ(host_copy(x, 64)[9], 4.0f);  // cudaMemcpy on the legacy stream waits for c
  GPT_LAUNCH(1, 64, nullptr, fill_kernel)(y, 6.0f, 64);
  GPT_LAUNCH(1, 64, c, copy_kernel)(y, x, 64);  // c waits for the legacy stream
  ASSERT_EQ(cudaStreamSynchronize(c), cudaSuccess);
  EXPECT_EQ(host_copy(x, 64)[63], 6.0f);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaEventDestroy(e);
  cudaFree(x);
  cudaFree(y);
  for (cudaStream_t s : {a, b, c}) cudaStreamDestroy(s);
}

// Exits 0 when `body` left a stream race that the emulator reported:
// cudaDeviceSynchronize then fails, as after a GPU fault.
template <typename Body>
void expect_stream_race(Body body, const char* message) {
  EXPECT_EXIT(
      {
        body();
        std::exit(cudaDeviceSynchronize() == cudaErrorLaunchFailure ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), message);
}

// Work on two streams that touches the same bytes with nothing ordering the
// two is reported when the second is queued; so is a buffer freed while
// another stream may still read it, and a buffer used after its stream-
// ordered free.
TEST_F(CudaEmulator, UnorderedWorkOnTwoStreamsIsARace) {
  auto streams = [](cudaStream_t& a, cudaStream_t& b) {
    if (cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) != cudaSuccess ||
        cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) != cudaSuccess)
      std::exit(2);
  };
  auto zeros = [] {
    float* p = nullptr;
    // cudaMemset queues on the legacy default stream, which orders nothing
    // with the non-blocking streams: the host waits for it.
    if (cudaMalloc(&p, 64 * sizeof(float)) != cudaSuccess || cudaMemset(p, 0, 64 * sizeof(float)) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
      std::exit(2);
    return p;
  };
  expect_stream_race(
      [&] {
        cudaStream_t a, b;
        streams(a, b);
        float *x = zeros(), *y = zeros();
        GPT_LAUNCH(1, 64, a, fill_kernel)(x, 2.0f, 64);
        GPT_LAUNCH(1, 64, b, copy_kernel)(x, y, 64);
      },
      "stream race: copy_kernel on non-blocking stream [0-9]+ reads the bytes at 0x[0-9a-f]+ that fill_kernel, "
      "queued before on non-blocking stream [0-9]+, writes");
  expect_stream_race(
      [&] {
        cudaStream_t a, b;
        streams(a, b);
        float* x = zeros();
        GPT_LAUNCH(1, 64, a, fill_kernel)(x, 2.0f, 64);
        std::vector<float> h(64);
        cudaMemcpy(h.data(), x, 64 * sizeof(float), cudaMemcpyDeviceToHost);
      },
      "cudaMemcpy on the legacy default stream reads .* fill_kernel, queued before on non-blocking stream");
  expect_stream_race(
      [&] {
        cudaStream_t a, b;
        streams(a, b);
        float *x = zeros(), *y = zeros();
        GPT_LAUNCH(1, 64, a, copy_kernel)(x, y, 64);
        cudaFreeAsync(x, b);
      },
      "cudaFreeAsync on non-blocking stream [0-9]+ writes .* that copy_kernel, queued before .*, reads");
  expect_stream_race(
      [&] {
        cudaStream_t a, b;
        streams(a, b);
        float* x = zeros();
        cudaFreeAsync(x, a);
        GPT_LAUNCH(1, 64, a, fill_kernel)(x, 1.0f, 64);
      },
      "fill_kernel on non-blocking stream [0-9]+ uses a device buffer of 256 bytes already given to cudaFreeAsync");
}

// ---- faults ---------------------------------------------------------------------------------

// A launch beyond CUDA's limits does not run; the error is not sticky.
TEST_F(CudaEmulator, LaunchConfigurationBeyondTheLimitsIsRefused) {
  float* d = device_copy(std::vector<float>(1, 0.0f));
  GPT_LAUNCH(1, 2048, nullptr, atomic_kernel)(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  GPT_LAUNCH(dim3(1, 70000), 32, nullptr, atomic_kernel)(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(host_copy(d, 1)[0], 0.0f);
  cudaFree(d);
}

// Exits 0 when a launch of `kernel` failed as a GPU fault does: the
// synchronisation that runs it reports cudaErrorLaunchFailure, and so does
// every later call.
template <typename Launch>
void expect_launch_failure(Launch launch, const char* message) {
  EXPECT_EXIT(
      {
        float* d = nullptr;
        if (cudaMalloc(&d, 64 * sizeof(float)) != cudaSuccess) std::exit(2);
        launch(d);
        const bool failed = cudaDeviceSynchronize() == cudaErrorLaunchFailure;
        const bool sticky =
            cudaGetLastError() == cudaErrorLaunchFailure && cudaMalloc(&d, 4) == cudaErrorLaunchFailure;
        std::exit(failed && sticky ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), message);
}

// A launch above the kernel's __launch_bounds__ (GPT_BLOCK_BOUND) fails, as
// on a GPU; at the bound, and in any block shape within it, it runs.
TEST_F(CudaEmulator, LaunchAboveTheKernelsDeclaredBoundFails) {
  float* d = device_copy(std::vector<float>(1, 0.0f));
  GPT_LAUNCH(1, 64, nullptr, bounded_kernel)(d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  GPT_LAUNCH(1, dim3(32, 2), nullptr, bounded_kernel)(d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(host_copy(d, 1)[0], 1.0f);
  cudaFree(d);
  expect_launch_failure([](float* x) { GPT_LAUNCH(1, 128, nullptr, bounded_kernel)(x); },
                        "bounded_kernel is launched with 128 threads per block, above its __launch_bounds__\\(64\\)");
  expect_launch_failure([](float* x) { GPT_LAUNCH(1, dim3(32, 4), nullptr, bounded_kernel)(x); },
                        "launched with 128 threads per block");
}

TEST_F(CudaEmulator, ShuffleWithALaneThatReturnedFails) {
  expect_launch_failure([](float* d) { GPT_LAUNCH(1, 32, nullptr, absent_lane_kernel)(d); }, "did not take part");
}

TEST_F(CudaEmulator, DivergentBarrierIsADeadlock) {
  expect_launch_failure([](float* d) { GPT_LAUNCH(1, 32, nullptr, divergent_kernel)
                                       (d); },
                        "deadlock.*16 threads wait at __syncthreads, 16 at a warp shuffle");
}

TEST_F(CudaEmulator, ThreadsAtDifferentBarriersFail) {
  expect_launch_failure([](float* d) { GPT_LAUNCH(1, 64, nullptr, two_barriers_kernel)
                                       (d); },
                        "threads wait at different __syncthreads: .*emulator_test.cpp");
}

TEST_F(CudaEmulator, HostPointerAsKernelArgumentFails) {
  expect_launch_failure(
      [](float*) {
        static float host[4];
        GPT_LAUNCH(1, 1, nullptr, write_at_kernel)(host, size_t(0));
      },
      "argument 0 .* is not device memory");
}

TEST_F(CudaEmulator, MoreThan48KiBOfSharedMemoryFails) {
  expect_launch_failure([](float* d) { GPT_LAUNCH(1, 32, nullptr, too_much_shared_kernel)
                                       (d); },
                        "65536 bytes of shared memory");
}

// mma.sync and ldmatrix are .aligned warp instructions: every lane of a
// full warp executes the same one, and ldmatrix reads shared memory only.
TEST_F(CudaEmulator, TensorCoreInstructionsNeedTheWholeWarp) {
  expect_launch_failure([](float* d) { GPT_LAUNCH(1, 32, nullptr, mma_misuse_kernel)(d, 0); },
                        "mma.sync.*lane 31 of the warp did not take part");
  expect_launch_failure([](float* d) { GPT_LAUNCH(1, 32, nullptr, mma_misuse_kernel)(d, 1); },
                        "lanes of one warp at different warp instructions");
  expect_launch_failure([](float* d) { GPT_LAUNCH(1, 16, nullptr, mma_misuse_kernel)(d, 2); },
                        "needs a full warp of 32 lanes");
}

TEST_F(CudaEmulator, LdmatrixReadsAlignedSharedMemoryOnly) {
  expect_launch_failure([](float* d) { GPT_LAUNCH(1, 32, nullptr, ldmatrix_misuse_kernel)(d, 0); },
                        "ldmatrix.*outside the block's shared memory");
  expect_launch_failure([](float* d) { GPT_LAUNCH(1, 32, nullptr, ldmatrix_misuse_kernel)(d, 1); },
                        "ldmatrix.*not 16-byte aligned");
}

TEST_F(CudaEmulator, KernelWritingPastTheEndOfABufferFaults) {
  float* d = device_copy(std::vector<float>(1000, 0.0f));
  GPT_LAUNCH(1, 1, nullptr, write_at_kernel)(d, size_t(999));  // the last element: fine
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_DEATH(
      {
        GPT_LAUNCH(1, 1, nullptr, write_at_kernel)(d, size_t(1100));
        cudaDeviceSynchronize();
      },
      "past the end of a device buffer of 4000 bytes");
  cudaFree(d);
}

// Within the 256-byte alignment after the end: no fault, but the bytes
// there must stay as they were.
TEST_F(CudaEmulator, KernelWritingJustPastTheEndFailsTheLaunch) {
  expect_launch_failure(
      [](float* d) {
        float* e = nullptr;
        if (cudaMalloc(&e, 1000 * sizeof(float)) != cudaSuccess) std::exit(2);
        GPT_LAUNCH(1, 1, nullptr, write_at_kernel)(e, size_t(1000));  // one past the end
        (void)d;
      },
      "wrote past the end of a device buffer of 4000 bytes");
}

TEST_F(CudaEmulator, HostCodeReadingDeviceMemoryFaults) {
  float* d = device_copy(std::vector<float>(16, 1.0f));
  EXPECT_DEATH(
      {
        volatile float x = d[3];
        (void)x;
      },
      "host code touched device memory");
  cudaFree(d);
}

TEST_F(CudaEmulator, CopiesCheckTheirDirection) {
  float* d = device_copy(std::vector<float>(4, 0.0f));
  std::vector<float> h(4, 1.0f);
  EXPECT_EQ(cudaMemcpy(h.data(), d, 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);  // backwards
  EXPECT_EQ(cudaMemcpy(d, h.data(), 32, cudaMemcpyHostToDevice), cudaErrorInvalidValue);  // past the end
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 16, cudaMemcpyHostToDevice), cudaSuccess);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, d + 2), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  ASSERT_EQ(cudaPointerGetAttributes(&attr, h.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeUnregistered);
  cudaFree(d);
}

// ---- cuBLASLt -----------------------------------------------------------------------------

struct Gemm {
  bool ta, tb;
  int m, n, k, lda, ldb, ldd;
};

// D = op(A)·op(B) + beta·D through the emulated cuBLASLt, column-major.
cublasStatus_t lt_matmul(const Gemm& g, cudaDataType_t ab, cublasComputeType_t compute, const void* A, const void* B,
                         float* D, float beta, uint32_t promise_align = 4) {
  cublasLtHandle_t h;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulPreference_t pref;
  EXPECT_EQ(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulDescCreate(&op, compute, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t oa = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob);
  cublasLtMatrixLayoutCreate(&la, ab, g.ta ? g.k : g.m, g.ta ? g.m : g.k, g.lda);
  cublasLtMatrixLayoutCreate(&lb, ab, g.tb ? g.n : g.k, g.tb ? g.k : g.n, g.ldb);
  cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, g.m, g.n, g.ldd);
  cublasLtMatmulPreferenceCreate(&pref);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(pref, attr, &promise_align, sizeof promise_align);
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &res, &found);
  if (st == CUBLAS_STATUS_SUCCESS) {
    const float alpha = 1.0f;
    st = cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &res.algo, nullptr, 0, nullptr);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(h);
  return st;
}

TEST_F(CudaEmulator, CublasLtTransposesAndLeadingDimensionsFollowTheColumnMajorContract) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f}) {
        const int m = 5, n = 3, k = 4;
        const Gemm g{ta, tb, m, n, k, (ta ? k : m) + 2, (tb ? n : k) + 1, m + 3};
        std::vector<float> A(size_t(g.lda) * (ta ? m : k)), B(size_t(g.ldb) * (tb ? k : n)), D(size_t(g.ldd) * n);
        for (float& x : A) x = u(rng);
        for (float& x : B) x = u(rng);
        for (float& x : D) x = beta == 0.0f ? NAN : u(rng);  // with beta 0, D's old values are not read
        std::vector<float> want = D;
        for (int j = 0; j < n; ++j)
          for (int i = 0; i < m; ++i) {
            double s = 0;
            for (int p = 0; p < k; ++p)
              s += double(ta ? A[p + size_t(i) * g.lda] : A[i + size_t(p) * g.lda]) *
                   (tb ? B[j + size_t(p) * g.ldb] : B[p + size_t(j) * g.ldb]);
            want[i + size_t(j) * g.ldd] = float(s + (beta == 0.0f ? 0.0 : beta * D[i + size_t(j) * g.ldd]));
          }
        float *dA = device_copy(A), *dB = device_copy(B), *dD = device_copy(D);
        ASSERT_EQ(lt_matmul(g, CUDA_R_32F, CUBLAS_COMPUTE_32F, dA, dB, dD, beta), CUBLAS_STATUS_SUCCESS);
        const auto got = host_copy(dD, D.size());
        for (int j = 0; j < n; ++j)
          for (int i = 0; i < g.ldd; ++i) {
            const size_t at = i + size_t(j) * g.ldd;
            if (i < m)
              EXPECT_NEAR(got[at], want[at], 1e-5) << "ta " << ta << " tb " << tb << " beta " << beta << " at " << at;
            else  // rows between m and ldd are not D's: untouched
              EXPECT_TRUE(std::memcmp(&got[at], &D[at], sizeof(float)) == 0) << "padding row written at " << at;
          }
        cudaFree(dA), cudaFree(dB), cudaFree(dD);
      }
}

TEST_F(CudaEmulator, CublasLtComputeTypesRoundTheOperands) {
  // 1 + 2^-12 is a float32 number, not a TF32 one (10 mantissa bits) nor a
  // bf16 one (7 bits); times 1, it survives only in strict float32.
  const float x = 1.0f + std::ldexp(1.0f, -12);
  const Gemm g{false, false, 1, 1, 1, 1, 1, 1};
  float *dA = device_copy(std::vector<float>{x}), *dB = device_copy(std::vector<float>{1.0f}),
        *dD = device_copy(std::vector<float>{0.0f});
  ASSERT_EQ(lt_matmul(g, CUDA_R_32F, CUBLAS_COMPUTE_32F, dA, dB, dD, 0.0f), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(host_copy(dD, 1)[0], x);
  ASSERT_EQ(lt_matmul(g, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, dA, dB, dD, 0.0f), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(host_copy(dD, 1)[0], 1.0f);
  // bf16 operands are taken as they are (widened exactly).
  const uint16_t a16 = round_to_bf16_bits(1.5f), b16 = round_to_bf16_bits(-2.25f);
  uint16_t *dA16 = device_copy(std::vector<uint16_t>{a16}), *dB16 = device_copy(std::vector<uint16_t>{b16});
  ASSERT_EQ(lt_matmul(g, CUDA_R_16BF, CUBLAS_COMPUTE_32F, dA16, dB16, dD, 0.0f), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(host_copy(dD, 1)[0], -3.375f);
  // bf16 with TF32 compute is not a combination cuBLASLt offers.
  EXPECT_EQ(lt_matmul(g, CUDA_R_16BF, CUBLAS_COMPUTE_32F_FAST_TF32, dA16, dB16, dD, 0.0f), CUBLAS_STATUS_NOT_SUPPORTED);
  cudaFree(dA), cudaFree(dB), cudaFree(dD), cudaFree(dA16), cudaFree(dB16);
}

TEST_F(CudaEmulator, CublasLtRefusesHostPointersAndBrokenAlignmentPromises) {
  const Gemm g{false, false, 4, 4, 4, 4, 4, 4};
  std::vector<float> host(16, 1.0f);
  float *dA = device_copy(host), *dB = device_copy(host), *dD = device_copy(host);
  EXPECT_EQ(lt_matmul(g, CUDA_R_32F, CUBLAS_COMPUTE_32F, host.data(), dB, dD, 0.0f), CUBLAS_STATUS_EXECUTION_FAILED);
  // cudaMalloc'd buffers are 256-byte aligned; one float in, they are not.
  float* dB_off = device_copy(std::vector<float>(17, 1.0f));
  EXPECT_EQ(lt_matmul(g, CUDA_R_32F, CUBLAS_COMPUTE_32F, dA, dB_off + 1, dD, 0.0f, 256),
            CUBLAS_STATUS_EXECUTION_FAILED);
  EXPECT_EQ(lt_matmul(g, CUDA_R_32F, CUBLAS_COMPUTE_32F, dA, dB_off + 1, dD, 0.0f, 4), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(host_copy(dD, 16)[0], 4.0f);
  cudaFree(dA), cudaFree(dB), cudaFree(dD), cudaFree(dB_off);
}

#if GPT_HAVE_NCCL
// ---- NCCL (one rank) -----------------------------------------------------------------------

TEST_F(CudaEmulator, NcclForOneRankChecksItsArgumentsAndAnswersAsNonBlocking) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 2, id, 0, nullptr), ncclInvalidUsage);  // one rank only
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInProgress);
  ncclResult_t state = ncclSuccess;
  ASSERT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  EXPECT_EQ(state, ncclInProgress);  // once, then done
  ASSERT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  EXPECT_EQ(state, ncclSuccess);
  float* d = device_copy(std::vector<float>{1, 2, 3, 4});
  float* e = device_copy(std::vector<float>(4, 0.0f));
  EXPECT_EQ(ncclAllReduce(d, e, 4, ncclFloat, ncclSum, comm, nullptr), ncclInProgress);
  EXPECT_EQ(host_copy(e, 4), (std::vector<float>{1, 2, 3, 4}));  // one rank: the sum is the rank's own
  std::vector<float> host(4);
  EXPECT_EQ(ncclAllReduce(host.data(), host.data(), 4, ncclFloat, ncclSum, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(d, d, 5, ncclFloat, ncclSum, comm, nullptr), ncclInvalidArgument);  // past the end
  EXPECT_EQ(ncclBroadcast(d, d, 4, ncclFloat, 1, comm, nullptr), ncclInvalidArgument);        // no rank 1
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("root 1"), std::string::npos) << ncclGetLastError(comm);
  // In a group the calls return ncclSuccess and ncclGroupEnd the group's progress.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(d, d, 2, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclInvalidUsage);  // not inside a group
  EXPECT_EQ(ncclGroupEnd(), ncclInProgress);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);  // no group open
  EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(d, d, 4, ncclFloat, ncclSum, comm, nullptr), ncclInvalidUsage);  // after the abort
  EXPECT_EQ(ncclCommAbort(nullptr), ncclSuccess);
  cudaFree(d);
  cudaFree(e);
}
#endif  // GPT_HAVE_NCCL

}  // namespace
}  // namespace gpt
#endif  // GPT_CUDA_EMULATOR
