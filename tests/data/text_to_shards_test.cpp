// Text to shards: round trip, the line-boundary cut, shard splitting, errors.
#include "data/text_to_shards.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>

#include "core/check.h"
#include "data/shard.h"

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
    dir_ = fs::temp_directory_path() /
           ("gpt_tts_test_" + std::to_string(::getpid()) + "_" +
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
  EXPECT_EQ(val_part(text, 0.3), "dddd\n");        // 6 bytes start mid-line "c\n": moved past it
  EXPECT_EQ(val_part(text, 0.25), "dddd\n");       // 5 bytes already start a line
  EXPECT_EQ(val_part(text, 0.5), "cccc\ndddd\n");  // 10 bytes already start a line
  EXPECT_EQ(val_part(text, 0.6), "cccc\ndddd\n");  // 12 bytes start "b\n": moved past it
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
  expect_error_with([&] { gpt::text_to_shards(in, (dir_ / "out").string(), opt); },
                    {in, "validation part empty"});
}

TEST_F(TextToShardsTest, UnknownTokenizer) {
  gpt::TextToShardsOptions opt;
  opt.tokenizer = "gpt2";
  expect_error_with([&] { gpt::text_to_shards(write_text("abc\n"), (dir_ / "out").string(), opt); },
                    {"'gpt2'", "allowed: byte"});
}

}  // namespace
