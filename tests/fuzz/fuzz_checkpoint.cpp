// Fuzz target: a checkpoint file as `gpt eval` reads it (format, checksum,
// tensor table, config, training state, then the model built from it).
#include "fuzz/fuzz_util.h"
#include "train/checkpoint.h"
#include "train/model_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      gpt::fuzz::write_file("checkpoint.bin", std::string_view(reinterpret_cast<const char*>(data), size));
  gpt::fuzz::refuse_only_with_error([&] {
    const gpt::LoadedModel m = gpt::load_model(path);
    // The parameters came from the file: never more than it holds.
    gpt::fuzz::require(m.model->num_params() * sizeof(float) <= size, "a model no larger than its file");
  });
  return 0;
}
