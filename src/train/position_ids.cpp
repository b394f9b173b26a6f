#include "train/position_ids.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "data/rng.h"
#include "data/synthetic.h"

namespace gpt {

namespace {

// The stream of synthetic_seed that position ids draw from (apart from the
// data's and the tasks' streams).
constexpr uint64_t kPositionStream = 0x706f736964730000ull;  // "posids"

// k distinct values of lo..hi (inclusive), ascending: selection sampling
// (Knuth, TAOCP vol. 2, §3.4.2, Algorithm S), each value kept with
// probability (still needed) / (still left), so every k-subset is equally likely.
void sorted_sample(Rng& rng, int64_t lo, int64_t hi, int k, int32_t* out) {
  int64_t left = hi - lo + 1;
  int needed = k;
  for (int64_t v = lo; needed > 0; ++v, --left)
    if (static_cast<int64_t>(rng.below(static_cast<uint64_t>(left))) < needed)
      out[k - needed--] = static_cast<int32_t>(v);
}

void pose_row(Rng& rng, int32_t* ids, int T, int L, int chunks) {
  // Chunk starts: 0 and c-1 distinct cut points of 1..T-1, ascending.
  std::vector<int32_t> starts(chunks);
  starts[0] = 0;
  if (chunks > 1) sorted_sample(rng, 1, T - 1, chunks - 1, starts.data() + 1);
  int64_t skip = 0;
  for (int j = 0; j < chunks; ++j) {
    if (j > 0) skip += static_cast<int64_t>(rng.below(static_cast<uint64_t>(L - T - skip + 1)));
    const int end = j + 1 < chunks ? starts[j + 1] : T;
    for (int t = starts[j]; t < end; ++t) ids[t] = static_cast<int32_t>(t + skip);
  }
}

}  // namespace

PositionIdOptions position_id_options(const TrainConfig& tc, int T) {
  PositionIdOptions o;
  if (tc.positions == "plain")
    o.kind = PositionIds::Plain;
  else if (tc.positions == "pose")
    o.kind = PositionIds::Pose;
  else if (tc.positions == "randomized")
    o.kind = PositionIds::Randomized;
  else
    GPT_CHECK(false, "train.positions: unknown \"", tc.positions, "\"; valid: plain, pose, randomized");
  o.span = tc.position_span > 0 ? tc.position_span : 16 * T;
  o.chunks = tc.pose_chunks;
  GPT_CHECK(o.span >= T, "train.position_span: the ids' span L = ", o.span, " must be at least the training context ",
            T);
  GPT_CHECK(o.chunks >= 1 && o.chunks <= T, "train.pose_chunks: ", o.chunks, " chunks do not fit a window of ", T,
            " tokens (valid: 1..", T, ")");
  return o;
}

void draw_position_ids(int32_t* ids, int rows, int T, const PositionIdOptions& o, uint64_t seed, uint64_t first_row) {
  GPT_CHECK(T > 0 && o.span >= T && o.chunks >= 1 && o.chunks <= T,
            "draw_position_ids: need 1 <= chunks <= T <= L, got T=", T, " L=", o.span, " chunks=", o.chunks);
  for (int r = 0; r < rows; ++r) {
    int32_t* row = ids + static_cast<size_t>(r) * T;
    Rng rng(synthetic_seed(seed, kPositionStream, first_row + static_cast<uint64_t>(r)));
    switch (o.kind) {
      case PositionIds::Plain:
        for (int t = 0; t < T; ++t) row[t] = t;
        break;
      case PositionIds::Pose:
        pose_row(rng, row, T, o.span, o.chunks);
        break;
      case PositionIds::Randomized:
        sorted_sample(rng, 0, o.span - 1, T, row);
        break;
    }
  }
}

void document_starts(int32_t* starts, const int32_t* tokens, int rows, int T, int32_t separator) {
  for (int r = 0; r < rows; ++r) {
    const size_t o = static_cast<size_t>(r) * T;
    int32_t begin = 0;
    for (int t = 0; t < T; ++t) {
      if (tokens[o + t] == separator) begin = t;
      starts[o + t] = begin;
    }
  }
}

void restart_positions(int32_t* ids, const int32_t* starts, int rows, int T) {
  for (int r = 0; r < rows; ++r) {
    int32_t* row = ids + static_cast<size_t>(r) * T;
    const int32_t* st = starts + static_cast<size_t>(r) * T;
    // Backwards, so that each document's first id is read before it is zeroed.
    for (int t = T - 1; t >= 0; --t) row[t] -= row[st[t]];
  }
}

}  // namespace gpt
