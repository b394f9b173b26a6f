// Learning a byte-level BPE vocabulary (`gpt data train-tokenizer`), and the
// id layout of our vocabulary files: 0..255 bytes, 256 end-of-text (so a file
// without merges is the byte tokenizer), 257 + i the result of merge i.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/parallel_encode.h"

namespace gpt {

inline constexpr uint32_t kBpeEndOfText = 256;
inline constexpr uint32_t kBpeFirstMergeId = 257;
// The longest token (in bytes) a merge may make. Merges concatenate, so a
// file of n merges could otherwise describe tokens of 2^n bytes; GPT-2's
// longest token has 128 bytes. The trainer never makes longer ones and the
// vocabulary loader refuses them.
inline constexpr size_t kBpeMaxTokenBytes = 1024;

struct BpeTrainResult {
  std::vector<std::pair<uint32_t, uint32_t>> merges;  // merge i makes id 257 + i
  uint64_t bytes = 0;                                 // corpus size
  uint64_t pieces = 0;                                // pre-tokenised pieces in the corpus
  uint64_t distinct_pieces = 0;
  uint64_t tokens = 0;  // the corpus's tokens under the learned merges
};

// Learns vocab_size - 257 merges (fewer if the corpus runs out of pairs):
// the corpus is pre-tokenised as GPT-2 does it (pretokenize.h) and pieces are
// counted; then, repeatedly, the most frequent adjacent pair of ids inside
// the pieces is merged, everywhere, left to right. Ties go to the pair with
// the smaller left id, then the smaller right id, so training is
// deterministic (same corpus, same merges; thread count does not matter).
// Pair counts are updated incrementally from the pieces that hold the merged
// pair. Throws gpt::Error if vocab_size < 257.
// The corpus is the spans of text (their end_of_text_before is ignored).
BpeTrainResult train_bpe(std::string_view text, const std::vector<TextSpan>& spans, uint32_t vocab_size);
inline BpeTrainResult train_bpe(std::string_view text, uint32_t vocab_size) {
  return train_bpe(text, {TextSpan{0, text.size(), false}}, vocab_size);
}

// The vocabulary of a merge list in our id layout.
BpeVocab bpe_vocab_from_merges(const std::vector<std::pair<uint32_t, uint32_t>>& merges);
// Writes our vocabulary file (format in docs/tokenizer.md), atomically.
void write_bpe_file(const std::string& path, const std::vector<std::pair<uint32_t, uint32_t>>& merges);

}  // namespace gpt
