// The tokenizer interface's shared parts (special tokens, decoding), the byte
// tokenizer, and make_tokenizer's spec parsing.
#include "tokenizer/tokenizer.h"

#include <array>
#include <filesystem>

#include "core/check.h"
#include "tokenizer/bpe.h"

namespace fs = std::filesystem;

namespace gpt {

namespace {

// Ids 0..255 are bytes, 256 end-of-text: the ids of every byte-level dataset
// and checkpoint made before the BPE tokenizers, kept as they were.
class ByteLevelTokenizer final : public Tokenizer {
 public:
  const std::string& spec() const override { return spec_; }
  uint32_t vocab_size() const override { return 257; }
  uint32_t end_of_text() const override { return 256; }
  void encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const override {
    for (unsigned char c : text) out.push_back(c);
  }
  std::string_view token_bytes(uint32_t id) const override {
    if (id == 256) return kEndOfTextText;
    if (id > 256) fail("tokenizer 'byte': id ", id, " is outside its vocabulary of 257");
    return bytes_[id];
  }

 private:
  static std::array<std::string, 256> make_bytes() {
    std::array<std::string, 256> b;
    for (int i = 0; i < 256; ++i) b[i] = std::string(1, static_cast<char>(i));
    return b;
  }
  std::string spec_ = "byte";
  std::array<std::string, 256> bytes_ = make_bytes();
};

}  // namespace

std::vector<uint32_t> Tokenizer::encode(std::string_view text, bool special) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 3 + 16);
  if (!special) {
    encode_ordinary(text, ids);
    return ids;
  }
  // Ordinary text between the special tokens is encoded on its own, as
  // GPT-2's and tiktoken's encoders do with allowed special tokens.
  const std::vector<std::pair<std::string_view, uint32_t>> specials = special_tokens();
  size_t pos = 0;
  while (true) {
    size_t at = std::string_view::npos, len = 0;
    uint32_t id = 0;
    for (const auto& [s, sid] : specials) {
      if (s.empty()) continue;
      const size_t f = text.find(s, pos);
      if (f < at || (f == at && f != std::string_view::npos && s.size() > len)) at = f, len = s.size(), id = sid;
    }
    encode_ordinary(text.substr(pos, at == std::string_view::npos ? std::string_view::npos : at - pos), ids);
    if (at == std::string_view::npos) break;
    ids.push_back(id);
    pos = at + len;
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const uint32_t> ids) const {
  std::string out;
  out.reserve(ids.size() * 3);
  for (uint32_t id : ids) out += token_bytes(id);
  return out;
}

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteLevelTokenizer>(); }

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "byte") return make_byte_tokenizer();
  if (spec.rfind("hf:", 0) == 0) {
    const std::string dir = spec.substr(3);
    if (dir.empty()) fail("tokenizer 'hf:': give the folder, as hf:DIR (DIR holds tokenizer.json)");
    return load_hf_tokenizer(dir);
  }
  if (spec.rfind("gpt2:", 0) == 0) {
    const std::string dir = spec.substr(5);
    if (dir.empty()) fail("tokenizer 'gpt2:': give the folder, as gpt2:DIR (DIR holds encoder.json and vocab.bpe)");
    return load_gpt2_tokenizer(dir);
  }
  std::error_code ec;
  if (spec.empty() || !fs::is_regular_file(spec, ec))
    fail("tokenizer '", spec, "': not a tokenizer name and no such file; allowed: ", kTokenizerSpecHelp);
  return load_bpe_file(spec);
}

}  // namespace gpt
