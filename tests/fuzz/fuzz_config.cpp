// Fuzz target: a config file (the JSON reader, then the schema's validation).
#include "config/config.h"
#include "core/json.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  gpt::fuzz::refuse_only_with_error([&] {
    const nlohmann::json j = gpt::parse_json(text, "fuzz config");
    const gpt::Config c = gpt::config_from_json(j);
    // What is accepted must write back and read again to the same config.
    const nlohmann::json again = gpt::config_to_json(c);
    gpt::fuzz::require(gpt::config_to_json(gpt::config_from_json(again)) == again, "config round trip");
  });
  return 0;
}
