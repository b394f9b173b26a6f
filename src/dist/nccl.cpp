// The NCCL communicator: GPU tensors (device pointers), one GPU per rank,
// NCCL collectives on a dedicated CUDA stream. The rank, the number of ranks,
// the host collectives and barrier() come from the host communicator (MPI);
// the NCCL unique id goes from rank 0 to the others with MPI_Bcast. Compiled
// when CMake found CUDA and NCCL (GPT_HAVE_NCCL); a build without MPI
// (GPT_HAVE_MPI) has it for one rank only, which is how scripts/gpu_check.sh
// tests it on a machine without MPI.
//
// Every collective waits for the device to finish the work issued before it,
// runs on this communicator's stream and waits for its own completion before
// returning, so callers see the result and need no stream of their own.
// Except the overlapped gradient reduction: start_allreduce_sum() records an
// event on the backend's stream (the legacy default stream), makes this
// communicator's stream wait for it and enqueues the reductions (one NCCL
// group) without waiting on the host, so they run beside the backward pass
// of the layers below; finish_allreduces() waits for all of them.
//
// Time limit: the communicator is non-blocking (ncclConfig_t::blocking = 0)
// and this thread polls the stream and ncclCommGetAsyncError instead of
// blocking in cudaStreamSynchronize, so a collective that waits longer than
// GPT_DIST_TIMEOUT seconds for the other ranks (one died or hangs) is aborted
// (ncclCommAbort ends its kernels) and becomes a gpt::Error naming it; main()
// then ends every rank. NCCL's own errors (a peer's connection lost) end the
// same way as soon as NCCL reports them.
#if GPT_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#if GPT_HAVE_MPI
#include <mpi.h>
#endif

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/check.h"
#include "dist/impl.h"

namespace gpt::dist {
namespace {

// A deadline `seconds` from now; 0 never passes.
class Deadline {
 public:
  explicit Deadline(double seconds) : seconds_(seconds), start_(std::chrono::steady_clock::now()) {}
  double waited() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  bool passed() const { return seconds_ > 0 && waited() >= seconds_; }
  // Yields for the first millisecond (short collectives), then sleeps 100 us
  // between polls: gradient allreduces take milliseconds, and the polling
  // thread should not take a core from the data loader.
  void pause() const {
    if (waited() < 1e-3)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }

 private:
  double seconds_;
  std::chrono::steady_clock::time_point start_;
};

template <typename T>
ncclDataType_t nccl_type();
template <>
ncclDataType_t nccl_type<float>() {
  return ncclFloat;
}
template <>
ncclDataType_t nccl_type<double>() {
  return ncclDouble;
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(Communicator& host)
      : host_(host), rank_(host.rank()), size_(host.size()), timeout_s_(collective_timeout_seconds()) {
    int mpi_up = 0;
#if GPT_HAVE_MPI
    MPI_Initialized(&mpi_up);
#endif
    int local_rank = 0, local_size = 1;
    if (mpi_up) {
#if GPT_HAVE_MPI
      // The ranks sharing this node, whatever the launcher (mpirun, srun).
      MPI_Comm node;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
      MPI_Comm_rank(node, &local_rank);
      MPI_Comm_size(node, &local_size);
      MPI_Comm_free(&node);
#endif
    } else {
      GPT_CHECK(size_ == 1, "the NCCL communicator for ", size_, " ranks needs MPI (for the NCCL unique id)");
    }

    int devices = 0;
    const cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0)
      fail("rank ", rank_, " of ", size_, ": the NCCL communicator needs a CUDA device, and there is none (",
           e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", ")");
    // With a launcher that gives each rank its own GPU (CUDA_VISIBLE_DEVICES
    // per rank) every rank sees one device and takes device 0.
    device_ = local_rank % devices;
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");

    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", "setting up");
#if GPT_HAVE_MPI
    if (mpi_up) MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, MPI_COMM_WORLD);
#endif

    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    // Two ranks on one GPU make NCCL fail ("Duplicate GPU detected"), at once
    // or asynchronously: say why.
    const std::string hint =
        local_size > devices
            ? " (" + std::to_string(local_size) + " ranks run on this node and this rank sees " +
                  std::to_string(devices) +
                  " CUDA devices: NCCL needs a distinct GPU per rank; launch at most that many ranks per node)"
            : "";
    try {
      wait_comm(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config), "ncclCommInitRankConfig",
                "setting up the communicator");
    } catch (const Error& err) {
      cudaStreamDestroy(stream_);
      fail(err.what(), hint);
    }

    int version = 0;
    ncclGetVersion(&version);
    name_ = "NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
            std::to_string(version % 100) + " (GPU " + std::to_string(device_) + (mpi_up ? ", over MPI)" : ")");
    spdlog::debug("rank {} of {}: {}, node-local rank {} of {}", rank_, size_, name_, local_rank, local_size);
  }

  ~NcclCommunicator() override {
    if (comm_) {
      try {
        // Flush and let every rank quiesce, within the time limit.
        wait_comm(ncclCommFinalize(comm_), "ncclCommFinalize", "closing the communicator");
        ncclCommDestroy(comm_);
      } catch (const std::exception& e) {
        spdlog::warn("{}", e.what());  // wait_comm aborted the communicator
        if (comm_) ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
    if (ready_) cudaEventDestroy(ready_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }

  void allreduce_sum(float* data, size_t n) override { allreduce(data, n, "allreduce (gradients)"); }
  void allreduce_sum(double* data, size_t n) override { allreduce(data, n, "allreduce"); }
  void allgather(float* buf, const std::vector<size_t>& counts) override { gather(buf, counts); }
  void allgather(double* buf, const std::vector<size_t>& counts) override { gather(buf, counts); }
  void broadcast(float* data, size_t n, int root) override {
    GPT_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " of ", size_, " ranks");
    if (n == 0) return;
    const char* what = "broadcast";
    start(data, what);
    enqueued(ncclBroadcast(data, data, n, ncclFloat, root, comm_, stream_), "ncclBroadcast", what);
    finish(what);
  }

  void start_allreduce_sum(float* data, const std::vector<Range>& ranges) override {
    if (ranges.empty()) return;
    check_buffer(data, kOverlapped);
    if (!ready_) check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    // The gradients of these ranges are written by work already issued to
    // the backend's stream: NCCL's stream waits for it on the device.
    check_cuda(cudaEventRecord(ready_, cudaStreamLegacy), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
    check_nccl(ncclGroupStart(), "ncclGroupStart", kOverlapped);
    for (const auto& [offset, count] : ranges) {
      if (count == 0) continue;
      const ncclResult_t e = ncclAllReduce(data + offset, data + offset, count, ncclFloat, ncclSum, comm_, stream_);
      if (e != ncclSuccess && e != ncclInProgress) {
        ncclGroupEnd();
        abort_and_fail(e, "ncclAllReduce", kOverlapped);
      }
    }
    enqueued(ncclGroupEnd(), "ncclGroupEnd", kOverlapped);
    started_ = true;
  }
  void finish_allreduces() override {
    if (!started_) return;
    started_ = false;
    finish(kOverlapped);
  }

  void allreduce_sum_host(double* data, size_t n) override { host_.allreduce_sum_host(data, n); }
  void barrier() override { host_.barrier(); }
  [[noreturn]] void abort(int status) override {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    host_.abort(status);
    std::_Exit(status);  // host_.abort does not return; this satisfies [[noreturn]]
  }

 private:
  template <typename T>
  void allreduce(T* data, size_t n, const char* what) {
    if (n == 0) return;
    start(data, what);
    enqueued(ncclAllReduce(data, data, n, nccl_type<T>(), ncclSum, comm_, stream_), "ncclAllReduce", what);
    finish(what);
  }

  template <typename T>
  void gather(T* buf, const std::vector<size_t>& counts) {
    GPT_CHECK(counts.size() == static_cast<size_t>(size_), "allgather: ", counts.size(), " counts for ", size_,
              " ranks");
    size_t total = 0, offset = 0;
    bool equal = true;
    for (size_t r = 0; r < counts.size(); ++r) {
      if (static_cast<int>(r) < rank_) offset += counts[r];
      total += counts[r];
      equal = equal && counts[r] == counts[0];
    }
    if (total == 0) return;
    const char* what = "allgather (parameters)";
    start(buf, what);
    if (equal) {
      // In place: rank r's part already sits at buf + r * count.
      enqueued(ncclAllGather(buf + offset, buf, counts[0], nccl_type<T>(), comm_, stream_), "ncclAllGather", what);
    } else {
      // Uneven shards (ZeRO-1 sizes differ by one): ncclAllGather needs equal
      // counts, so every rank broadcasts its part in place, fused in a group.
      check_nccl(ncclGroupStart(), "ncclGroupStart", what);
      size_t o = 0;
      for (int r = 0; r < size_; ++r) {
        if (counts[r] > 0) {
          const ncclResult_t e = ncclBroadcast(buf + o, buf + o, counts[r], nccl_type<T>(), r, comm_, stream_);
          if (e != ncclSuccess && e != ncclInProgress) {
            ncclGroupEnd();
            abort_and_fail(e, "ncclBroadcast", what);
          }
        }
        o += counts[r];
      }
      enqueued(ncclGroupEnd(), "ncclGroupEnd", what);
    }
    finish(what);
  }

  // Before a collective on `data`: the communicator is usable, `data` is
  // memory of this rank's GPU, and the work issued before (the backward pass
  // on whatever stream the backend uses) has finished.
  void start(const void* data, const char* what) {
    check_buffer(data, what);
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (before the collective)");
  }

  // The communicator is usable and `data` is memory of this rank's GPU.
  void check_buffer(const void* data, const char* what) {
    GPT_CHECK(comm_, "NCCL ", what, " on rank ", rank_, ": the communicator was aborted by an earlier error");
    cudaPointerAttributes attr{};
    check_cuda(cudaPointerGetAttributes(&attr, data), "cudaPointerGetAttributes");
    GPT_CHECK(attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged, "NCCL ", what,
              ": the buffer is not CUDA device memory; the NCCL communicator takes tensors of the CUDA backend "
              "(run.device \"cuda\"), host memory goes to the *_host collectives");
    GPT_CHECK(attr.type == cudaMemoryTypeManaged || attr.device == device_, "NCCL ", what, ": the buffer is on GPU ",
              attr.device, " but rank ", rank_, " communicates from GPU ", device_);
  }

  // After an NCCL call that enqueues work: in non-blocking mode it may still
  // be in progress.
  void enqueued(ncclResult_t r, const char* call, const char* what) { wait_comm(r, call, what); }

  // Waits for the collective's kernels on the stream, watching for NCCL's
  // asynchronous errors and the time limit.
  void finish(const char* what) {
    const Deadline d(timeout_s_);
    for (;; d.pause()) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) check_cuda(e, "cudaStreamQuery");
      ncclResult_t state = ncclSuccess;
      check_nccl(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", what);
      if (state != ncclSuccess && state != ncclInProgress) abort_and_fail(state, "(asynchronous error)", what);
      if (d.passed()) timed_out(what, d.waited());
    }
  }

  // Returns when the communicator's pending operation (non-blocking mode) is
  // done; r is the return value of the call that started it.
  void wait_comm(ncclResult_t r, const char* call, const char* what) {
    if (r != ncclSuccess && r != ncclInProgress) abort_and_fail(r, call, what);
    const Deadline d(timeout_s_);
    for (;; d.pause()) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
      if (q != ncclSuccess) abort_and_fail(q, "ncclCommGetAsyncError", what);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) abort_and_fail(state, call, what);
      if (d.passed()) timed_out(what, d.waited());
    }
  }

  [[noreturn]] void timed_out(const char* what, double waited) {
    abort_comm();
    fail("rank ", rank_, " of ", size_, ": waited ", static_cast<long>(waited), " s in NCCL ", what,
         " for the other ranks; another rank died or hangs (the limit is ", kTimeoutEnv, "=", timeout_s_,
         " seconds; 0 disables it)");
  }

  // An NCCL error leaves the communicator unusable: abort it (its kernels
  // may wait for peers forever) and report the call.
  [[noreturn]] void abort_and_fail(ncclResult_t r, const char* call, const char* what) {
    const char* l = ncclGetLastError(comm_);  // comm may be null
    const std::string last = l ? l : "";
    abort_comm();
    fail_nccl(r, call, what, last);
  }

  [[noreturn]] void fail_nccl(ncclResult_t r, const char* call, const char* what, const std::string& last = "") {
    fail("rank ", rank_, " of ", size_, ": NCCL ", call, " (", what, ") failed: ", ncclGetErrorString(r),
         last.empty() ? "" : " (", last, last.empty() ? "" : ")");
  }

  void check_nccl(ncclResult_t r, const char* call, const char* what) {
    if (r != ncclSuccess) fail_nccl(r, call, what);
  }

  void check_cuda(cudaError_t e, const char* call) {
    if (e != cudaSuccess)
      fail("rank ", rank_, " of ", size_, ": CUDA ", call, " failed (NCCL communicator, GPU ", device_,
           "): ", cudaGetErrorString(e));
  }

  void abort_comm() {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  Communicator& host_;
  int rank_, size_;
  double timeout_s_;
  int device_ = 0;
  std::string name_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // start_allreduce_sum: the backend's work so far
  bool started_ = false;         // reductions enqueued since the last finish_allreduces
  static constexpr const char* kOverlapped = "allreduce (gradients, overlapped with the backward pass)";
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host) {
  return std::make_unique<NcclCommunicator>(host);
}

}  // namespace gpt::dist
#endif  // GPT_HAVE_NCCL
