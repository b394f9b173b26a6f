// The single-process communicator: one rank, every collective a no-op.
#include "dist/impl.h"

#include <cstdlib>

namespace gpt::dist {
namespace {

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single process"; }
  void allreduce_sum(float*, size_t) override {}
  void allreduce_sum(double*, size_t) override {}
  void allgather(float*, const std::vector<size_t>&) override {}
  void allgather(double*, const std::vector<size_t>&) override {}
  void broadcast(float*, size_t, int) override {}
  void allreduce_sum_host(double*, size_t) override {}
  void barrier() override {}
  [[noreturn]] void abort(int status) override { std::exit(status); }
};

}  // namespace

Communicator& single_process() {
  static SingleCommunicator comm;
  return comm;
}

}  // namespace gpt::dist
