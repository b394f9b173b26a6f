// Fuzz target: a safetensors file opened and every tensor read
// (convert/safetensors.h; Hugging Face weights).
#include "convert/safetensors.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      gpt::fuzz::write_file("model.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  gpt::fuzz::refuse_only_with_error([&] {
    const gpt::SafetensorsFile f(path);
    uint64_t bytes = 0;
    for (const gpt::StTensor& t : f.tensors()) {
      bytes += t.end - t.begin;
      std::vector<float> v(t.numel());
      f.read(t, v.data());
    }
    gpt::fuzz::require(bytes <= size, "the tensors hold no more bytes than the file");
  });
  return 0;
}
