// Fuzz target: a token shard (header checks, then every token id read and
// checked against the vocabulary).
#include <vector>

#include "data/shard.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      gpt::fuzz::write_file("shard.bin", std::string_view(reinterpret_cast<const char*>(data), size));
  gpt::fuzz::refuse_only_with_error([&] {
    const gpt::TokenStream s(path, 300);
    gpt::fuzz::require(s.size() * 2 <= size, "a shard holds no more tokens than its bytes allow");
    std::vector<int32_t> ids(s.size());
    s.read(0, s.size(), ids.data());
    for (int32_t id : ids) gpt::fuzz::require(id >= 0 && id < 300, "token ids are checked against the vocabulary");
  });
  return 0;
}
