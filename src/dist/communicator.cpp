// world() and world_for_device(), the Session that brings MPI up and down,
// sharding arithmetic, the collective time limit and main()'s fatal-error path.
#include "dist/communicator.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "core/check.h"
#include "dist/impl.h"

namespace gpt::dist {
namespace {

std::unique_ptr<Communicator> g_world;  // set while a Session lives under an MPI launcher
// NCCL over g_world, made by the first world_for_device("cuda") with several
// ranks; destroyed before g_world (before MPI_Finalize).
std::unique_ptr<Communicator> g_device_world;

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

}  // namespace

Shard shard_of(size_t n, int rank, int size) {
  GPT_CHECK(size >= 1 && rank >= 0 && rank < size, "shard_of: rank ", rank, " of ", size);
  const size_t base = n / size, extra = n % size, r = static_cast<size_t>(rank);
  Shard s;
  s.begin = r * base + (r < extra ? r : extra);
  s.end = s.begin + base + (r < extra ? 1 : 0);
  return s;
}

std::vector<size_t> shard_counts(size_t n, int size) {
  std::vector<size_t> counts(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) counts[r] = shard_of(n, r, size).size();
  return counts;
}

Communicator& world() { return g_world ? *g_world : single_process(); }

Communicator& world_for_device(const std::string& device) {
  if (device != "cuda") return world();
  Communicator& w = world();
  // One rank: nothing to communicate, and the single-process no-ops are right
  // for device memory too (MPI_Allreduce on device pointers is not), unless
  // GPT_DIST_NCCL=1 asks for the NCCL path anyway.
  if (w.size() == 1 && !nccl_for_one_rank()) return single_process();
#if GPT_HAVE_NCCL
  if (!g_device_world) g_device_world = make_nccl_communicator(w);
  return *g_device_world;
#else
  fail("run.device \"cuda\" with ", w.size(), " ranks needs NCCL (GPU collectives); this build has none",
       built_with_mpi() ? "" : " and no MPI",
       " (install NCCL (libnccl-dev) with the CUDA toolkit, reconfigure with CMake and rebuild; the configure log "
       "says \"gpt: NCCL ... found\"), or train these ranks with run.device \"cpu\"");
#endif
}

double collective_timeout_seconds() {
  const char* v = env(kTimeoutEnv);
  if (!v) return kDefaultTimeoutSeconds;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  GPT_CHECK(end != v && *end == '\0' && s >= 0, "environment variable ", kTimeoutEnv, "=\"", v,
            "\" must be a number of seconds >= 0 (0 disables the collective time limit)");
  return s;
}

bool nccl_for_one_rank() {
  const char* v = env(kNcclOneRankEnv);
  if (!v || std::string(v) == "0") return false;
  GPT_CHECK(std::string(v) == "1", "environment variable ", kNcclOneRankEnv, "=\"", v,
            "\": valid: 1 (run.device cuda goes through the NCCL communicator even with one rank) or 0");
  return true;
}

bool launched_by_mpi() { return env("OMPI_COMM_WORLD_SIZE") || env("PMI_SIZE") || env("PMIX_RANK"); }

bool built_with_mpi() {
#if GPT_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool built_with_nccl() {
#if GPT_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

Session::Session() {
  if (!launched_by_mpi()) return;
#if GPT_HAVE_MPI
  g_world = make_mpi_communicator();
  if (g_world->rank() != 0) spdlog::set_level(spdlog::level::warn);
#else
  const char* size = env("OMPI_COMM_WORLD_SIZE") ? env("OMPI_COMM_WORLD_SIZE") : env("PMI_SIZE");
  if (size && std::atoi(size) > 1)
    fail("this process was launched as one of ", size,
         " ranks by an MPI launcher, but this build of gpt has no MPI support (install libopenmpi-dev, "
         "reconfigure with CMake and rebuild), so the ranks would run as independent copies");
#endif
}

Session::~Session() {
  g_device_world.reset();
  g_world.reset();
}

int report_fatal_error(const char* message) {
  Communicator& comm = world();
  if (comm.size() == 1) {
    std::fprintf(stderr, "error: %s\n", message);
    return 1;
  }
  std::fprintf(stderr, "error: rank %d: %s\n", comm.rank(), message);
  std::fflush(stderr);
  comm.abort(1);
  return 1;  // not reached
}

}  // namespace gpt::dist
