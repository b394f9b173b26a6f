// BPE training: count the corpus's pre-tokenised pieces (in parallel over
// independent chunks), then merge the most frequent pair until the vocabulary
// is full, updating pair counts only for the pieces a merge touches.
#include "tokenizer/bpe_train.h"

#include <omp.h>

#include <algorithm>
#include <map>
#include <queue>
#include <unordered_map>

#include "core/check.h"
#include "tokenizer/pretokenize.h"

namespace gpt {

namespace {

using Pair = uint64_t;  // left << 32 | right: ordering pairs as integers orders them by (left, right)
Pair make_pair_key(uint32_t l, uint32_t r) { return (uint64_t{l} << 32) | r; }

// Pieces and their counts, sorted by bytes (the order the trainer numbers them in).
std::vector<std::pair<std::string, uint64_t>> count_pieces(std::string_view text, const std::vector<TextSpan>& spans) {
  const Pretokenizer pre;
  std::vector<std::pair<size_t, size_t>> chunks;
  for (const TextSpan& s : spans)
    for (auto [b, e] : independent_chunks(text.substr(s.begin, s.end - s.begin), size_t{1} << 20))
      chunks.emplace_back(s.begin + b, s.begin + e);
  std::vector<std::unordered_map<std::string, uint64_t>> per_chunk(chunks.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t c = 0; c < chunks.size(); ++c) {
    auto& counts = per_chunk[c];
    pre.for_each_piece(text.substr(chunks[c].first, chunks[c].second - chunks[c].first),
                       [&](std::string_view piece) { ++counts[std::string(piece)]; });
  }
  std::unordered_map<std::string, uint64_t> total;
  for (auto& counts : per_chunk) {
    for (auto& [piece, n] : counts) total[piece] += n;
    counts.clear();
  }
  std::vector<std::pair<std::string, uint64_t>> sorted(total.begin(), total.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

// A heap entry: a pair and its count when pushed. Entries go stale when the
// count changes (a fresh entry is pushed then) and are skipped when popped.
struct Entry {
  int64_t count;
  Pair pair;
  // The top of the heap is the most frequent pair, ties to the smallest pair.
  bool operator<(const Entry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

}  // namespace

BpeTrainResult train_bpe(std::string_view text, const std::vector<TextSpan>& spans, uint32_t vocab_size) {
  if (vocab_size < kBpeFirstMergeId)
    fail("vocabulary size ", vocab_size, " must be at least 257 (256 bytes and end-of-text)");
  BpeTrainResult res;
  for (const TextSpan& s : spans) res.bytes += s.end - s.begin;

  const auto pieces = count_pieces(text, spans);
  res.distinct_pieces = pieces.size();
  std::vector<std::vector<uint32_t>> words(pieces.size());
  std::vector<int64_t> freq(pieces.size());
  for (size_t w = 0; w < pieces.size(); ++w) {
    const auto& [bytes, n] = pieces[w];
    words[w].assign(reinterpret_cast<const unsigned char*>(bytes.data()),
                    reinterpret_cast<const unsigned char*>(bytes.data()) + bytes.size());
    freq[w] = static_cast<int64_t>(n);
    res.pieces += n;
  }

  // Pair counts, and for each pair the words that hold (or once held) it.
  std::unordered_map<Pair, int64_t> count;
  std::unordered_map<Pair, std::vector<uint32_t>> where;
  for (size_t w = 0; w < words.size(); ++w) {
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      const Pair p = make_pair_key(words[w][i], words[w][i + 1]);
      count[p] += freq[w];
      auto& list = where[p];
      if (list.empty() || list.back() != w) list.push_back(static_cast<uint32_t>(w));
    }
  }
  std::priority_queue<Entry> heap;
  for (const auto& [p, c] : count) heap.push({c, p});
  std::vector<size_t> token_bytes(kBpeFirstMergeId, 1);  // bytes of each id made so far

  const uint32_t target = vocab_size - kBpeFirstMergeId;
  std::unordered_map<Pair, int64_t> delta;
  std::vector<uint32_t> merged;
  while (res.merges.size() < target && !heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    const auto it = count.find(top.pair);
    if (it == count.end() || it->second != top.count) continue;  // stale
    const auto left = static_cast<uint32_t>(top.pair >> 32), right = static_cast<uint32_t>(top.pair);
    if (token_bytes[left] + token_bytes[right] > kBpeMaxTokenBytes) continue;  // never a token the loader refuses
    const auto id = static_cast<uint32_t>(kBpeFirstMergeId + res.merges.size());
    res.merges.emplace_back(left, right);
    token_bytes.push_back(token_bytes[left] + token_bytes[right]);

    std::vector<uint32_t> holders = std::move(where[top.pair]);
    where.erase(top.pair);
    delta.clear();
    for (const uint32_t w : holders) {
      std::vector<uint32_t>& word = words[w];
      const int64_t f = freq[w];
      // Rewrite the word, merging left to right; count the pairs it loses and gains.
      merged.clear();
      bool changed = false;
      for (size_t i = 0; i < word.size();) {
        if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
          merged.push_back(id);
          i += 2;
          changed = true;
        } else {
          merged.push_back(word[i++]);
        }
      }
      if (!changed) continue;  // the pair left this word in an earlier merge
      for (size_t i = 0; i + 1 < word.size(); ++i) delta[make_pair_key(word[i], word[i + 1])] -= f;
      for (size_t i = 0; i + 1 < merged.size(); ++i) {
        const Pair p = make_pair_key(merged[i], merged[i + 1]);
        delta[p] += f;
        // Pairs with the new id are the only new ones; holders is in word order.
        if (merged[i] == id || merged[i + 1] == id) {
          auto& list = where[p];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
      word.swap(merged);
    }
    for (const auto& [p, d] : delta) {
      if (d == 0) continue;
      int64_t& c = count[p];
      c += d;
      GPT_CHECK(c >= 0, "BPE training: negative pair count");
      if (c == 0) {
        count.erase(p);
      } else {
        heap.push({c, p});
      }
    }
  }
  for (size_t w = 0; w < words.size(); ++w) res.tokens += static_cast<uint64_t>(freq[w]) * words[w].size();
  return res;
}

}  // namespace gpt
