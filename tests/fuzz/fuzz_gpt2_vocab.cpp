// Fuzz target: GPT-2's vocabulary files (encoder.json and vocab.bpe, the
// input split at its first NUL byte), then one encoding with them.
#include <filesystem>

#include "fuzz/fuzz_util.h"
#include "tokenizer/bpe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string_view enc = all.substr(0, nul), bpe = nul == std::string_view::npos ? "" : all.substr(nul + 1);
  std::filesystem::create_directories(gpt::fuzz::scratch() / "gpt2");
  gpt::fuzz::write_file("gpt2/encoder.json", enc);
  gpt::fuzz::write_file("gpt2/vocab.bpe", bpe);
  gpt::fuzz::refuse_only_with_error([&] {
    const auto tok = gpt::load_gpt2_tokenizer((gpt::fuzz::scratch() / "gpt2").string());
    std::vector<uint32_t> ids;
    tok->encode_ordinary("Hello world, hello again!", ids);
    std::string back;
    for (uint32_t id : ids) back += tok->token_bytes(id);
    gpt::fuzz::require(back == "Hello world, hello again!", "decode(encode(text)) == text");
  });
  return 0;
}
