// Training batches: B sequences of T+1 tokens. Sequence k of the stream holds
// tokens [k*T, k*T+T] (consecutive sequences share one token, as in llm.c), so
// an epoch has (size-1)/T sequences. Order is sequential or a seeded shuffle
// that covers every sequence exactly once per epoch (a fresh permutation each
// epoch, derived from seed and epoch number with the project's own RNG so it
// does not depend on the standard library's implementation).
//
// Windows aligned to documents (data.windows = "documents";
// docs/training_for_length.md): sequence k starts instead at the k-th of the
// offsets d, d+T, d+2T, ... of every document (d: the offset of the
// end-of-text token that opens it) that lie inside that document, so every
// window opens a document or continues one from a multiple of T; the last
// window of a document reaches into the next, which a document mask hides.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/shard.h"

namespace gpt {

struct LoaderState {
  uint64_t epoch = 0;
  uint64_t index = 0;  // position within the epoch's order
};

class DataLoader {
 public:
  // shuffle=false: sequential order. Throws if the stream holds fewer than
  // B sequences of T+1 tokens.
  // align_separator >= 0: windows aligned to the documents that this
  // end-of-text id opens (above); throws, naming the pattern, when fewer
  // than B such windows exist.
  DataLoader(const std::string& pattern, int vocab_size, int B, int T, bool shuffle, uint64_t seed,
             int32_t align_separator = -1);
  // Fills inputs (B*T) and targets (B*T) and advances B sequences. With
  // loss masks (data/shard.h), a target they do not score is kIgnoreTarget. A batch
  // that runs past the end of an epoch continues with the start of the next
  // epoch's order, so each epoch still yields every sequence exactly once.
  void next(int32_t* inputs, int32_t* targets);
  // The rows [row_begin, row_end) of the batch next() would return (one
  // rank's part of a global batch in data-parallel training), reading only
  // those: inputs and targets hold (row_end - row_begin)*T ids. Advances B
  // sequences like next().
  void next_rows(int32_t* inputs, int32_t* targets, int row_begin, int row_end);
  uint64_t sequences_per_epoch() const { return nseq_; }
  // Sequence ids of the current epoch's order (for tests).
  std::vector<uint64_t> epoch_order(uint64_t epoch) const;
  LoaderState state() const { return state_; }
  void set_state(const LoaderState& s);  // validates index < sequences_per_epoch
  const TokenStream& stream() const { return stream_; }
  bool has_masks() const { return stream_.has_masks(); }

 private:
  TokenStream stream_;
  int B_, T_;
  bool shuffle_;
  uint64_t seed_;
  uint64_t nseq_;
  LoaderState state_;
  std::vector<uint64_t> offsets_;  // aligned windows: sequence k starts at offsets_[k]; empty: at k*T
  std::vector<uint64_t> order_;    // order of state_.epoch
  uint64_t order_epoch_ = UINT64_MAX;
};

}  // namespace gpt
