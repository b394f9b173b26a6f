// Byte-level BPE: a vocabulary of byte strings built by ranked merges, applied
// inside each pre-tokenised piece exactly as GPT-2's encoder.py applies them.
// Both GPT-2's files (gpt2_vocab.cpp) and our own vocabulary files
// (bpe_file.cpp) load into a BpeVocab; one encoder serves both.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/flat_tables.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace gpt {

struct BpeMerge {
  uint32_t left = 0, right = 0;  // the pair of ids merged
  uint32_t result = 0;           // the id of their concatenation
};

struct BpeVocab {
  std::vector<std::string> tokens;      // bytes of each id; the end-of-text id holds "<|endoftext|>"
  std::array<uint32_t, 256> byte_id{};  // id of each single byte
  std::vector<BpeMerge> merges;         // highest priority (rank 0) first
  uint32_t end_of_text = 0;
};

// What a Hugging Face tokenizer.json (tokenizer/hf_tokenizer.cpp) asks of the
// encoder beyond GPT-2's files; the defaults are GPT-2's.
struct BpeOptions {
  std::vector<std::string> split_patterns;  // pre-tokenisation splits in turn; empty: GPT-2's pattern
  bool ignore_merges = false;               // a piece that is a token is that token (Llama 3)
  // Hugging Face vocabularies: tokens need not be a byte or a merge's result
  // (added tokens, tokens no merge reaches), end-of-text keeps its own bytes,
  // and two merges may make the same token.
  bool open_vocabulary = false;
  // The special tokens encode(text, true) matches; empty: "<|endoftext|>".
  std::vector<std::pair<std::string, uint32_t>> specials;
  bool nfc = false;  // the text is normalised to Unicode NFC first (unicode_nfc.h)
};

class BpeTokenizer final : public Tokenizer {
 public:
  // Checks the vocabulary (ids in range, each pair merged once, the result's
  // bytes the concatenation of the pair's); errors name `source`.
  BpeTokenizer(std::string spec, BpeVocab vocab, const std::string& source, BpeOptions options = {});
  std::vector<std::pair<std::string_view, uint32_t>> special_tokens() const override;
  // NFC keeps the cuts: the printable ASCII character after one neither
  // composes with nor reorders around what precedes it.
  bool independent_cuts() const override { return pretokenizer_.gpt2(); }

  const std::string& spec() const override { return spec_; }
  uint32_t vocab_size() const override { return static_cast<uint32_t>(vocab_.tokens.size()); }
  uint32_t end_of_text() const override { return vocab_.end_of_text; }
  void encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const override;
  std::string_view token_bytes(uint32_t id) const override;

  const BpeVocab& vocab() const { return vocab_; }
  // The ids of one pre-tokenised piece (no cache): GPT-2's bpe() on ids.
  void encode_piece(std::string_view piece, std::vector<uint32_t>& out) const;

 private:
  using Rule = PairTable::Value;
  const Rule* find_rule(uint32_t left, uint32_t right) const { return rules_.find(left, right); }
  void encode_piece_cached(std::string_view piece, std::vector<uint32_t>& out) const;

  std::string spec_;
  BpeVocab vocab_;
  BpeOptions options_;
  PairTable rules_;  // (left, right) -> rank and result
  Pretokenizer pretokenizer_;
  std::unordered_map<std::string, uint32_t> whole_;  // ignore_merges: token bytes -> id
  uint64_t instance_ = 0;  // tells the per-thread piece caches of two tokenizers apart
};

// Loaders (errors name the file and what is wrong).
std::unique_ptr<BpeTokenizer> load_gpt2_tokenizer(const std::string& dir);
// A Hugging Face tokenizer.json of a byte-level BPE (docs/hf_models.md §7),
// with DIR/tokenizer_config.json's BOS/EOS conventions where present.
std::unique_ptr<BpeTokenizer> load_hf_tokenizer(const std::string& dir);

// GPT-2's bytes_to_unicode table: the code point each byte is written as in
// GPT-2's and Hugging Face's byte-level vocabularies, and back.
std::array<uint32_t, 256> byte_to_code_point();
std::unordered_map<uint32_t, char> code_point_to_byte();
// The token string of the single byte b (its code point as UTF-8).
std::string byte_token_string(int b);
// The bytes a token string spells; false if it uses a code point outside the
// table or is empty.
bool token_string_to_bytes(const std::string& s, const std::unordered_map<uint32_t, char>& to_byte, std::string& out);
// bytes between two `quote` characters, printable ASCII as is, everything
// else (and the quote and '\\') as \xHH: for error messages and file comments.
std::string quote_bytes(std::string_view bytes, char quote);
std::unique_ptr<BpeTokenizer> load_bpe_file(const std::string& path);

}  // namespace gpt
