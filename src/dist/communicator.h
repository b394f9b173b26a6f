// Communication between the processes of a data-parallel run. One interface,
// three implementations: a single process (every collective is a no-op),
// MPI (CPU tensors; src/dist/mpi.cpp, compiled when CMake finds MPI) and
// NCCL (GPU tensors, the NCCL unique id exchanged through MPI;
// src/dist/nccl.cpp, compiled when CMake finds CUDA and NCCL; several ranks
// also need MPI). The process-wide communicator comes from world(), or world_for_device() for the
// run's device; a Session in main() brings MPI up and down.
//
// Tensor collectives take backend memory (host memory for the CPU backend,
// device memory for CUDA/NCCL), like the ops of Backend<T>; the *_host
// collectives take host memory whatever the backend. Every collective must be
// called by every rank in the same order.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace gpt::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "single process", "MPI (Open MPI v4.1.4)", ...
  virtual std::string name() const = 0;

  // ---- tensors (backend memory) ----
  // data[i] = sum over ranks of data[i], on every rank.
  virtual void allreduce_sum(float* data, size_t n) = 0;
  virtual void allreduce_sum(double* data, size_t n) = 0;
  // In place: buf holds sum(counts) elements; rank r contributes the
  // counts[r] elements at offset counts[0] + ... + counts[r-1], and every rank
  // ends up with all of them.
  virtual void allgather(float* buf, const std::vector<size_t>& counts) = 0;
  virtual void allgather(double* buf, const std::vector<size_t>& counts) = 0;
  // Every rank's data becomes root's.
  virtual void broadcast(float* data, size_t n, int root) = 0;

  // ---- gradient reduction overlapped with the backward pass ----
  // A part of a tensor: (offset, count) elements.
  using Range = std::pair<size_t, size_t>;
  // Starts data[range] = sum over ranks of data[range] for every range and
  // may return before it is done: MPI starts non-blocking reductions; NCCL
  // enqueues them on its own stream behind the work already issued to the
  // backend's stream, so they run while the backend computes what comes
  // next. Until finish_allreduces() returns, the caller must not touch those
  // ranges (the backend must not write them). Every rank starts the same
  // ranges in the same order. The default (single process) reduces at once.
  virtual void start_allreduce_sum(float* data, const std::vector<Range>& ranges) {
    for (const auto& [offset, count] : ranges) allreduce_sum(data + offset, count);
  }
  // Waits for every reduction started (within the collective time limit).
  virtual void finish_allreduces() {}

  // ---- host scalars (flags, losses) ----
  virtual void allreduce_sum_host(double* data, size_t n) = 0;

  // Waits for every rank, without the collective time limit: for the ranks
  // that wait while rank 0 evaluates or writes a checkpoint.
  virtual void barrier() = 0;
  // Ends every rank of the run with this exit status (MPI_Abort). Never returns.
  [[noreturn]] virtual void abort(int status) = 0;
};

// The contiguous part [begin, end) of n elements that rank `rank` of `size`
// owns when a flat buffer is sharded (ZeRO-1): sizes differ by at most one.
struct Shard {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};
Shard shard_of(size_t n, int rank, int size);
// Sizes of the shards of all ranks, in rank order (the counts of allgather).
std::vector<size_t> shard_counts(size_t n, int size);

// The communicator of this process: MPI when the process was launched by an
// MPI launcher (mpirun, srun) and this build has MPI, else the single-process
// one. Valid while a Session lives (the single-process one always).
Communicator& world();

// The communicator for tensors on `device` (run.device): world() for "cpu"
// (and any device other than "cuda"); for "cuda" the single-process one when
// there is one rank (unless GPT_DIST_NCCL=1), else the NCCL communicator over world(), made on the
// first call (a collective: every rank must call it), which also makes the
// rank's GPU (node-local rank modulo the visible devices) the current CUDA
// device, so call it before the CUDA backend allocates. "cuda" with several
// ranks in a build without NCCL: gpt::Error. Valid while the Session lives.
Communicator& world_for_device(const std::string& device);

// GPT_DIST_NCCL=1: world_for_device("cuda") gives the NCCL communicator even
// with one rank, and training takes the data-parallel path through it (the
// overlapped reduction included): a single GPU can check the NCCL path.
constexpr const char* kNcclOneRankEnv = "GPT_DIST_NCCL";
bool nccl_for_one_rank();

// True when an MPI launcher started this process (OMPI_COMM_WORLD_SIZE,
// PMI_SIZE or PMIX_RANK in the environment).
bool launched_by_mpi();
// Whether this build has MPI support (GPT_HAVE_MPI).
bool built_with_mpi();
// Whether this build has the NCCL communicator (GPT_HAVE_NCCL: CUDA and NCCL
// were found; without MPI as well it serves one rank only).
bool built_with_nccl();

// Initialises MPI for the lifetime of main() when launched by an MPI launcher,
// and finalises it on destruction. Launched by mpirun into a build without
// MPI, with more than one rank, it throws gpt::Error: N independent copies of
// a run would overwrite each other's files. Ranks other than 0 log warnings
// and errors only.
class Session {
 public:
  Session();
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

// main()'s error path: prints "error: MESSAGE" to stderr (with more than one
// rank prefixed by "rank R: "), then, with more than one rank, ends every rank
// with status 1 (the others may be waiting in a collective); with one rank it
// returns 1.
int report_fatal_error(const char* message);

// Environment variable holding the collective time limit in seconds (MPI, NCCL):
// a rank that waits longer than this in one collective (another rank died or
// hangs) exits with an error naming the collective. 0 disables the limit.
constexpr const char* kTimeoutEnv = "GPT_DIST_TIMEOUT";
constexpr double kDefaultTimeoutSeconds = 600;

}  // namespace gpt::dist
