// Fuzz target: the BPE encoder (GPT-2's pre-tokeniser through PCRE2, then
// the ranked merges) on arbitrary bytes, invalid UTF-8 included, with a
// fixed vocabulary: it must never fail, and decoding must give the bytes back.
#include <memory>

#include "fuzz/fuzz_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/bpe_train.h"

namespace {

const gpt::BpeTokenizer& tokenizer() {
  static const std::unique_ptr<gpt::BpeTokenizer> tok = [] {
    // A few merges of the kind a trained vocabulary starts with: "th", "the",
    // " t", " the", "e ", "an", "and", "in", "ing".
    auto id = [](char c) { return static_cast<uint32_t>(static_cast<unsigned char>(c)); };
    const uint32_t f = gpt::kBpeFirstMergeId;
    const std::vector<std::pair<uint32_t, uint32_t>> merges = {
        {id('t'), id('h')}, {f, id('e')},     {id(' '), id('t')}, {f + 2, id('h')}, {f + 3, id('e')},
        {id('a'), id('n')}, {f + 5, id('d')}, {id('i'), id('n')}, {f + 7, id('g')}, {id(' '), f + 6}};
    return std::make_unique<gpt::BpeTokenizer>("fuzz", gpt::bpe_vocab_from_merges(merges), "fuzz vocabulary");
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<uint32_t> ids;
  tokenizer().encode_ordinary(text, ids);  // no refusal allowed: any bytes encode
  std::string back;
  for (uint32_t id : ids) {
    gpt::fuzz::require(id < tokenizer().vocab_size(), "ids inside the vocabulary");
    back += tokenizer().token_bytes(id);
  }
  gpt::fuzz::require(back == text, "decode(encode(bytes)) == bytes");
  return 0;
}
