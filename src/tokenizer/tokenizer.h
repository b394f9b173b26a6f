// Tokenizers: text bytes <-> token ids. One interface, four kinds, chosen by
// a spec string (make_tokenizer):
//   "byte"       256 byte ids + end-of-text 256 (vocabulary 257);
//   "gpt2:DIR"   GPT-2's byte-level BPE from DIR/encoder.json and DIR/vocab.bpe;
//   "hf:DIR"     a Hugging Face byte-level BPE from DIR/tokenizer.json (docs/hf_models.md §7);
//   FILE         a byte-level BPE vocabulary written by `gpt data train-tokenizer`
//                (format: docs/tokenizer.md).
// Every tokenizer encodes any byte string, valid UTF-8 or not, and decodes
// back to exactly those bytes.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpt {

// The text of the end-of-text token, as GPT-2 spells it.
inline constexpr std::string_view kEndOfTextText = "<|endoftext|>";

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The spec it was made from ("byte", "gpt2:DIR", a file path).
  virtual const std::string& spec() const = 0;
  // Number of ids; every id is < vocab_size().
  virtual uint32_t vocab_size() const = 0;
  virtual uint32_t end_of_text() const = 0;

  // Appends the ids of text to out. "<|endoftext|>" in the text is ordinary
  // text. Thread-safe (call from many threads at once).
  virtual void encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const = 0;

  // The bytes of one id; end-of-text gives "<|endoftext|>". Throws gpt::Error
  // naming the tokenizer for an id outside the vocabulary.
  virtual std::string_view token_bytes(uint32_t id) const = 0;

  // The special tokens' texts and ids that encode(text, true) recognises:
  // "<|endoftext|>" as end-of-text, or a Hugging Face tokenizer's added tokens.
  virtual std::vector<std::pair<std::string_view, uint32_t>> special_tokens() const {
    return {{kEndOfTextText, end_of_text()}};
  }
  // Whether encode_ordinary of a text cut at next_independent_cut
  // (pretokenize.h) gives the ids of the whole, so that encode_spans may
  // encode one span in parallel pieces.
  virtual bool independent_cuts() const { return true; }

  // encode_ordinary, or with special = true the special tokens in the text
  // become their ids (the longest one where several start at one place).
  std::vector<uint32_t> encode(std::string_view text, bool special = false) const;
  // The bytes of the ids concatenated (end-of-text as "<|endoftext|>"), so
  // decode(encode(x, special)) == x for every byte string x.
  std::string decode(std::span<const uint32_t> ids) const;
};

// Makes a tokenizer from its spec (see above). Throws gpt::Error naming the
// spec or file and what is wrong (missing, truncated or inconsistent files).
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec);

// The byte tokenizer (ids 0..255 bytes, 256 end-of-text).
std::unique_ptr<Tokenizer> make_byte_tokenizer();

// What a --tokenizer flag accepts, for error messages and --help.
inline constexpr const char* kTokenizerSpecHelp =
    "byte (256 bytes + end-of-text), gpt2:DIR (GPT-2's BPE: DIR/encoder.json and DIR/vocab.bpe), "
    "hf:DIR (a Hugging Face byte-level BPE: DIR/tokenizer.json), "
    "or a vocabulary FILE written by `gpt data train-tokenizer`";

}  // namespace gpt
