// Reading JSON the project trusts: every JSON file or header the binary reads
// (configs, sweep files, checkpoint headers, vocabularies, results) goes
// through parse_json, which
//   - bounds the nesting depth (a file of 100,000 nested arrays is refused
//     instead of exhausting the stack of whatever walks it later),
//   - names the source and the key path of a bad value (a number that
//     overflows a double: "config.json: model.n_embd: number overflow (1e400)"),
//   - accepts // and /* */ comments where the caller allows them.
// read_json_file adds the file checks: it must exist and be a regular file
// (a FIFO or a directory is refused before it is opened, so nothing hangs).
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace gpt {

// Deeper than any file the project writes or documents (configs nest 3 levels).
constexpr int kMaxJsonDepth = 64;

struct JsonReadOptions {
  bool comments = true;
  int max_depth = kMaxJsonDepth;
};

// Parses `text`; errors are gpt::Error messages that start with `source`.
nlohmann::json parse_json(std::string_view text, const std::string& source, const JsonReadOptions& opt = {});

// The file's text, after checking that `path` names a regular file (errors
// start with `what`, for example "config" or "sweep").
std::string read_text_file(const std::string& path, const std::string& what);

// read_text_file + parse_json, the source being "WHAT: file \"PATH\"".
nlohmann::json read_json_file(const std::string& path, const std::string& what, const JsonReadOptions& opt = {});

}  // namespace gpt
