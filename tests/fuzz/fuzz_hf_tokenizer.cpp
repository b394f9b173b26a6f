// Fuzz target: a Hugging Face tokenizer.json loaded (tokenizer/hf_tokenizer.cpp)
// and used: a fixed text with special tokens, digits, Unicode and invalid
// bytes encoded, and decoded back.
#include "fuzz/fuzz_util.h"
#include "tokenizer/bpe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpt::fuzz::write_file("hftok/tokenizer.json", std::string_view(reinterpret_cast<const char*>(data), size));
  gpt::fuzz::refuse_only_with_error([&] {
    const auto tok = gpt::load_hf_tokenizer((gpt::fuzz::scratch() / "hftok").string());
    const std::string text = "Hello<|endoftext|> world 12345 caf\xc3\xa9 e\xcc\x81 \xff\xfe don't\n\n";
    const std::vector<uint32_t> ids = tok->encode(text, true);
    for (uint32_t id : ids) gpt::fuzz::require(id < tok->vocab_size(), "ids inside the vocabulary");
    tok->decode(ids);
  });
  return 0;
}
