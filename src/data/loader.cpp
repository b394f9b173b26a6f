// Batches of B sequences of T+1 tokens, in sequential or shuffled order.
#include "data/loader.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "data/rng.h"

namespace gpt {

namespace {

// Epochs get unrelated permutations: the golden-ratio multiple spreads epoch
// numbers over all 64 bits before they meet the seed, and Rng's splitmix64
// seeding scrambles the result further.
uint64_t epoch_seed(uint64_t seed, uint64_t epoch) { return seed ^ (epoch * 0x9E3779B97F4A7C15ull); }

}  // namespace

DataLoader::DataLoader(const std::string& pattern, int vocab_size, int B, int T, bool shuffle, uint64_t seed,
                       int32_t align_separator)
    : stream_(pattern, vocab_size), B_(B), T_(T), shuffle_(shuffle), seed_(seed) {
  GPT_CHECK(B > 0 && T > 0, "DataLoader needs B > 0 and T > 0, got B=", B, " T=", T);
  const uint64_t size = stream_.size();
  if (align_separator >= 0) {
    // One pass over the stream in blocks: the documents' starts, then each
    // document's windows at d, d+T, ... before the next start, kept where
    // T+1 tokens fit in the stream.
    std::vector<uint64_t> starts;
    std::vector<int32_t> block(uint64_t{1} << 20);
    for (uint64_t o = 0; o < size; o += block.size()) {
      const uint64_t n = std::min<uint64_t>(block.size(), size - o);
      stream_.read(o, n, block.data());
      for (uint64_t i = 0; i < n; ++i)
        if (block[i] == align_separator) starts.push_back(o + i);
    }
    for (size_t k = 0; k < starts.size(); ++k) {
      const uint64_t end = k + 1 < starts.size() ? starts[k + 1] : size;
      for (uint64_t d = starts[k]; d < end && d + T + 1 <= size; d += static_cast<uint64_t>(T)) offsets_.push_back(d);
    }
    nseq_ = offsets_.size();
    if (nseq_ < static_cast<uint64_t>(B))
      fail("data '", pattern, "' holds ", starts.size(), " documents (end-of-text id ", align_separator, "), ", nseq_,
           " windows of T+1=", T + 1, " tokens aligned to them (data.windows = \"documents\"); a batch of B=", B,
           " needs at least B");
    return;
  }
  nseq_ = (size - 1) / static_cast<uint64_t>(T);  // size >= 1: every shard holds a token
  const uint64_t needed = static_cast<uint64_t>(B) * static_cast<uint64_t>(T) + 1;
  if (nseq_ < static_cast<uint64_t>(B))
    fail("data '", pattern, "' holds ", size, " tokens; a batch of B=", B, " sequences of T+1=", T + 1,
         " tokens needs at least B*T+1 = ", needed, " tokens");
}

std::vector<uint64_t> DataLoader::epoch_order(uint64_t epoch) const {
  std::vector<uint64_t> order(nseq_);
  std::iota(order.begin(), order.end(), uint64_t{0});
  if (!shuffle_) return order;
  // Fisher-Yates with our own RNG, so the order is the same on every machine.
  Rng rng(epoch_seed(seed_, epoch));
  for (uint64_t i = nseq_ - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  return order;
}

// A batch that runs past the end of an epoch takes its remaining sequences
// from the start of the next epoch's order; no sequence is dropped or repeated
// within an epoch. The state is kept normalised: index < sequences_per_epoch.
void DataLoader::next(int32_t* inputs, int32_t* targets) { next_rows(inputs, targets, 0, B_); }

void DataLoader::next_rows(int32_t* inputs, int32_t* targets, int row_begin, int row_end) {
  GPT_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= B_, "DataLoader: rows [", row_begin, ", ", row_end,
            ") are not within the batch of B=", B_);
  const size_t T = static_cast<size_t>(T_);
  for (int b = 0; b < B_; ++b) {
    if (order_epoch_ != state_.epoch) {
      order_ = epoch_order(state_.epoch);
      order_epoch_ = state_.epoch;
    }
    if (b >= row_begin && b < row_end) {
      const uint64_t seq = order_[state_.index];
      // (rows,T): row b - row_begin holds tokens [seq*T, seq*T+T) as inputs,
      // shifted by one as targets (kIgnoreTarget where a loss mask says so)
      const size_t row = static_cast<size_t>(b - row_begin);
      stream_.read_example(offsets_.empty() ? seq * T : offsets_[seq], T, inputs + row * T, targets + row * T);
    }
    if (++state_.index == nseq_) {
      state_.index = 0;
      ++state_.epoch;
    }
  }
}

void DataLoader::set_state(const LoaderState& s) {
  if (s.index >= nseq_)
    fail("data loader state: index ", s.index, " must be < ", nseq_,
         " sequences per epoch (was the checkpoint made with other data or another T?)");
  state_ = s;
}

}  // namespace gpt
