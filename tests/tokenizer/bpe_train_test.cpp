// BPE training (merge order worked out by hand, determinism, agreement with
// the encoder) and our vocabulary files (round trip, broken files).
#include "tokenizer/bpe_train.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/check.h"
#include "tokenizer/tokenizer_test_util.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

using Merges = std::vector<std::pair<uint32_t, uint32_t>>;

TEST(BpeTrain, HandCheckedMergeOrder) {
  // "aaa aab ab" pre-tokenises to "aaa", " aab", " ab" (a = 97, b = 98,
  // space = 32), each once. Pair counts: (a,a) 3 (twice inside "aaa", the
  // occurrences overlap; once in " aab"), (' ',a) 2, (a,b) 2.
  //  1. (97,97) count 3 -> 257 "aa". "aaa" merges left to right: [aa, a];
  //     " aab" -> [' ', aa, b]. Now every pair counts 1: (' ',a) and (a,b)
  //     from " ab", (aa,a), (' ',aa), (aa,b).
  //  2. Tie at 1: the smallest (left, right) is (32,97) -> 258 " a";
  //     " ab" -> [' a', b], so (a,b) drops to 0.
  //  3. Left (32,257), (257,97), (257,98), (258,98): (32,257) -> 259 " aa";
  //     " aab" -> [' aa', b], so (aa,b) drops to 0.
  //  4. Left (257,97), (258,98), (259,98): (257,97) -> 260 "aaa".
  //  5. (258,98) -> 261 " ab".  6. (259,98) -> 262 " aab". No pair is left:
  //     6 merges although 300 - 257 = 43 were asked for.
  const BpeTrainResult r = train_bpe("aaa aab ab", 300);
  EXPECT_EQ(r.merges, (Merges{{97, 97}, {32, 97}, {32, 257}, {257, 97}, {258, 98}, {259, 98}}));
  EXPECT_EQ(r.pieces, 3u);
  EXPECT_EQ(r.tokens, 3u);  // one token per piece at the end
  EXPECT_EQ(r.bytes, 10u);

  // Ties on the left id go to the smaller right id: "abac" is one piece with
  // (a,b), (b,a), (a,c) once each; (97,98) wins over (97,99) and (98,97).
  //  1. (97,98) -> 257 "ab": [ab, a, c].  2. (97,99) (left 97 < 257) -> 258
  //  "ac": [ab, ac].  3. (257,258) -> 259 "abac".
  EXPECT_EQ(train_bpe("abac", 1000).merges, (Merges{{97, 98}, {97, 99}, {257, 258}}));
  // The vocabulary size caps the merges.
  EXPECT_EQ(train_bpe("abac", 258).merges, (Merges{{97, 98}}));
  EXPECT_TRUE(train_bpe("abac", 257).merges.empty());
  EXPECT_THROW(train_bpe("abac", 256), Error);
}

std::string corpus() {
  std::mt19937 rng(5);
  std::string text;
  for (int i = 0; i < 3000; ++i) text += test::random_text(rng, 6) + "\n";
  return text;
}

TEST(BpeTrain, DeterministicForAnyThreadCount) {
  const std::string text = corpus();
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const BpeTrainResult a = train_bpe(text, 1000);
  omp_set_num_threads(3);
  const BpeTrainResult b = train_bpe(text, 1000);
  omp_set_num_threads(saved);
  EXPECT_EQ(a.merges.size(), 1000u - 257u);
  EXPECT_EQ(a.merges, b.merges);
  EXPECT_EQ(a.tokens, b.tokens);
}

class BpeFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpt_bpe_file_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& content) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  std::string error_of(const std::string& path) {
    try {
      make_tokenizer(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(BpeFile, TrainedVocabularyEncodesTheCorpusAsTrainingDid) {
  const std::string text = corpus();
  const BpeTrainResult r = train_bpe(text, 600);
  const std::string path = (dir_ / "v.bpe").string();
  write_bpe_file(path, r.merges);
  const std::unique_ptr<Tokenizer> tok = make_tokenizer(path);
  EXPECT_EQ(tok->vocab_size(), 600u);
  EXPECT_EQ(tok->end_of_text(), 256u);
  EXPECT_EQ(dynamic_cast<const BpeTokenizer&>(*tok).vocab().merges.size(), r.merges.size());
  const std::vector<uint32_t> ids = tok->encode(text);
  EXPECT_EQ(ids.size(), r.tokens);  // the encoder reproduces training's segmentation
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_LT(ids.size(), text.size() * 6 / 10);  // 600 ids compress this mix of words and random bytes
  // Random bytes round-trip too, and "<|endoftext|>" is special only when asked.
  std::mt19937 rng(9);
  for (int i = 0; i < 200; ++i) {
    const std::string s = test::random_text(rng, 1 + rng() % 50);
    ASSERT_EQ(tok->decode(tok->encode(s)), s);
    ASSERT_EQ(tok->decode(tok->encode(s, true)), s);
  }
  EXPECT_EQ(tok->encode("x<|endoftext|>", true).back(), 256u);
  // The file says what each merge makes.
  std::ifstream in(path);
  std::string l1, l2, l3, l4, l5;
  std::getline(in, l1), std::getline(in, l2), std::getline(in, l3), std::getline(in, l4), std::getline(in, l5);
  EXPECT_EQ(l1, "gpt-bpe 1");
  EXPECT_EQ(l2, "pattern gpt2");
  EXPECT_EQ(l3, "vocab_size 600");
  EXPECT_EQ(l4, "merges 343");
  EXPECT_NE(l5.find("# 257 \""), std::string::npos) << l5;
}

TEST_F(BpeFile, NoMergesIsTheByteTokenizer) {
  const std::string path = write("bytes.bpe", "gpt-bpe 1\npattern gpt2\nvocab_size 257\nmerges 0\n");
  const auto tok = make_tokenizer(path);
  const auto bytes = make_tokenizer("byte");
  const std::string s("h\xc3\xa9llo\xff wor<|endoftext|>ld", 25);
  EXPECT_EQ(tok->encode(s, true), bytes->encode(s, true));
  EXPECT_EQ(tok->vocab_size(), 257u);
}

TEST_F(BpeFile, BrokenFilesAreNamed) {
  const std::string head = "gpt-bpe 1\npattern gpt2\nvocab_size 259\nmerges 2\n";
  struct Case {
    std::string content, needle;
  };
  const std::vector<Case> cases = {
      {"", "not a gpt BPE vocabulary"},
      {"{\"hello\": 1}\n", "not a gpt BPE vocabulary"},
      {"gpt-bpe 1\npattern gpt2\nvocab_size 259\n", "truncated: the header ends before \"merges\""},
      {"gpt-bpe 1\npattern gpt4\nvocab_size 259\nmerges 2\n", "pattern \"gpt4\" is not supported"},
      {"gpt-bpe 1\npattern gpt2\nvocab_size 300\nmerges 2\n97 98\n257 99\n", "vocab_size 300 must be 257 + merges"},
      {"gpt-bpe 1\npattern gpt2\nvocab_size x\nmerges 2\n", "vocab_size \"x\" is not a non-negative integer"},
      {head + "97 98\n", "truncated: the header announces 2 merges but 1 follow"},
      {head + "97 98\n257 99\n1 2\n", "more merges than the 2"},
      {head + "97 98\n258 99\n", "names id 258, an unknown token"},
      {head + "97 98\n256 99\n", "end-of-text"},
      {head + "97 98\n97 x\n", "line 6: expected a merge"},
      {head + "97 98\n97 98\n", "repeats the pair"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = write("v" + std::to_string(i) + ".bpe", cases[i].content);
    const std::string msg = error_of(path);
    EXPECT_NE(msg.find(path), std::string::npos) << "case " << i << ": " << msg;
    EXPECT_NE(msg.find(cases[i].needle), std::string::npos) << "case " << i << ": " << msg;
  }
  // Comments and blank lines are allowed; the file above with a good second merge loads.
  EXPECT_EQ(error_of(write("ok.bpe", "# mine\n" + head + "\n97 98  # ab\n# next\n257 99\n")), "");
  const std::string missing = (dir_ / "missing.bpe").string();
  const std::string msg = error_of(missing);
  EXPECT_NE(msg.find("'" + missing + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gpt2:DIR"), std::string::npos) << msg;  // says what is allowed
}

}  // namespace
}  // namespace gpt
