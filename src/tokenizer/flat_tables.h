// Two open-addressing hash tables (linear probing, power-of-two sizes) for the
// BPE encoder's hot lookups, where std::unordered_map's node chasing costs a
// cache miss per step: the merge rules by id pair, and the per-thread memo of
// piece -> ids, whose keys and ids share one arena so a hit touches the slot
// and one place in the arena.
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <string_view>
#include <vector>

namespace gpt {

// (left, right) -> (rank, result). Built once, then read by many threads.
class PairTable {
 public:
  struct Value {
    uint32_t rank, result;
  };
  explicit PairTable(size_t n = 0) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    slots_.assign(cap, Slot{kEmpty, {0, 0}});
    mask_ = cap - 1;
  }
  // False if the pair is there already.
  bool insert(uint32_t left, uint32_t right, Value v) {
    const uint64_t key = (uint64_t{left} << 32) | right;
    for (size_t i = index(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return false;
      if (slots_[i].key == kEmpty) {
        slots_[i] = {key, v};
        return true;
      }
    }
  }
  const Value* find(uint32_t left, uint32_t right) const {
    const uint64_t key = (uint64_t{left} << 32) | right;
    for (size_t i = index(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].value;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are below 2^32 - 1, so no pair is this
  struct Slot {
    uint64_t key;
    Value value;
  };
  size_t index(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// piece bytes -> ids, for one thread. Callers pass the piece's hash.
class PieceCache {
 public:
  uint64_t owner = 0;  // which tokenizer filled it

  size_t size() const { return size_; }
  size_t arena_words() const { return arena_.size(); }
  void clear() {
    slots_.assign(1024, Slot{});
    arena_.clear();
    size_ = 0;
  }
  // The ids of piece, or nullptr; n receives their count.
  const uint32_t* find(std::string_view piece, uint64_t hash, uint32_t& n) const {
    if (slots_.empty()) return nullptr;
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.hash == 0) return nullptr;
      if (s.hash == hash && s.key_len == piece.size() &&
          std::memcmp(arena_.data() + s.offset, piece.data(), piece.size()) == 0) {
        n = s.n_ids;
        return arena_.data() + s.offset + words(s.key_len);
      }
    }
  }
  // Adds a piece that is not in the cache (pieces up to 65535 bytes and ids).
  void insert(std::string_view piece, uint64_t hash, const uint32_t* ids, uint32_t n) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    const auto offset = static_cast<uint32_t>(arena_.size());
    arena_.resize(arena_.size() + words(piece.size()) + n);
    std::memcpy(arena_.data() + offset, piece.data(), piece.size());
    std::memcpy(arena_.data() + offset + words(piece.size()), ids, n * sizeof(uint32_t));
    place(Slot{hash, offset, static_cast<uint16_t>(piece.size()), static_cast<uint16_t>(n)});
    ++size_;
  }
  // Hashes are never 0 (0 marks an empty slot).
  static uint64_t hash_of(std::string_view piece) {
    const uint64_t h = std::hash<std::string_view>{}(piece);
    return h ? h : 1;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0;  // in arena_ words: the key bytes, padded to whole words, then the ids
    uint16_t key_len = 0, n_ids = 0;
  };
  static size_t words(size_t bytes) { return (bytes + 3) / 4; }
  void place(const Slot& s) {
    const size_t mask = slots_.size() - 1;
    size_t i = s.hash & mask;
    while (slots_[i].hash != 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 1024 : 2 * old.size(), Slot{});
    for (const Slot& s : old)
      if (s.hash != 0) place(s);
  }
  std::vector<Slot> slots_;
  std::vector<uint32_t> arena_;
  size_t size_ = 0;
};

}  // namespace gpt
