// Shared by the fuzz targets (libFuzzer entry points, one parser each): the
// input in a temporary file for the parsers that read files, and the rule
// that a parser may refuse its input only with gpt::Error. Anything else (a
// crash, a sanitizer report, another exception escaping, an assertion of a
// target's own property) is a finding.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "core/check.h"

namespace gpt::fuzz {

// A directory of this process's own under the temporary directory.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("gpt_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    spdlog::set_level(spdlog::level::off);  // warnings about odd inputs are expected, not findings
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch(), ec);
    });
    return d;
  }();
  return dir;
}

inline std::string write_file(const std::string& name, std::string_view bytes) {
  const std::string path = (scratch() / name).string();
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
  return path;
}

// Runs the parser; gpt::Error is the one way to refuse an input.
template <typename F>
void refuse_only_with_error(F&& parse) {
  // GPT_FUZZ_VERBOSE=1 says what each input came to (to check that the seeds
  // are accepted, so that fuzzing starts from the parsers' deep paths).
  static const bool verbose = std::getenv("GPT_FUZZ_VERBOSE") != nullptr;
  try {
    parse();
    if (verbose) std::fprintf(stderr, "fuzz: accepted\n");
  } catch (const gpt::Error& e) {
    if (verbose) std::fprintf(stderr, "fuzz: refused: %s\n", e.what());
  }
}

// A finding of the target's own checks: abort, so that libFuzzer (and the
// seed replay in CI) reports it.
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz: property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace gpt::fuzz
