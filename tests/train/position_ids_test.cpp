// Training-time position ids (train/position_ids.h) against the papers'
// definitions: PoSE (Zhu et al. 2023, arXiv 2309.10400, §3.2: chunks whose
// ids are their indices plus non-decreasing skips u_0 = 0, u_j ~ U{u_{j-1}..
// L - T}) and randomised positions (Ruoss et al. 2023, arXiv 2305.16843, §3:
// a uniformly drawn sorted T-subset of 0..L-1). Bounds, structure,
// distribution and determinism under the seed.
#include "train/position_ids.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "core/check.h"

namespace gpt {
namespace {

PositionIdOptions opts(PositionIds kind, int span, int chunks = 2) {
  PositionIdOptions o;
  o.kind = kind;
  o.span = span;
  o.chunks = chunks;
  return o;
}

std::vector<int32_t> draw(const PositionIdOptions& o, int rows, int T, uint64_t seed = 7, uint64_t first = 0) {
  std::vector<int32_t> ids(static_cast<size_t>(rows) * T, -1);
  draw_position_ids(ids.data(), rows, T, o, seed, first);
  return ids;
}

// The chunks of a row: maximal runs of consecutive ids, as (start index, skip).
std::vector<std::pair<int, int>> chunks_of(const int32_t* row, int T) {
  std::vector<std::pair<int, int>> out{{0, row[0]}};
  for (int t = 1; t < T; ++t)
    if (row[t] != row[t - 1] + 1) out.push_back({t, row[t] - t});
  return out;
}

TEST(PositionIds, PlainIsTheIndex) {
  const std::vector<int32_t> ids = draw(opts(PositionIds::Plain, 64), 3, 16);
  for (int r = 0; r < 3; ++r)
    for (int t = 0; t < 16; ++t) EXPECT_EQ(ids[r * 16 + t], t);
}

TEST(PositionIds, PoseRowsAreChunksOfIndicesPlusRisingSkips) {
  const int T = 32, L = 512, rows = 400;
  for (int c : {1, 2, 3, 5}) {
    const std::vector<int32_t> ids = draw(opts(PositionIds::Pose, L, c), rows, T);
    for (int r = 0; r < rows; ++r) {
      const int32_t* row = ids.data() + r * T;
      EXPECT_EQ(row[0], 0) << "u_0 = 0: the first chunk starts at id 0";
      EXPECT_LE(row[T - 1], L - 1) << "the last id stays below L";
      for (int t = 1; t < T; ++t) ASSERT_GT(row[t], row[t - 1]) << "ids rise strictly (c " << c << ", row " << r << ")";
      // Within a chunk ids are consecutive; a skip u_j = id - index never
      // falls and never passes L - T. Equal skips merge two chunks, so at
      // most c runs are seen.
      const auto ch = chunks_of(row, T);
      EXPECT_LE(static_cast<int>(ch.size()), c);
      int prev = 0;
      for (const auto& [start, skip] : ch) {
        EXPECT_GE(skip, prev);
        EXPECT_LE(skip, L - T);
        prev = skip;
      }
    }
  }
}

// Two chunks: the cut is uniform on 1..T-1 and the skip u_1 uniform on
// 0..L-T (Eq. of §3.2), so their means are T/2 and (L-T)/2; the rows'
// sample means must fall within 5 standard errors.
TEST(PositionIds, PoseCutAndSkipAreUniform) {
  const int T = 16, L = 80, rows = 20000;
  const std::vector<int32_t> ids = draw(opts(PositionIds::Pose, L, 2), rows, T, 11);
  double cut_sum = 0, skip_sum = 0, skip_sq = 0;
  std::vector<int> cut_count(T, 0);
  for (int r = 0; r < rows; ++r) {
    const int32_t* row = ids.data() + r * T;
    // The cut is the first index whose id left the first chunk; a zero skip
    // hides it (the row is then 0..T-1), so read the skip from the last id.
    const int skip = row[T - 1] - (T - 1);
    int cut = -1;
    for (int t = 1; t < T && skip > 0; ++t)
      if (row[t] != t) {
        cut = t;
        break;
      }
    skip_sum += skip;
    skip_sq += static_cast<double>(skip) * skip;
    if (cut > 0) {
      cut_sum += cut;
      ++cut_count[cut];
    }
  }
  const int n_skip = L - T + 1;  // 0..L-T
  const double skip_mean = skip_sum / rows, skip_expect = (L - T) / 2.0;
  const double skip_var = (static_cast<double>(n_skip) * n_skip - 1) / 12.0;
  EXPECT_NEAR(skip_mean, skip_expect, 5 * std::sqrt(skip_var / rows));
  EXPECT_NEAR(skip_sq / rows - skip_mean * skip_mean, skip_var, 0.05 * skip_var);
  int seen = 0;
  for (int t = 1; t < T; ++t) seen += cut_count[t];
  const double cut_mean = cut_sum / seen, cut_var = ((T - 1.0) * (T - 1.0) - 1) / 12.0;
  EXPECT_NEAR(cut_mean, T / 2.0, 5 * std::sqrt(cut_var / seen));
  for (int t = 1; t < T; ++t) {
    const double expect = static_cast<double>(seen) / (T - 1);
    EXPECT_NEAR(cut_count[t], expect, 5 * std::sqrt(expect)) << "cut at " << t;
  }
  EXPECT_EQ(cut_count[0], 0);
}

// A sorted T-subset of 0..L-1, each value in it with probability T/L.
TEST(PositionIds, RandomizedIsAUniformSortedSubset) {
  const int T = 12, L = 60, rows = 20000;
  const std::vector<int32_t> ids = draw(opts(PositionIds::Randomized, L), rows, T, 3);
  std::vector<int> hits(L, 0);
  for (int r = 0; r < rows; ++r) {
    const int32_t* row = ids.data() + r * T;
    for (int t = 0; t < T; ++t) {
      ASSERT_GE(row[t], 0);
      ASSERT_LT(row[t], L);
      if (t > 0) { ASSERT_GT(row[t], row[t - 1]); }
      ++hits[row[t]];
    }
  }
  const double p = static_cast<double>(T) / L, expect = rows * p, sd = std::sqrt(rows * p * (1 - p));
  for (int v = 0; v < L; ++v) EXPECT_NEAR(hits[v], expect, 5 * sd) << "id " << v;
}

TEST(PositionIds, SpanOfTheWindowIsThePlainIndex) {
  for (PositionIds k : {PositionIds::Pose, PositionIds::Randomized}) {
    const std::vector<int32_t> ids = draw(opts(k, 20, 3), 5, 20);
    for (int r = 0; r < 5; ++r)
      for (int t = 0; t < 20; ++t) EXPECT_EQ(ids[r * 20 + t], t);
  }
}

// A row's ids depend on (seed, its global index) alone: drawing rows 5..7
// alone gives rows 5..7 of a longer draw (a resumed run, another rank split),
// the same seed the same ids, another seed other ids.
TEST(PositionIds, DeterministicPerRowAndSeed) {
  const int T = 24;
  for (PositionIds k : {PositionIds::Pose, PositionIds::Randomized}) {
    const PositionIdOptions o = opts(k, 400, 3);
    const std::vector<int32_t> all = draw(o, 8, T, 42, 100);
    const std::vector<int32_t> part = draw(o, 3, T, 42, 105);
    EXPECT_EQ(std::vector<int32_t>(all.begin() + 5 * T, all.end()), part);
    EXPECT_EQ(draw(o, 8, T, 42, 100), all);
    EXPECT_NE(draw(o, 8, T, 43, 100), all);
    std::set<std::vector<int32_t>> distinct;
    for (int r = 0; r < 8; ++r) distinct.insert(std::vector<int32_t>(all.begin() + r * T, all.begin() + (r + 1) * T));
    EXPECT_GT(distinct.size(), 4u) << "rows draw their own ids";
  }
}

// The document mask's starts: the last separator at or before each token
// (the separator opens the document it belongs to), 0 before the first.
TEST(PositionIds, DocumentStartsAndRestartedIds) {
  const int T = 8, sep = 9;
  const std::vector<int32_t> tokens = {1, 2, 9, 3, 4, 9, 9, 5,   // row 0
                                       9, 1, 1, 1, 1, 1, 1, 1};  // row 1
  std::vector<int32_t> starts(tokens.size(), -1);
  document_starts(starts.data(), tokens.data(), 2, T, sep);
  EXPECT_EQ(starts, (std::vector<int32_t>{0, 0, 2, 2, 2, 5, 6, 6, 0, 0, 0, 0, 0, 0, 0, 0}));
  // Plain ids restart at each document; other ids keep their steps inside it.
  std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7};
  restart_positions(ids.data(), starts.data(), 2, T);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 0, 1, 2, 0, 0, 1, 0, 1, 2, 3, 4, 5, 6, 7}));
  std::vector<int32_t> pose = {0, 1, 2, 10, 11, 12, 13, 14, 0, 1, 2, 3, 4, 5, 6, 7};
  restart_positions(pose.data(), starts.data(), 2, T);
  EXPECT_EQ(std::vector<int32_t>(pose.begin(), pose.begin() + T), (std::vector<int32_t>{0, 1, 0, 8, 9, 0, 0, 1}));
}

TEST(PositionIds, OptionsFromTheConfigAndTheirErrors) {
  TrainConfig tc;
  EXPECT_EQ(position_id_options(tc, 64).kind, PositionIds::Plain);
  tc.positions = "pose";
  const PositionIdOptions o = position_id_options(tc, 64);
  EXPECT_EQ(o.kind, PositionIds::Pose);
  EXPECT_EQ(o.span, 16 * 64) << "span 0 is 16 times the training context";
  EXPECT_EQ(o.chunks, 2);
  tc.position_span = 32;
  EXPECT_THROW(position_id_options(tc, 64), Error);
  tc.position_span = 128;
  tc.pose_chunks = 65;
  EXPECT_THROW(position_id_options(tc, 64), Error);
  tc.pose_chunks = 2;
  tc.positions = "shuffled";
  try {
    position_id_options(tc, 64);
    FAIL() << "an unknown kind must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("plain, pose, randomized"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpt
