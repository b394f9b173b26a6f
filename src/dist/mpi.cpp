// The MPI communicator: CPU tensors, MPI_COMM_WORLD, float32 gradients summed
// with MPI_Allreduce. Compiled only when CMake found MPI (GPT_HAVE_MPI).
//
// A watchdog thread bounds the time one rank waits in a collective
// (GPT_DIST_TIMEOUT seconds): when another rank died and the launcher did not
// end the job, or a rank hangs, the waiting ranks exit with an error naming
// the collective instead of waiting forever. Only the main thread calls MPI.
#if GPT_HAVE_MPI
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "dist/impl.h"

namespace gpt::dist {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// MPI counts are ints; larger tensors go in pieces of this many elements.
constexpr size_t kChunk = size_t{1} << 30;

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() : timeout_s_(collective_timeout_seconds()) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, static_cast<size_t>(len));
    name_ = "MPI (" + v.substr(0, v.find_first_of(",\n")) + ")";
    if (timeout_s_ > 0) watchdog_ = std::thread([this] { watch(); });
  }
  ~MpiCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }

  void allreduce_sum(float* data, size_t n) override { allreduce(data, n, "allreduce (gradients)"); }
  void allreduce_sum(double* data, size_t n) override { allreduce(data, n, "allreduce"); }
  void allgather(float* buf, const std::vector<size_t>& counts) override { gather(buf, counts); }
  void allgather(double* buf, const std::vector<size_t>& counts) override { gather(buf, counts); }
  void broadcast(float* data, size_t n, int root) override {
    Timed t(*this, "broadcast");
    for (size_t o = 0; o < n; o += kChunk)
      MPI_Bcast(data + o, static_cast<int>(std::min(kChunk, n - o)), MPI_FLOAT, root, MPI_COMM_WORLD);
  }
  // MPI_Iallreduce for each range. Open MPI moves non-blocking collectives
  // on inside MPI calls only, so each call also tests the earlier ones.
  void start_allreduce_sum(float* data, const std::vector<Range>& ranges) override {
    for (const auto& [offset, count] : ranges)
      for (size_t o = 0; o < count; o += kChunk) {
        MPI_Request r;
        MPI_Iallreduce(MPI_IN_PLACE, data + offset + o, static_cast<int>(std::min(kChunk, count - o)), MPI_FLOAT,
                       MPI_SUM, MPI_COMM_WORLD, &r);
        pending_.push_back(r);
      }
    int done = 0;
    MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE);
    if (done) pending_.clear();
  }
  void finish_allreduces() override {
    if (pending_.empty()) return;
    Timed t(*this, "allreduce (gradients, overlapped with the backward pass)");
    MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE);
    pending_.clear();
  }
  void allreduce_sum_host(double* data, size_t n) override { allreduce(data, n, "allreduce (loss and stop flag)"); }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  [[noreturn]] void abort(int status) override {
    MPI_Abort(MPI_COMM_WORLD, status);
    std::_Exit(status);  // MPI_Abort does not return; this satisfies [[noreturn]]
  }

 private:
  // Marks the calling thread as waiting in a collective for the watchdog.
  struct Timed {
    Timed(MpiCommunicator& c, const char* what) : c_(c) {
      c_.what_.store(what);
      c_.since_ns_.store(now_ns());
    }
    ~Timed() { c_.since_ns_.store(0); }
    MpiCommunicator& c_;
  };

  template <typename T>
  void allreduce(T* data, size_t n, const char* what) {
    Timed t(*this, what);
    for (size_t o = 0; o < n; o += kChunk)
      MPI_Allreduce(MPI_IN_PLACE, data + o, static_cast<int>(std::min(kChunk, n - o)), mpi_type<T>(), MPI_SUM,
                    MPI_COMM_WORLD);
  }

  template <typename T>
  void gather(T* buf, const std::vector<size_t>& counts) {
    GPT_CHECK(counts.size() == static_cast<size_t>(size_), "allgather: ", counts.size(), " counts for ", size_,
              " ranks");
    std::vector<int> c(counts.size()), displs(counts.size());
    size_t offset = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      GPT_CHECK(counts[r] <= INT_MAX && offset <= INT_MAX, "allgather: shards of more than ", INT_MAX,
                " elements are not supported by the MPI communicator");
      c[r] = static_cast<int>(counts[r]);
      displs[r] = static_cast<int>(offset);
      offset += counts[r];
    }
    Timed t(*this, "allgather (parameters)");
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, c.data(), displs.data(), mpi_type<T>(), MPI_COMM_WORLD);
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; })) {
      const int64_t since = since_ns_.load();
      if (since == 0) continue;
      const double waited = (now_ns() - since) * 1e-9;
      if (waited < timeout_s_) continue;
      std::fprintf(stderr,
                   "error: rank %d of %d: waited %.0f s in %s for the other ranks; another rank died or hangs. "
                   "Exiting (the limit is %s=%g seconds; 0 disables it)\n",
                   rank_, size_, waited, what_.load(), kTimeoutEnv, timeout_s_);
      std::fflush(stderr);
      std::_Exit(1);  // the launcher sees a rank fail and ends the others
    }
  }

  int rank_ = 0, size_ = 1;
  std::string name_;
  std::vector<MPI_Request> pending_;  // started by start_allreduce_sum
  double timeout_s_;
  std::atomic<int64_t> since_ns_{0};
  std::atomic<const char*> what_{""};
  std::thread watchdog_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

}  // namespace gpt::dist
#endif  // GPT_HAVE_MPI
