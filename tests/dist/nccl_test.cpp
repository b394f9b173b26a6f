// The NCCL communicator on one GPU: a one-rank communicator in this process
// (no MPI) and one under `mpirun -np 1` (the unique id through MPI_Bcast, the
// node-local rank through MPI) run allreduce, allgather and broadcast on
// device buffers; bad buffers and arguments are errors. Skipped without a
// CUDA device (CI, the build machines) or in builds without NCCL. Also the
// device choice of world_for_device(), which needs neither.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/check.h"
#include "dist/communicator.h"
#include "util/run_binary.h"

#if GPT_HAVE_NCCL
#include <cuda_runtime.h>

#include "dist/impl.h"
#endif

namespace fs = std::filesystem;

namespace gpt::dist {
namespace {

// Outside mpirun there is one rank: "cpu" gets world(), "cuda" the
// single-process communicator (no NCCL, no GPU needed).
TEST(WorldForDevice, OneRankNeedsNoNccl) {
  EXPECT_EQ(&world_for_device("cpu"), &world());
  Communicator& c = world_for_device("cuda");
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.name(), "single process");
}

// GPT_DIST_NCCL=1 asks for the NCCL communicator with one rank: without NCCL
// or a GPU that is a clear error; a value other than 0 or 1 is one too.
TEST(WorldForDevice, NcclForOneRankOnRequest) {
  ::setenv(kNcclOneRankEnv, "yes", 1);
  try {
    world_for_device("cuda");
    ADD_FAILURE() << "expected gpt::Error for GPT_DIST_NCCL=yes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GPT_DIST_NCCL=\"yes\""), std::string::npos) << e.what();
  }
  ::setenv(kNcclOneRankEnv, "1", 1);
  if (built_with_nccl() && cuda_available()) {
    EXPECT_EQ(world_for_device("cuda").name().rfind("NCCL ", 0), 0u) << world_for_device("cuda").name();
  } else {
    EXPECT_THROW(world_for_device("cuda"), Error);
  }
  EXPECT_EQ(&world_for_device("cpu"), &world());  // CPU tensors never go to NCCL
  ::unsetenv(kNcclOneRankEnv);
  EXPECT_EQ(world_for_device("cuda").name(), "single process");
}

#if GPT_HAVE_NCCL

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

void cuda_ok(cudaError_t e, const char* call) { ASSERT_EQ(e, cudaSuccess) << call << ": " << cudaGetErrorString(e); }

// n elements of device memory, freed on scope exit.
template <typename T>
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : n(n) { cuda_ok(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<T> read() const {
    std::vector<T> h(n);
    cuda_ok(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return h;
  }
  // Written asynchronously on a stream of its own and not waited for: the
  // collectives must wait for work issued before them on any stream.
  void write_async(const std::vector<T>& h, cudaStream_t s) {
    cuda_ok(cudaMemcpyAsync(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
  }
  T* p = nullptr;
  size_t n;
};

template <typename T>
std::vector<T> pattern(size_t n, double scale) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(scale * (static_cast<double>(i % 1000) - 499.5));
  return v;
}

// With one rank the sum over ranks, the gathered shards and root's data are
// this rank's own data, bit for bit.
void check_collectives(Communicator& c) {
  ASSERT_EQ(c.size(), 1);
  ASSERT_EQ(c.rank(), 0);
  cudaStream_t s;
  cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  const size_t n = (size_t{1} << 20) + 3;  // large enough for NCCL's real kernels, odd

  DeviceBuffer<float> f(n);
  const std::vector<float> f0 = pattern<float>(n, 0.25);
  f.write_async(f0, s);
  c.allreduce_sum(f.p, n);
  EXPECT_EQ(f.read(), f0);

  DeviceBuffer<double> d(n);
  const std::vector<double> d0 = pattern<double>(n, 1e-3);
  d.write_async(d0, s);
  c.allreduce_sum(d.p, n);
  EXPECT_EQ(d.read(), d0);

  // Overlapped reduction: ordered behind work on the backend's stream (the
  // legacy default stream), waited for by finish_allreduces().
  const std::vector<float> o0 = pattern<float>(n, 0.5);
  f.write_async(o0, cudaStreamLegacy);
  c.start_allreduce_sum(f.p, {{0, n / 3}, {n / 3, 0}, {n / 3, n - n / 3}});
  c.finish_allreduces();
  EXPECT_EQ(f.read(), o0);
  c.finish_allreduces();  // nothing pending: returns at once

  const std::vector<float> g0 = pattern<float>(n, -2.0);
  f.write_async(g0, s);
  c.allgather(f.p, shard_counts(n, 1));
  EXPECT_EQ(f.read(), g0);
  d.write_async(d0, s);
  c.allgather(d.p, shard_counts(n, 1));
  EXPECT_EQ(d.read(), d0);

  f.write_async(f0, s);
  c.broadcast(f.p, n, 0);
  EXPECT_EQ(f.read(), f0);

  // Empty tensors are no-ops, the host collectives and barrier go through the host.
  c.allreduce_sum(f.p, 0);
  double h[2] = {0.5, -3.0};
  c.allreduce_sum_host(h, 2);
  EXPECT_EQ(h[0], 0.5);
  EXPECT_EQ(h[1], -3.0);
  c.barrier();

  // Bad arguments: host memory, a root or counts for other rank counts.
  std::vector<float> host(16, 1.0f);
  EXPECT_THROW(c.allreduce_sum(host.data(), host.size()), Error);
  EXPECT_THROW(c.start_allreduce_sum(host.data(), {{0, host.size()}}), Error);
  EXPECT_THROW(c.broadcast(f.p, n, 1), Error);
  EXPECT_THROW(c.allgather(f.p, shard_counts(n, 2)), Error);
  // The errors left the communicator usable.
  f.write_async(f0, s);
  c.allreduce_sum(f.p, n);
  EXPECT_EQ(f.read(), f0);
  cudaStreamDestroy(s);
}

// Where there is no GPU (this is what runs on CI), setting up says so.
TEST(Nccl, NoDeviceIsAClearError) {
  if (have_device()) GTEST_SKIP() << "a CUDA device is present";
  try {
    make_nccl_communicator(single_process());
    FAIL() << "expected gpt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a CUDA device, and there is none"), std::string::npos) << e.what();
  }
}

TEST(Nccl, OneRankCollectivesOnDeviceBuffers) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<Communicator> c = make_nccl_communicator(single_process());
  EXPECT_EQ(c->name().rfind("NCCL ", 0), 0u) << c->name();
  check_collectives(*c);
}

constexpr const char* kChildEnv = "GPT_NCCL_TEST_CHILD";

// Runs NcclChild.UnderMpirun in a copy of this test binary under mpirun.
TEST(Nccl, OneRankUnderMpirun) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  if (!built_with_mpi()) GTEST_SKIP() << "this build has no MPI (NCCL for one rank only)";
  const std::string mpirun = test::find_in_path("mpirun");
  if (mpirun.empty()) GTEST_SKIP() << "mpirun not found in PATH (install openmpi-bin: scripts/setup.sh)";
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  // mpirun hands the child a terminal, so gtest would colour "[  PASSED  ]".
  const test::Result r = test::run_command(std::string(kChildEnv) + "=1 " + mpirun + " --bind-to none -x " + kChildEnv +
                                           " -np 1 " + self + " --gtest_color=no --gtest_filter=NcclChild.UnderMpirun");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("[  PASSED  ] 1 test"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("SKIPPED"), std::string::npos) << r.output;
}

TEST(NcclChild, UnderMpirun) {
  if (!std::getenv(kChildEnv)) GTEST_SKIP() << "runs under mpirun, started by Nccl.OneRankUnderMpirun";
  ASSERT_TRUE(launched_by_mpi());
  Session session;  // MPI_Init
  std::unique_ptr<Communicator> c = make_nccl_communicator(world());
  EXPECT_NE(c->name().find("over MPI"), std::string::npos) << c->name();
  check_collectives(*c);
  c.reset();  // before MPI_Finalize
}

#else

TEST(Nccl, OneRankCollectivesOnDeviceBuffers) { GTEST_SKIP() << "this build has no NCCL (needs CUDA and NCCL)"; }

#endif  // GPT_HAVE_NCCL

}  // namespace
}  // namespace gpt::dist
