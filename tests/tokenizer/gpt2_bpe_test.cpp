// GPT-2's tokenizer: the golden cases, round trips of arbitrary bytes, the
// merge algorithm against a literal transcription of encoder.py's bpe(), and
// broken vocabulary files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/check.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer_test_util.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// One tokenizer for the whole suite: loading it takes a moment.
const BpeTokenizer& gpt2() {
  static const std::unique_ptr<BpeTokenizer> tok = [] {
    EXPECT_TRUE(test::have_gpt2_dir()) << "GPT-2 vocabulary not found in " << test::gpt2_dir()
                                       << "; set GPT_GPT2_DIR to a folder with encoder.json and vocab.bpe";
    return load_gpt2_tokenizer(test::gpt2_dir());
  }();
  return *tok;
}

TEST(Gpt2Tokenizer, GoldenCases) {
  const BpeTokenizer& tok = gpt2();
  EXPECT_EQ(tok.vocab_size(), 50257u);
  EXPECT_EQ(tok.end_of_text(), 50256u);
  std::ifstream in(fs::path(test::gpt2_dir()) / "golden.jsonl");
  ASSERT_TRUE(in) << "golden.jsonl missing in " << test::gpt2_dir();
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    const std::string text = j.at("text");
    const std::vector<uint32_t> want = j.at("ids").get<std::vector<uint32_t>>();
    const std::vector<uint32_t> got = tok.encode(text);
    EXPECT_EQ(got, want) << "text: " << nlohmann::json(text).dump();
    EXPECT_EQ(tok.decode(want), text) << "text: " << nlohmann::json(text).dump();
    ++cases;
  }
  EXPECT_GE(cases, 30);
}

TEST(Gpt2Tokenizer, EndOfTextOnlyWhereAsked) {
  const BpeTokenizer& tok = gpt2();
  const std::string text = "a<|endoftext|>b";
  EXPECT_EQ(tok.encode(text, true), (std::vector<uint32_t>{64, 50256, 65}));
  const auto plain = tok.encode(text);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256u), 0);
  EXPECT_EQ(tok.decode(plain), text);
  EXPECT_EQ(tok.decode(tok.encode(text, true)), text);
  EXPECT_THROW(tok.decode(std::vector<uint32_t>{50257}), Error);
}

TEST(Gpt2Tokenizer, RoundTripsArbitraryBytes) {
  const BpeTokenizer& tok = gpt2();
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    const std::string s = test::random_text(rng, 1 + rng() % 60);
    ASSERT_EQ(tok.decode(tok.encode(s)), s) << "case " << i;
    ASSERT_EQ(tok.decode(tok.encode(s, true)), s) << "case " << i;
  }
  // Lone continuation bytes, truncated sequences, overlong forms, surrogates.
  for (const char* s : {"\x80", "\xff\xfe", "a\xe6\x97", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80 x", "\xc3"}) {
    const std::vector<uint32_t> ids = tok.encode(s);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tok.decode(ids), s);
  }
}

// GPT-2's bpe() from encoder.py, on byte strings: find the lowest-ranked
// bigram, merge all its occurrences left to right, repeat.
std::vector<std::string> reference_bpe(const std::string& piece,
                                       const std::map<std::pair<std::string, std::string>, size_t>& ranks) {
  std::vector<std::string> word;
  for (char c : piece) word.emplace_back(1, c);
  while (word.size() > 1) {
    size_t best = SIZE_MAX;
    std::pair<std::string, std::string> bigram;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const auto it = ranks.find({word[i], word[i + 1]});
      if (it != ranks.end() && it->second < best) best = it->second, bigram = it->first;
    }
    if (best == SIZE_MAX) break;
    std::vector<std::string> next;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == bigram.first && word[i + 1] == bigram.second) {
        next.push_back(bigram.first + bigram.second);
        i += 2;
      } else {
        next.push_back(word[i++]);
      }
    }
    word = next;
  }
  return word;
}

TEST(Gpt2Tokenizer, MergesMatchEncoderPyOnRandomPieces) {
  const BpeTokenizer& tok = gpt2();
  const BpeVocab& v = tok.vocab();
  std::map<std::pair<std::string, std::string>, size_t> ranks;
  for (size_t r = 0; r < v.merges.size(); ++r) ranks[{v.tokens[v.merges[r].left], v.tokens[v.merges[r].right]}] = r;
  std::mt19937 rng(11);
  const Pretokenizer pre;
  int pieces = 0;
  for (int i = 0; i < 60; ++i) {
    const std::string text = test::random_text(rng, 80);
    pre.for_each_piece(text, [&](std::string_view p) {
      std::vector<uint32_t> ids;
      tok.encode_piece(p, ids);
      std::vector<std::string> got;
      for (uint32_t id : ids) got.emplace_back(tok.token_bytes(id));
      EXPECT_EQ(got, reference_bpe(std::string(p), ranks))
          << nlohmann::json(std::string(p)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      ++pieces;
    });
  }
  EXPECT_GT(pieces, 1000);
  // Long pieces (a run of one character) go through the same merges.
  for (const std::string& p : {std::string(200, ' '), std::string(131, 'a'), std::string(77, '!')}) {
    std::vector<uint32_t> ids;
    tok.encode_piece(p, ids);
    std::vector<std::string> got;
    for (uint32_t id : ids) got.emplace_back(tok.token_bytes(id));
    EXPECT_EQ(got, reference_bpe(p, ranks));
  }
}

TEST(Gpt2Tokenizer, IndependentChunksEncodeLikeTheWhole) {
  const BpeTokenizer& tok = gpt2();
  std::mt19937 rng(3);
  std::string text;
  for (int i = 0; i < 400; ++i) text += test::random_text(rng, 8) + (rng() % 3 ? "\n" : "\n\n");
  const auto whole = tok.encode(text);
  const auto chunks = independent_chunks(text, 50);
  EXPECT_GT(chunks.size(), 20u);
  std::vector<uint32_t> joined;
  for (auto [b, e] : chunks) tok.encode_ordinary(std::string_view(text).substr(b, e - b), joined);
  EXPECT_EQ(joined, whole);
  // The cut rule: "\n" with printable non-space ASCII on both sides.
  EXPECT_EQ(next_independent_cut("ab\ncd", 0), 3u);
  EXPECT_EQ(next_independent_cut("a \ncd\n\nx\ny", 0), 9u);
  EXPECT_EQ(next_independent_cut("a\n d", 0), 4u);
}

class Gpt2Files : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpt_gpt2_files_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ifstream e(fs::path(test::gpt2_dir()) / "encoder.json"), b(fs::path(test::gpt2_dir()) / "vocab.bpe");
    std::ostringstream es, bs;
    es << e.rdbuf();
    bs << b.rdbuf();
    encoder_ = es.str();
    merges_ = bs.str();
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string load(const std::string& encoder, const std::string& merges) {
    std::ofstream(dir_ / "encoder.json", std::ios::binary) << encoder;
    std::ofstream(dir_ / "vocab.bpe", std::ios::binary) << merges;
    return error_of([&] { load_gpt2_tokenizer(dir_.string()); });
  }
  fs::path dir_;
  std::string encoder_, merges_;
};

TEST_F(Gpt2Files, BrokenFilesAreNamed) {
  ASSERT_EQ(load(encoder_, merges_), "");  // the copies load
  std::string msg = load(encoder_.substr(0, encoder_.size() / 2), merges_);
  EXPECT_NE(msg.find("encoder.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
  // vocab.bpe cut short: tokens no merge makes.
  msg = load(encoder_, merges_.substr(0, merges_.size() / 2));
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir_.string()), std::string::npos) << msg;
  // A merge naming an unknown token.
  msg = load(encoder_, merges_ + "qqqzz xyzzy\n");
  EXPECT_NE(msg.find("vocab.bpe' line 50002"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"qqqzz\" is not in"), std::string::npos) << msg;
  // Missing files.
  fs::remove(dir_ / "vocab.bpe");
  msg = error_of([&] { load_gpt2_tokenizer(dir_.string()); });
  EXPECT_NE(msg.find("vocab.bpe"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  msg = error_of([&] { make_tokenizer("gpt2:" + (dir_ / "nope").string()); });
  EXPECT_NE(msg.find("is not a folder"), std::string::npos) << msg;
}

}  // namespace
}  // namespace gpt
