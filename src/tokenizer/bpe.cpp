// Byte-level BPE encoding: pre-tokenise, then merge inside each piece by rank,
// with a per-thread cache of the pieces already seen (a corpus repeats its
// words, so most pieces are looked up, not merged).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <queue>

#include "core/check.h"
#include "tokenizer/unicode_nfc.h"

namespace gpt {

namespace {

// Pieces longer than this are merged every time (rare, and they would bloat
// the cache); a cache over kMaxCacheEntries pieces or kMaxCacheWords words of
// keys and ids (64 MiB) is dropped and refilled.
constexpr size_t kMaxCachedPiece = 64;
constexpr size_t kMaxCacheEntries = size_t{1} << 20;
constexpr size_t kMaxCacheWords = size_t{1} << 24;

std::string printable(std::string_view bytes) { return quote_bytes(bytes, '\''); }

}  // namespace

std::string quote_bytes(std::string_view bytes, char quote) {
  static const char* hex = "0123456789abcdef";
  std::string s(1, quote);
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f && c != quote && c != '\\') {
      s.push_back(static_cast<char>(c));
    } else {
      s += "\\x";
      s.push_back(hex[c >> 4]);
      s.push_back(hex[c & 15]);
    }
  }
  return s + quote;
}

namespace {
std::vector<std::string> split_patterns(const BpeOptions& o) {
  return o.split_patterns.empty() ? std::vector<std::string>{kGpt2SplitPattern} : o.split_patterns;
}
}  // namespace

BpeTokenizer::BpeTokenizer(std::string spec, BpeVocab vocab, const std::string& source, BpeOptions options)
    : spec_(std::move(spec)),
      vocab_(std::move(vocab)),
      options_(std::move(options)),
      pretokenizer_(split_patterns(options_), source) {
  const bool open = options_.open_vocabulary;
  static std::atomic<uint64_t> instances{0};
  instance_ = ++instances;
  const auto n = static_cast<uint32_t>(vocab_.tokens.size());
  if (n == 0) fail(source, ": the vocabulary is empty");
  if (vocab_.end_of_text >= n)
    fail(source, ": end-of-text id ", vocab_.end_of_text, " is outside the vocabulary of ", n);
  if (!open) vocab_.tokens[vocab_.end_of_text] = std::string(kEndOfTextText);

  // What makes each id: a byte, end-of-text or one merge.
  std::vector<int64_t> made_by(n, -1);  // -2 byte, -3 end-of-text, else the merge index
  if (!open) made_by[vocab_.end_of_text] = -3;
  for (int b = 0; b < 256; ++b) {
    const uint32_t id = vocab_.byte_id[b];
    if (id >= n || (!open && id == vocab_.end_of_text) || vocab_.tokens[id] != std::string(1, static_cast<char>(b)))
      fail(source, ": byte ", b, " has no single-byte token");
    made_by[id] = -2;
  }
  rules_ = PairTable(vocab_.merges.size());
  for (size_t r = 0; r < vocab_.merges.size(); ++r) {
    const BpeMerge& m = vocab_.merges[r];
    for (uint32_t id : {m.left, m.right, m.result})
      if (id >= n || (!open && id == vocab_.end_of_text))
        fail(source, ": merge ", r, " names id ", id, ", which is ",
             id >= n ? "outside the vocabulary" : "end-of-text (it cannot be merged)");
    if (made_by[m.result] != -1 && !open)
      fail(source, ": merge ", r, " makes token ", m.result, " ", printable(vocab_.tokens[m.result]), ", which ",
           made_by[m.result] >= 0 ? "merge " + std::to_string(made_by[m.result]) + " already makes"
                                  : std::string("is a single byte"));
    if (vocab_.tokens[m.result] != vocab_.tokens[m.left] + vocab_.tokens[m.right])
      fail(source, ": merge ", r, " of ", printable(vocab_.tokens[m.left]), " and ", printable(vocab_.tokens[m.right]),
           " makes token ", m.result, " ", printable(vocab_.tokens[m.result]), ", not their concatenation");
    made_by[m.result] = static_cast<int64_t>(r);
    if (!rules_.insert(m.left, m.right, Rule{static_cast<uint32_t>(r), m.result}))
      fail(source, ": merge ", r, " repeats the pair ", printable(vocab_.tokens[m.left]), " ",
           printable(vocab_.tokens[m.right]), " of an earlier merge");
  }
  for (uint32_t id = 0; id < n && !open; ++id)
    if (made_by[id] == -1)
      fail(source, ": token ", id, " ", printable(vocab_.tokens[id]),
           " is neither a byte, end-of-text nor made by a merge: the merge list is truncated or belongs to "
           "another vocabulary");
  if (options_.ignore_merges)
    for (uint32_t id = 0; id < n; ++id) whole_.emplace(vocab_.tokens[id], id);
}

std::vector<std::pair<std::string_view, uint32_t>> BpeTokenizer::special_tokens() const {
  if (options_.specials.empty()) return Tokenizer::special_tokens();
  std::vector<std::pair<std::string_view, uint32_t>> s;
  for (const auto& [text, id] : options_.specials) s.emplace_back(text, id);
  return s;
}

std::string_view BpeTokenizer::token_bytes(uint32_t id) const {
  if (id >= vocab_.tokens.size())
    fail("tokenizer '", spec_, "': id ", id, " is outside its vocabulary of ", vocab_.tokens.size());
  return vocab_.tokens[id];
}

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const {
  std::string normalised;
  if (options_.nfc) {
    normalised = unicode::nfc(text);
    text = normalised;
  }
  pretokenizer_.for_each_piece(text, [&](std::string_view piece) { encode_piece_cached(piece, out); });
}

void BpeTokenizer::encode_piece_cached(std::string_view piece, std::vector<uint32_t>& out) const {
  if (options_.ignore_merges) {
    const auto it = whole_.find(std::string(piece));
    if (it != whole_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() == 1) {
    out.push_back(vocab_.byte_id[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (piece.size() > kMaxCachedPiece) {
    encode_piece(piece, out);
    return;
  }
  thread_local PieceCache cache;
  if (cache.owner != instance_ || cache.size() >= kMaxCacheEntries || cache.arena_words() >= kMaxCacheWords) {
    cache.clear();
    cache.owner = instance_;
  }
  const uint64_t hash = PieceCache::hash_of(piece);
  uint32_t n = 0;
  if (const uint32_t* ids = cache.find(piece, hash, n)) {
    out.insert(out.end(), ids, ids + n);
    return;
  }
  const size_t at = out.size();
  encode_piece(piece, out);
  cache.insert(piece, hash, out.data() + at, static_cast<uint32_t>(out.size() - at));
}

// GPT-2's bpe(): repeatedly merge the adjacent pair of lowest rank, all its
// occurrences left to right. A heap of candidate pairs ordered by (rank,
// position) does the same in O(n log n): equal ranks pop left to right, and a
// popped pair whose symbols changed since it was pushed is stale and skipped.
void BpeTokenizer::encode_piece(std::string_view piece, std::vector<uint32_t>& out) const {
  const size_t n = piece.size();
  if (n == 0) return;
  constexpr uint32_t kDead = UINT32_MAX;
  struct Sym {
    uint32_t id;
    int32_t prev, next;  // -1 at the ends
  };
  struct Cand {
    uint32_t rank, pos, left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Sym> sym(n);
  for (size_t i = 0; i < n; ++i)
    sym[i] = {vocab_.byte_id[static_cast<unsigned char>(piece[i])], static_cast<int32_t>(i) - 1,
              i + 1 < n ? static_cast<int32_t>(i + 1) : -1};
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || sym[pos].next < 0) return;
    const uint32_t l = sym[pos].id, r = sym[sym[pos].next].id;
    if (const Rule* rule = find_rule(l, r)) heap.push({rule->rank, static_cast<uint32_t>(pos), l, r});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Sym& s = sym[c.pos];
    if (s.id != c.left || s.next < 0 || sym[s.next].id != c.right) continue;  // stale
    Sym& t = sym[s.next];
    s.id = find_rule(c.left, c.right)->result;
    t.id = kDead;
    s.next = t.next;
    if (s.next >= 0) sym[s.next].prev = static_cast<int32_t>(c.pos);
    push(s.prev);
    push(static_cast<int32_t>(c.pos));
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace gpt
