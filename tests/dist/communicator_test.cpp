// Sharding arithmetic (ZeRO-1) and the single-process communicator.
#include "dist/communicator.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/check.h"

namespace gpt::dist {
namespace {

TEST(Shard, ContiguousCoverWithSizesWithinOne) {
  for (size_t n : {0, 1, 5, 7, 64, 1000003})
    for (int size : {1, 2, 3, 4, 7, 8}) {
      size_t next = 0;
      const std::vector<size_t> counts = shard_counts(n, size);
      ASSERT_EQ(counts.size(), static_cast<size_t>(size));
      for (int r = 0; r < size; ++r) {
        const Shard s = shard_of(n, r, size);
        EXPECT_EQ(s.begin, next) << n << " " << r << "/" << size;
        EXPECT_EQ(s.size(), counts[r]);
        EXPECT_LE(s.size(), n / size + 1);
        EXPECT_GE(s.size(), n / size);
        next = s.end;
      }
      EXPECT_EQ(next, n);
      EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), size_t{0}), n);
    }
  EXPECT_THROW(shard_of(10, 2, 2), Error);
}

// Outside mpirun (as the tests run) the world is one process whose
// collectives leave the data as it is.
TEST(Communicator, SingleProcessCollectivesAreIdentities) {
  Communicator& c = world();
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.name(), "single process");
  std::vector<float> f = {1.5f, -2.0f, 3.25f};
  const std::vector<float> f0 = f;
  c.allreduce_sum(f.data(), f.size());
  c.allgather(f.data(), shard_counts(f.size(), 1));
  c.broadcast(f.data(), f.size(), 0);
  EXPECT_EQ(f, f0);
  c.start_allreduce_sum(f.data(), {{0, 2}, {2, 1}});
  c.finish_allreduces();
  EXPECT_EQ(f, f0);
  double d[2] = {0.25, 1.0};
  c.allreduce_sum_host(d, 2);
  EXPECT_EQ(d[0], 0.25);
  EXPECT_EQ(d[1], 1.0);
  c.barrier();
}

}  // namespace
}  // namespace gpt::dist
