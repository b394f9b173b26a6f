// Helpers of the tokenizer tests: where GPT-2's files are, random byte strings.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

namespace gpt::test {

// The folder with GPT-2's encoder.json, vocab.bpe and golden.jsonl: $GPT_GPT2_DIR,
// else ../shared/data/gpt2 beside the source tree (CI puts shared/ there).
inline std::string gpt2_dir() {
  if (const char* env = std::getenv("GPT_GPT2_DIR"); env && *env) return env;
  return (std::filesystem::path(GPT_SOURCE_DIR) / ".." / "shared" / "data" / "gpt2").lexically_normal().string();
}

inline bool have_gpt2_dir() {
  const std::filesystem::path d = gpt2_dir();
  return std::filesystem::exists(d / "encoder.json") && std::filesystem::exists(d / "vocab.bpe");
}

// Random text mixing ASCII words, whitespace runs, punctuation, multi-byte
// UTF-8 (valid) and arbitrary bytes (mostly invalid UTF-8).
inline std::string random_text(std::mt19937& rng, size_t pieces) {
  static const char* kParts[] = {
      "the",      " the",         "and",           " of",         "'s",    "'ll", "'T",   "  ", "\n",   "\n\n",
      " \n ",     "\t",           "\r\n",          "123",         " 4567", "!!",  " ...", "é",  "日本", "👋",
      "\xc2\xa0", "\xe2\x80\x8d", "<|endoftext|>", "Ab*do\"men\\"};
  std::string s;
  for (size_t i = 0; i < pieces; ++i) {
    switch (rng() % 4) {
      case 0:
      case 1:
        s += kParts[rng() % (sizeof kParts / sizeof *kParts)];
        break;
      case 2:
        s.push_back(static_cast<char>(rng() % 256));  // any byte
        break;
      default:
        s.push_back(static_cast<char>('a' + rng() % 26));
    }
  }
  return s;
}

}  // namespace gpt::test
