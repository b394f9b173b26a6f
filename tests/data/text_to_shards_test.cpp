// Text to shards: round trip, the line-boundary cut, shard splitting, errors.
#include "data/text_to_shards.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <tuple>

#include "core/check.h"
#include "data/shard.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace fs = std::filesystem;

namespace {

std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const gpt::Error& e) {
    return e.what();
  }
  return "";
}

void expect_error_with(const std::function<void()>& f, std::initializer_list<std::string> parts) {
  const std::string msg = error_message(f);
  EXPECT_FALSE(msg.empty()) << "expected a gpt::Error";
  for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

std::vector<int32_t> shard_tokens(const std::string& path) {
  const gpt::TokenStream s(path, gpt::ByteTokenizer::kVocabSize);
  std::vector<int32_t> ids(s.size());
  s.read(0, s.size(), ids.data());
  return ids;
}

class TextToShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpt_tts_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_text(const std::string& text) {
    const std::string p = (dir_ / "in.txt").string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  // Converts text with the given val_fraction; returns the val part's bytes.
  std::string val_part(const std::string& text, double val_fraction) {
    gpt::TextToShardsOptions opt;
    opt.val_fraction = val_fraction;
    const auto r = gpt::text_to_shards(write_text(text), (dir_ / "out").string(), opt);
    return gpt::ByteTokenizer().decode(shard_tokens(r.files.at(0)));
  }

  fs::path dir_;
};

TEST(ByteTokenizerTest, EncodeDecode) {
  const gpt::ByteTokenizer tok;
  const std::string s("a\xff\n\0z", 5);
  const std::vector<uint32_t> ids = tok.encode(s);
  EXPECT_EQ(ids, (std::vector<uint32_t>{'a', 255, '\n', 0, 'z'}));
  std::vector<int32_t> with_eot{256};
  for (uint32_t id : ids) with_eot.push_back(static_cast<int32_t>(id));
  EXPECT_EQ(tok.decode(with_eot), s);
  EXPECT_THROW(tok.decode({1, 257}), gpt::Error);
  EXPECT_THROW(tok.decode({-1}), gpt::Error);
}

TEST_F(TextToShardsTest, RoundTrip) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "line " + std::to_string(i * i) + " of the text \xe2\x80\x94 ok\n";
  const std::string out = (dir_ / "mydata").string();
  gpt::TextToShardsOptions opt;
  opt.val_fraction = 0.2;
  const auto r = gpt::text_to_shards(write_text(text), out, opt);

  ASSERT_EQ(r.files.size(), 2u);
  EXPECT_EQ(r.files[0], (fs::path(out) / "mydata_val_000000.bin").string());
  EXPECT_EQ(r.files[1], (fs::path(out) / "mydata_train_000001.bin").string());
  const auto val = shard_tokens(r.files[0]), train = shard_tokens(r.files[1]);
  EXPECT_EQ(gpt::read_shard_header(r.files[0]).width, 2);
  ASSERT_FALSE(val.empty());
  ASSERT_FALSE(train.empty());
  EXPECT_EQ(val[0], gpt::ByteTokenizer::kEndOfText);
  EXPECT_EQ(train[0], gpt::ByteTokenizer::kEndOfText);
  EXPECT_EQ(r.val_tokens, val.size());
  EXPECT_EQ(r.train_tokens, train.size());
  EXPECT_EQ(r.train_tokens + r.val_tokens, text.size() + 2);

  const gpt::ByteTokenizer tok;
  const std::string t = tok.decode(train), v = tok.decode(val);
  EXPECT_EQ(t + v, text);
  EXPECT_EQ(t.back(), '\n');  // the cut is at a line boundary
  // About the last 20%: never more (the cut only moves forward), less by under a line.
  EXPECT_LE(v.size(), static_cast<size_t>(text.size() * 0.2));
  EXPECT_GT(v.size(), static_cast<size_t>(text.size() * 0.2) - 40);
}

TEST_F(TextToShardsTest, ValCutMovesToNextLine) {
  const std::string text = "aaaa\nbbbb\ncccc\ndddd\n";  // 20 bytes
  EXPECT_EQ(val_part(text, 0.3), "dddd\n");             // 6 bytes start mid-line "c\n": moved past it
  EXPECT_EQ(val_part(text, 0.25), "dddd\n");            // 5 bytes already start a line
  EXPECT_EQ(val_part(text, 0.5), "cccc\ndddd\n");       // 10 bytes already start a line
  EXPECT_EQ(val_part(text, 0.6), "cccc\ndddd\n");       // 12 bytes start "b\n": moved past it
}

TEST_F(TextToShardsTest, ValCutWithoutUsableNewline) {
  EXPECT_EQ(val_part("abcdefghij", 0.3), "hij");  // no newline: cut stays
  // The only newline left is the last byte; moving there would empty val.
  EXPECT_EQ(val_part("abcdefghij\n", 0.3), "ij\n");
}

TEST_F(TextToShardsTest, SplitsTrainIntoShards) {
  const std::string text = "aaaa\nbbbb\ncccc\ndddd\n";
  gpt::TextToShardsOptions opt;
  opt.val_fraction = 0.25;  // train = [EOT] + 15 bytes = 16 tokens
  opt.shard_tokens = 7;
  opt.name = "tiny";
  const std::string out = (dir_ / "a" / "b").string();  // nested, created
  const auto r = gpt::text_to_shards(write_text(text), out, opt);
  ASSERT_EQ(r.files.size(), 4u);
  EXPECT_EQ(r.files[3], (fs::path(out) / "tiny_train_000003.bin").string());
  EXPECT_EQ(r.train_tokens, 16u);

  std::vector<int32_t> train;
  const std::vector<size_t> sizes{7, 7, 2};
  for (size_t i = 1; i < r.files.size(); ++i) {
    const auto ids = shard_tokens(r.files[i]);
    EXPECT_EQ(ids.size(), sizes[i - 1]);
    train.insert(train.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(train[0], gpt::ByteTokenizer::kEndOfText);
  EXPECT_EQ(std::count(train.begin(), train.end(), gpt::ByteTokenizer::kEndOfText), 1);
  EXPECT_EQ(gpt::ByteTokenizer().decode(train), "aaaa\nbbbb\ncccc\n");
  // The whole set reads as one stream through the glob the trainer will use.
  EXPECT_EQ(gpt::TokenStream((fs::path(out) / "tiny_train_*.bin").string(), 257).size(), 16u);
}

TEST_F(TextToShardsTest, NameDefaultsToFolderEvenWithTrailingSlash) {
  const std::string out = (dir_ / "kjv").string() + "/";
  gpt::TextToShardsOptions opt;
  const auto r = gpt::text_to_shards(write_text("one\ntwo\nthree\nfour\n"), out, opt);
  EXPECT_TRUE(fs::exists(dir_ / "kjv" / "kjv_val_000000.bin"));
  EXPECT_TRUE(fs::exists(dir_ / "kjv" / "kjv_train_000001.bin"));
  EXPECT_EQ(r.files.size(), 2u);
}

TEST_F(TextToShardsTest, ValFractionMustBeInsideZeroOne) {
  const std::string in = write_text("one\ntwo\nthree\n");
  for (double f : {0.0, 1.0, -0.1, 1.5, std::nan("")}) {
    gpt::TextToShardsOptions opt;
    opt.val_fraction = f;
    expect_error_with([&] { gpt::text_to_shards(in, (dir_ / "out").string(), opt); }, {"val_fraction", "(0, 1)"});
  }
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

TEST_F(TextToShardsTest, EmptyOrMissingInput) {
  const std::string empty = write_text("");
  const std::string out = (dir_ / "out").string();
  expect_error_with([&] { gpt::text_to_shards(empty, out, {}); }, {empty, "empty"});
  const std::string missing = (dir_ / "missing.txt").string();
  expect_error_with([&] { gpt::text_to_shards(missing, out, {}); }, {missing, "does not exist"});
}

TEST_F(TextToShardsTest, PartsMustNotBeEmpty) {
  gpt::TextToShardsOptions opt;
  opt.val_fraction = 0.1;
  const std::string in = write_text("abc");  // 10% of 3 bytes is no byte
  expect_error_with([&] { gpt::text_to_shards(in, (dir_ / "out").string(), opt); }, {in, "validation part empty"});
}

TEST_F(TextToShardsTest, ValidationIsWholeDocumentsWhenTheCutAllowsIt) {
  // Documents "one\ntwo\n" (8 bytes), "three\n" (6), "four\n" (5): 19 bytes.
  const std::string text = "one\ntwo\n\n\nthree\n  \nfour\n";
  auto split = [&](double f) {
    gpt::TextToShardsOptions opt;
    opt.val_fraction = f;
    opt.doc_sep = "blank";
    const auto r = gpt::text_to_shards(write_text(text), (dir_ / "out").string(), opt);
    const gpt::ByteTokenizer tok;
    // End-of-text decodes to nothing with the old tokenizer; mark it.
    std::string parts[2];
    for (int i = 0; i < 2; ++i)
      for (int32_t id : shard_tokens(r.files.at(i))) parts[i] += id == 256 ? std::string("|") : tok.decode({id});
    return std::pair{parts[1], parts[0]};  // train, val
  };
  // 30% = 5 bytes: the cut point (byte 14) starts "four\n".
  EXPECT_EQ(split(0.3), (std::pair<std::string, std::string>{"|one\ntwo\n|three\n", "|four\n"}));
  // 40% = 7 bytes: the cut point (12) lies in "three\n"; moves forward to "four\n".
  EXPECT_EQ(split(0.4), (std::pair<std::string, std::string>{"|one\ntwo\n|three\n", "|four\n"}));
  // 60% = 11 bytes: cut point 8 is where "three\n" starts.
  EXPECT_EQ(split(0.6), (std::pair<std::string, std::string>{"|one\ntwo\n", "|three\n|four\n"}));
  // 20% = 3 bytes: the cut point (16) lies in the last document, which is cut
  // (no newline to move to before its end) and both halves open with end-of-text.
  EXPECT_EQ(split(0.2), (std::pair<std::string, std::string>{"|one\ntwo\n|three\n|fo", "|ur\n"}));
}

TEST_F(TextToShardsTest, Gpt2TokenizerShards) {
  ASSERT_TRUE(gpt::test::have_gpt2_dir()) << gpt::test::gpt2_dir();
  const std::string spec = "gpt2:" + gpt::test::gpt2_dir();
  const auto tok = gpt::make_tokenizer(spec);
  const std::string a = "In the beginning God created the heaven and the earth.\n", b = "Hello, world!\n";
  const fs::path in = dir_ / "docs";
  fs::create_directories(in);
  std::ofstream(in / "1.txt") << a;
  std::ofstream(in / "2.txt") << b;
  gpt::TextToShardsOptions opt;
  opt.tokenizer = spec;
  opt.val_fraction = 0.25;  // 17 of 69 bytes: the cut point lies in a, moves to where b starts
  const auto r = gpt::text_to_shards(in.string(), (dir_ / "out").string(), opt);
  EXPECT_EQ(r.vocab_size, 50257u);
  EXPECT_EQ(r.width, 2);
  auto with_eot = [&](const std::string& t) {
    std::vector<int32_t> ids{50256};
    for (uint32_t id : tok->encode(t)) ids.push_back(static_cast<int32_t>(id));
    return ids;
  };
  const gpt::TokenStream train(r.files.at(1), 50257), val(r.files.at(0), 50257);
  std::vector<int32_t> t(train.size()), v(val.size());
  train.read(0, t.size(), t.data());
  val.read(0, v.size(), v.data());
  EXPECT_EQ(t, with_eot(a));
  EXPECT_EQ(v, with_eot(b));
}

TEST_F(TextToShardsTest, LargeVocabularyWritesUint32) {
  // A vocabulary file of 65,300 merges, each of two bytes: every byte pair
  // but 236, those of two lowercase letters last, so the last merge joins
  // "z" and "z" into token 257 + 65,299 = 65,556.
  std::vector<std::tuple<bool, int, int>> pairs;
  for (int x = 0; x < 256; ++x)
    for (int y = 0; y < 256; ++y) pairs.emplace_back(std::islower(x) && std::islower(y), x, y);
  std::sort(pairs.begin(), pairs.end());
  const int merges = 65300;
  std::ostringstream v;
  v << "gpt-bpe 1\npattern gpt2\nvocab_size " << 257 + merges << "\nmerges " << merges << "\n";
  for (size_t i = pairs.size() - merges; i < pairs.size(); ++i)
    v << std::get<1>(pairs[i]) << ' ' << std::get<2>(pairs[i]) << '\n';
  const std::string vocab = (dir_ / "big.bpe").string();
  std::ofstream(vocab) << v.str();
  gpt::TextToShardsOptions opt;
  opt.tokenizer = vocab;
  opt.val_fraction = 0.5;
  const std::string text = "zz\nzz\n";  // val is the second line
  const auto r = gpt::text_to_shards(write_text(text), (dir_ / "out").string(), opt);
  EXPECT_EQ(r.width, 4);
  EXPECT_EQ(gpt::read_shard_header(r.files.at(1)).width, 4);
  const gpt::TokenStream train(r.files.at(1), 257 + merges);
  std::vector<int32_t> ids(train.size());
  train.read(0, ids.size(), ids.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{256, 65556, 10}));
}

TEST_F(TextToShardsTest, UnknownTokenizer) {
  gpt::TextToShardsOptions opt;
  opt.tokenizer = "gpt2";
  expect_error_with([&] { gpt::text_to_shards(write_text("abc\n"), (dir_ / "out").string(), opt); },
                    {"'gpt2'", "allowed: byte"});
}

}  // namespace
