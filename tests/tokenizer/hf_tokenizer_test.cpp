// Hugging Face tokenizer.json files (tokenizer/hf_tokenizer.cpp): the ids of
// fixed texts must be exactly those of the `tokenizers` library
// (tests/data/hf/tokenizers/, written by scripts/make_hf_fixtures.py from
// tokenizers trained in the configurations of GPT-2, Qwen2, Llama 3 and
// SmolLM files), decoding gives the text back, and what is not implemented
// is refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "tokenizer/bpe.h"
#include "tokenizer/parallel_encode.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_nfc.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

const fs::path kTokenizers = fs::path(GPT_SOURCE_DIR) / "tests" / "data" / "hf" / "tokenizers";

nlohmann::json golden(const std::string& name) {
  nlohmann::json j;
  std::ifstream(kTokenizers / name / "golden_ids.json") >> j;
  return j;
}

void expect_golden_ids(const std::string& name) {
  const auto tok = make_tokenizer("hf:" + (kTokenizers / name).string());
  const nlohmann::json g = golden(name);
  size_t ids = 0;
  for (size_t i = 0; i < g["texts"].size(); ++i) {
    const std::string text = g["texts"][i];
    const std::vector<uint32_t> want = g["ids"][i].get<std::vector<uint32_t>>();
    const std::vector<uint32_t> got = tok->encode(text, true);
    EXPECT_EQ(got, want) << name << " text " << i << ": " << text;
    // Decoding gives the text back, normalised where the tokenizer normalises.
    EXPECT_EQ(tok->decode(got), name == "qwen2_style" ? unicode::nfc(text) : text) << name << " text " << i;
    ids += want.size();
  }
  std::cout << "tokenizer " << name << ": " << ids << " ids over " << g["texts"].size()
            << " texts equal to the tokenizers library's\n";
}

TEST(HfTokenizer, Gpt2StyleIdsMatchTheTokenizersLibrary) { expect_golden_ids("gpt2_style"); }
TEST(HfTokenizer, Qwen2StyleIdsMatchTheTokenizersLibrary) { expect_golden_ids("qwen2_style"); }
TEST(HfTokenizer, Llama3StyleIdsMatchTheTokenizersLibrary) { expect_golden_ids("llama3_style"); }
TEST(HfTokenizer, SmolLmStyleIdsMatchTheTokenizersLibrary) { expect_golden_ids("smollm_style"); }

// The document-start token: BOS where the tokenizer puts one before every
// text (Llama 3's template), else EOS.
TEST(HfTokenizer, DocumentStartTokenFollowsTheBosConvention) {
  const auto gpt2 = make_tokenizer("hf:" + (kTokenizers / "gpt2_style").string());
  EXPECT_EQ(gpt2->decode(std::vector<uint32_t>{gpt2->end_of_text()}), "<|endoftext|>");
  const auto llama3 = make_tokenizer("hf:" + (kTokenizers / "llama3_style").string());
  EXPECT_EQ(llama3->decode(std::vector<uint32_t>{llama3->end_of_text()}), "<|begin_of_text|>");
  EXPECT_EQ(gpt2->vocab_size(), 400u);
}

// Texts encoded in parallel pieces give the ids of the whole.
TEST(HfTokenizer, ParallelEncodingEqualsSerial) {
  std::string text;
  for (int i = 0; i < 3000; ++i) text += "line " + std::to_string(i) + " of the test, don't stop.\nx\n";
  for (const char* name : {"gpt2_style", "llama3_style", "smollm_style"}) {
    const auto tok = make_tokenizer("hf:" + (kTokenizers / name).string());
    EXPECT_EQ(encode_spans(*tok, text, {TextSpan{0, text.size(), false}}), tok->encode(text)) << name;
  }
}

// NFC against Python's unicodedata (its own implementation of UAX #15) on
// strings drawn from combining marks, Hangul jamo and syllables, composition
// exclusions, singletons and precomposed letters (scripts/make_hf_fixtures.py).
TEST(HfTokenizer, NfcMatchesPythonsUnicodedata) {
  nlohmann::json j;
  std::ifstream(kTokenizers / "nfc_cases.json") >> j;
  size_t changed = 0;
  for (const auto& c : j["cases"]) {
    const std::string in = c[0], want = c[1];
    EXPECT_EQ(unicode::nfc(in), want) << nlohmann::json(in).dump();
    changed += in != want;
  }
  std::cout << "NFC: " << j["cases"].size() << " strings (Unicode " << j["unicode"].get<std::string>()
            << " data), " << changed << " of them changed by the normalisation, all equal to unicodedata's\n";
  EXPECT_GT(changed, 50u) << "the cases hardly exercise the normalisation";
  // Invalid UTF-8 passes through; normalisation restarts after it.
  EXPECT_EQ(unicode::nfc("e\xcc\x81\xff" "e\xcc\x81"), "\xc3\xa9\xff\xc3\xa9");
}

TEST(HfTokenizer, RefusesWhatItDoesNotImplementByName) {
  const std::pair<std::function<void(nlohmann::json&)>, const char*> cases[] = {
      {[](nlohmann::json& j) { j["model"]["type"] = "WordPiece"; }, "WordPiece"},
      {[](nlohmann::json& j) { j["model"]["byte_fallback"] = true; }, "byte_fallback"},
      {[](nlohmann::json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}}; }, "Metaspace"},
      {[](nlohmann::json& j) { j["normalizer"] = {{"type", "NFKC"}}; }, "NFKC"},
      {[](nlohmann::json& j) { j["added_tokens"][0]["lstrip"] = true; }, "lstrip"},
      {[](nlohmann::json& j) { j["model"]["vocab"]["\xe2\x96\x81x"] = 400; }, "not spelled in GPT-2's byte table"},
      {[](nlohmann::json& j) { j["model"]["merges"][0] = "zzz qqq"; }, "not in the vocabulary"},
      {[](nlohmann::json& j) { j["something_new"] = 1; }, "key 'something_new'"},
  };
  const fs::path dir = fs::temp_directory_path() / ("gpt_hf_tok_" + std::to_string(::getpid()));
  for (const auto& [edit, expect] : cases) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    nlohmann::json j;
    std::ifstream(kTokenizers / "gpt2_style" / "tokenizer.json") >> j;
    edit(j);
    std::ofstream(dir / "tokenizer.json") << j.dump();
    try {
      make_tokenizer("hf:" + dir.string());
      ADD_FAILURE() << "accepted: " << expect;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos) << e.what();
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpt
