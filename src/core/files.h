// Small files of a run directory (config.json, results, checkpoints/latest),
// written atomically: to PATH.tmp, then renamed over PATH, so a reader or a
// crash never sees half of one.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace gpt {

void write_file_atomic(const std::string& path, const std::string& text);
// Pretty-printed JSON (2-space indent) and a final newline.
void write_json_file(const std::string& path, const nlohmann::json& j);

}  // namespace gpt
