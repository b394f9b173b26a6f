// Shard format: round trips for both widths, every header error, the width-2
// limit, atomic writing, globbing, and TokenStream reads across shards;
// loss-mask shards (format, refusals, examples with unscored targets).
#include "data/shard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <random>

#include "core/check.h"

namespace fs = std::filesystem;

namespace {

// Runs f, which must throw gpt::Error; returns its message ("" if none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const gpt::Error& e) {
    return e.what();
  }
  return "";
}

void expect_contains(const std::string& msg, std::initializer_list<std::string> parts) {
  EXPECT_FALSE(msg.empty()) << "expected a gpt::Error";
  for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

// A file with the given header slots and `payload_bytes` zero bytes after them.
void write_raw(const std::string& path, int32_t magic, int32_t version, int32_t count, size_t payload_bytes) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic, header[1] = version, header[2] = count;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  const std::vector<char> zeros(payload_bytes, 0);
  out.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
}

std::vector<uint32_t> random_tokens(size_t n, uint32_t bound, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<uint32_t> t(n);
  for (auto& x : t) x = gen() % bound;
  return t;
}

std::vector<int32_t> read_all(const gpt::TokenStream& s) {
  std::vector<int32_t> out(s.size());
  s.read(0, s.size(), out.data());
  return out;
}

class ShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpt_shard_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  bool any_tmp_left() const {
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().extension() == ".tmp") return true;
    return false;
  }
  fs::path dir_;
};

TEST_F(ShardTest, RoundTripWidth2) {
  auto tokens = random_tokens(5000, 65536, 1);
  tokens[0] = 65535, tokens[1] = 0;
  const std::string p = path("a.bin");
  gpt::write_shard(p, tokens, 2);

  const gpt::ShardInfo info = gpt::read_shard_header(p);
  EXPECT_EQ(info.path, p);
  EXPECT_EQ(info.width, 2);
  EXPECT_EQ(info.ntokens, tokens.size());
  EXPECT_EQ(fs::file_size(p), 1024 + 2 * tokens.size());

  const std::vector<int32_t> back = read_all(gpt::TokenStream(p, 65536));
  ASSERT_EQ(back.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(static_cast<uint32_t>(back[i]), tokens[i]) << i;
  EXPECT_FALSE(any_tmp_left());
}

TEST_F(ShardTest, RoundTripWidth4) {
  auto tokens = random_tokens(3000, 200000, 2);
  tokens[0] = 65536, tokens[1] = 199999;
  const std::string p = path("b.bin");
  gpt::write_shard(p, tokens, 4);

  const gpt::ShardInfo info = gpt::read_shard_header(p);
  EXPECT_EQ(info.width, 4);
  EXPECT_EQ(info.ntokens, tokens.size());
  EXPECT_EQ(fs::file_size(p), 1024 + 4 * tokens.size());

  const std::vector<int32_t> back = read_all(gpt::TokenStream(p, 200000));
  ASSERT_EQ(back.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(static_cast<uint32_t>(back[i]), tokens[i]) << i;
  EXPECT_FALSE(any_tmp_left());
}

TEST_F(ShardTest, OverwriteReplacesShard) {
  const std::string p = path("c.bin");
  gpt::write_shard(p, {1, 2, 3, 4}, 2);
  gpt::write_shard(p, {9, 8}, 4);
  EXPECT_EQ(read_all(gpt::TokenStream(p, 10)), (std::vector<int32_t>{9, 8}));
  EXPECT_FALSE(any_tmp_left());
}

TEST_F(ShardTest, MissingFile) {
  const std::string p = path("nope.bin");
  expect_contains(error_of([&] { gpt::read_shard_header(p); }), {p, "cannot open"});
}

TEST_F(ShardTest, TruncatedHeader) {
  const std::string p = path("short.bin");
  std::ofstream(p, std::ios::binary) << std::string(100, 'x');
  expect_contains(error_of([&] { gpt::read_shard_header(p); }), {p, "100 bytes", "1024-byte header"});
}

TEST_F(ShardTest, WrongMagic) {
  const std::string p = path("magic.bin");
  write_raw(p, 12345, 1, 4, 8);
  expect_contains(error_of([&] { gpt::read_shard_header(p); }), {p, "magic 12345", "20240520", "20240801"});
}

TEST_F(ShardTest, WrongVersionForMagic) {
  const std::string p16 = path("v16.bin"), p32 = path("v32.bin");
  write_raw(p16, 20240520, 7, 4, 8);
  write_raw(p32, 20240801, 1, 4, 16);
  expect_contains(error_of([&] { gpt::read_shard_header(p16); }),
                  {p16, "version 7", "magic 20240520", "expected version 1"});
  expect_contains(error_of([&] { gpt::read_shard_header(p32); }),
                  {p32, "version 1", "magic 20240801", "expected version 7"});
}

TEST_F(ShardTest, ZeroTokenCount) {
  const std::string p = path("empty.bin");
  write_raw(p, 20240520, 1, 0, 0);
  expect_contains(error_of([&] { gpt::read_shard_header(p); }), {p, "token count 0", "> 0"});
}

TEST_F(ShardTest, SizeMismatch) {
  const std::string p2 = path("size2.bin"), p4 = path("size4.bin");
  write_raw(p2, 20240520, 1, 10, 14);  // needs 20 payload bytes
  write_raw(p4, 20240801, 7, 10, 44);  // needs 40
  expect_contains(error_of([&] { gpt::read_shard_header(p2); }), {p2, "1038 bytes", "= 1044 bytes"});
  expect_contains(error_of([&] { gpt::read_shard_header(p4); }), {p4, "1068 bytes", "= 1064 bytes"});
}

TEST_F(ShardTest, Width2RejectsLargeIds) {
  const std::string p = path("big.bin");
  expect_contains(error_of([&] { gpt::write_shard(p, {1, 65536, 3}, 2); }), {p, "65536", "position 1", "width 4"});
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(any_tmp_left());
}

TEST_F(ShardTest, WriteRejectsBadWidthAndEmpty) {
  const std::string p = path("bad.bin");
  expect_contains(error_of([&] { gpt::write_shard(p, {1}, 3); }), {p, "width 3", "2 or 4"});
  expect_contains(error_of([&] { gpt::write_shard(p, {}, 2); }), {p, "no tokens"});
  EXPECT_FALSE(fs::exists(p));
}

TEST_F(ShardTest, WriteIntoMissingFolderFails) {
  const std::string p = path("no/such/dir/x.bin");
  expect_contains(error_of([&] { gpt::write_shard(p, {1}, 2); }), {p, "cannot create"});
}

TEST_F(ShardTest, GlobSortsAndNamesPatternWhenEmpty) {
  for (const char* name : {"d_train_000002.bin", "d_val_000000.bin", "d_train_000001.bin"})
    gpt::write_shard(path(name), {1}, 2);
  const auto files = gpt::glob_files(path("d_train_*.bin"));
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0], path("d_train_000001.bin"));
  EXPECT_EQ(files[1], path("d_train_000002.bin"));
  const std::string pattern = path("x_*.bin");
  expect_contains(error_of([&] { gpt::glob_files(pattern); }), {pattern, "no file matches"});
}

TEST_F(ShardTest, StreamReadsAcrossShardBoundaries) {
  // Three shards of 5, 7 and 3 tokens, mixing widths; token value = stream position.
  std::vector<uint32_t> a{0, 1, 2, 3, 4}, b{5, 6, 7, 8, 9, 10, 11}, c{12, 13, 14};
  gpt::write_shard(path("s_1.bin"), a, 2);
  gpt::write_shard(path("s_2.bin"), b, 4);
  gpt::write_shard(path("s_3.bin"), c, 2);
  const gpt::TokenStream s(path("s_*.bin"), 100);
  ASSERT_EQ(s.size(), 15u);
  ASSERT_EQ(s.shards().size(), 3u);
  EXPECT_EQ(s.shards()[1].width, 4);

  for (uint64_t off = 0; off < 15; ++off)
    for (uint64_t n = 0; off + n <= 15; ++n) {
      std::vector<int32_t> out(n, -1);
      s.read(off, n, out.data());
      for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<int32_t>(off + i)) << off << "+" << i;
    }
  int32_t x;
  EXPECT_THROW(s.read(15, 1, &x), gpt::Error);
  EXPECT_THROW(s.read(10, 6, &x), gpt::Error);
}

TEST_F(ShardTest, StreamRejectsIdsOutsideVocab) {
  gpt::write_shard(path("v_1.bin"), {1, 2, 3}, 2);
  gpt::write_shard(path("v_2.bin"), {4, 5, 6, 256, 257, 8}, 2);  // 257 is the first id outside vocab 257
  const gpt::TokenStream s(path("v_*.bin"), 257);
  std::vector<int32_t> out(9);
  s.read(0, 7, out.data());  // stops before the bad id: fine
  EXPECT_EQ(out[6], 256);
  expect_contains(error_of([&] { s.read(2, 6, out.data()); }),
                  {path("v_2.bin"), "token id 257", "position 4", "vocabulary size 257"});
}

TEST_F(ShardTest, StreamValidatesEveryHeader) {
  gpt::write_shard(path("h_1.bin"), {1, 2, 3}, 2);
  write_raw(path("h_2.bin"), 20240520, 1, 5, 4);
  expect_contains(error_of([&] { gpt::TokenStream(path("h_*.bin"), 10); }), {path("h_2.bin"), "file size"});
}

// Loss masks: the mask of s_k.bin is s_k.mask; byte i scores token i as a target.
TEST_F(ShardTest, MaskPathSitsBesideTheShard) {
  EXPECT_EQ(gpt::mask_path_for("d/x_train_000001.bin"), "d/x_train_000001.mask");
  EXPECT_EQ(gpt::mask_path_for("d/tokens"), "d/tokens.mask");
  EXPECT_EQ(gpt::mask_path_for(".bin"), ".bin.mask");
}

TEST_F(ShardTest, MaskedExamplesAcrossShardBoundaries) {
  // Two shards of 5 and 7 tokens (value = stream position); token i is scored
  // as a target iff i % 3 != 0.
  std::vector<uint32_t> a{0, 1, 2, 3, 4}, b{5, 6, 7, 8, 9, 10, 11};
  gpt::write_shard(path("s_1.bin"), a, 2);
  gpt::write_shard(path("s_2.bin"), b, 4);
  auto mask_of = [](const std::vector<uint32_t>& t) {
    std::vector<uint8_t> m;
    for (uint32_t x : t) m.push_back(x % 3 != 0);
    return m;
  };
  gpt::write_mask_shard(path("s_1.mask"), mask_of(a));
  gpt::write_mask_shard(path("s_2.mask"), mask_of(b));
  EXPECT_FALSE(any_tmp_left());
  const gpt::TokenStream s(path("s_*.bin"), 100);
  ASSERT_TRUE(s.has_masks());
  for (uint64_t off = 0; off < 12; ++off)
    for (uint64_t n = 0; off + n + 1 <= 12; ++n) {
      std::vector<int32_t> in(n, -7), tg(n, -7);
      const uint64_t scored = s.read_example(off, n, in.data(), tg.data());
      uint64_t expect_scored = 0;
      for (uint64_t i = 0; i < n; ++i) {
        const int32_t next = static_cast<int32_t>(off + i + 1);
        ASSERT_EQ(in[i], static_cast<int32_t>(off + i));
        ASSERT_EQ(tg[i], next % 3 != 0 ? next : gpt::kIgnoreTarget) << off << "+" << i;
        expect_scored += next % 3 != 0;
      }
      EXPECT_EQ(scored, expect_scored);
    }
  // A slice keeps the masks of its tokens.
  const gpt::TokenStream t = s.slice(4, 12);
  ASSERT_TRUE(t.has_masks());
  std::vector<uint8_t> m(8);
  t.read_mask(0, 8, m.data());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(m[i], (4 + i) % 3 != 0) << i;
  // Without masks every target is scored.
  gpt::write_shard(path("u_1.bin"), a, 2);
  const gpt::TokenStream u(path("u_*.bin"), 100);
  EXPECT_FALSE(u.has_masks());
  std::vector<int32_t> in(4), tg(4);
  EXPECT_EQ(u.read_example(0, 4, in.data(), tg.data()), 4u);
  EXPECT_EQ(tg, (std::vector<int32_t>{1, 2, 3, 4}));
}

TEST_F(ShardTest, MaskRefusals) {
  gpt::write_shard(path("m_1.bin"), {1, 2, 3}, 2);
  gpt::write_shard(path("m_2.bin"), {4, 5, 6, 7}, 2);
  // Some shards with a mask and some without.
  gpt::write_mask_shard(path("m_1.mask"), {1, 0, 1});
  expect_contains(error_of([&] { gpt::TokenStream(path("m_*.bin"), 10); }),
                  {"1 of 2", path("m_2.bin"), path("m_2.mask"), "every shard a mask or none"});
  // A mask of the wrong length.
  gpt::write_mask_shard(path("m_2.mask"), {1, 1, 1});
  expect_contains(error_of([&] { gpt::TokenStream(path("m_*.bin"), 10); }),
                  {path("m_2.mask"), "holds 3 entries", "holds 4 tokens"});
  // Not a mask, a bad version, a size that is not the header's.
  write_raw(path("m_2.mask"), 20240520, 1, 4, 8);
  expect_contains(error_of([&] { gpt::TokenStream(path("m_*.bin"), 10); }),
                  {path("m_2.mask"), "magic 20240520", "not a loss-mask shard"});
  write_raw(path("m_2.mask"), 20261202, 2, 4, 4);
  expect_contains(error_of([&] { gpt::TokenStream(path("m_*.bin"), 10); }), {path("m_2.mask"), "version 2"});
  write_raw(path("m_2.mask"), 20261202, 1, 4, 5);
  expect_contains(error_of([&] { gpt::TokenStream(path("m_*.bin"), 10); }), {path("m_2.mask"), "file size"});
  // A byte other than 0 or 1 is found when it is read.
  write_raw(path("m_2.mask"), 20261202, 1, 4, 0);
  {
    std::ofstream out(path("m_2.mask"), std::ios::binary | std::ios::app);
    const char bytes[4] = {1, 1, 2, 1};
    out.write(bytes, 4);
  }
  const gpt::TokenStream s(path("m_*.bin"), 10);
  std::vector<int32_t> in(6), tg(6);
  expect_contains(error_of([&] { s.read_example(0, 6, in.data(), tg.data()); }),
                  {path("m_2.mask"), "entry 2 is 2", "0 or 1"});
  // Writing: only 0 and 1, at least one entry; a mask named as a token shard.
  expect_contains(error_of([&] { gpt::write_mask_shard(path("w.mask"), {0, 3}); }), {"entry 1 is 3"});
  expect_contains(error_of([&] { gpt::write_mask_shard(path("w.mask"), {}); }), {"no entries"});
  expect_contains(error_of([&] { gpt::TokenStream(path("m_1.mask"), 10); }), {path("m_1.mask"), "is a loss mask"});
}

}  // namespace
