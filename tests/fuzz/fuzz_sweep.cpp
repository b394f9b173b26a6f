// Fuzz target: a sweep file (`gpt sweep --dry-run` reads it: keys, names,
// seeds, and each run's overrides against the base config it names).
#include "fuzz/fuzz_util.h"
#include "sweep/sweep.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      gpt::fuzz::write_file("sweep.json", std::string_view(reinterpret_cast<const char*>(data), size));
  gpt::fuzz::refuse_only_with_error([&] {
    const gpt::SweepPlan p = gpt::load_sweep(path);
    // Each run directory is one plain component below the sweep's dir.
    for (const auto& r : p.runs)
      gpt::fuzz::require(!r.name.empty() && r.name != "." && r.name != ".." && r.name.find('/') == std::string::npos,
                         "run names are plain directory names");
  });
  return 0;
}
