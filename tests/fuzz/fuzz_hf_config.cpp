// Fuzz target: a Hugging Face config.json mapped onto the project's config
// (convert/hf.h), beside a fixed one-tensor model.safetensors (the mapping is
// the parser under test; the weights are checked when they are loaded).
#include <filesystem>

#include "convert/hf.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    const std::filesystem::path d = gpt::fuzz::scratch() / "hf";
    std::filesystem::create_directories(d);
    const float one = 1.0f;
    gpt::write_safetensors((d / "model.safetensors").string(), {{"x", {1}, &one}}, gpt::StDtype::F32);
    return d.string();
  }();
  gpt::fuzz::write_file("hf/config.json", std::string_view(reinterpret_cast<const char*>(data), size));
  gpt::fuzz::refuse_only_with_error([&] {
    const gpt::HfModel m(dir);
    gpt::fuzz::require(m.config().model.n_layer > 0, "a mapped model has layers");
  });
  return 0;
}
