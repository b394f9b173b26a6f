// Fuzz target: our own BPE vocabulary file (`gpt data bpe` writes it), then
// one encoding with it.
#include "fuzz/fuzz_util.h"
#include "tokenizer/bpe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      gpt::fuzz::write_file("vocab.bpe", std::string_view(reinterpret_cast<const char*>(data), size));
  gpt::fuzz::refuse_only_with_error([&] {
    const auto tok = gpt::load_bpe_file(path);
    std::vector<uint32_t> ids;
    const std::string text = "In the beginning God created the heaven and the earth.";
    tok->encode_ordinary(text, ids);
    std::string back;
    for (uint32_t id : ids) back += tok->token_bytes(id);
    gpt::fuzz::require(back == text, "decode(encode(text)) == text");
  });
  return 0;
}
