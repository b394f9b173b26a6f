// Fuzz target: an llm.c checkpoint imported (`gpt convert --from-llmc`).
#include "convert/llmc.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      gpt::fuzz::write_file("llmc.bin", std::string_view(reinterpret_cast<const char*>(data), size));
  gpt::fuzz::refuse_only_with_error([&] {
    const gpt::Checkpoint c = gpt::import_llmc(path);
    size_t values = 0;
    for (const auto& t : c.tensors) values += t.data.size();
    gpt::fuzz::require(values * 2 <= size, "no more parameters than the file holds");
  });
  return 0;
}
