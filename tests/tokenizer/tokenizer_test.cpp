// The tokenizer interface: the byte tokenizer, specs, special tokens, and
// parallel encoding that matches serial encoding for any thread count.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <random>

#include "core/check.h"
#include "data/text_to_shards.h"
#include "tokenizer/parallel_encode.h"
#include "tokenizer/tokenizer_test_util.h"

namespace gpt {
namespace {

TEST(ByteLevel, KeepsTheOldIds) {
  const auto tok = make_tokenizer("byte");
  EXPECT_EQ(tok->spec(), "byte");
  EXPECT_EQ(tok->vocab_size(), 257u);
  EXPECT_EQ(tok->end_of_text(), 256u);
  const std::string s("a\xff\n\0z<|endoftext|>", 18);
  const ByteTokenizer old;  // the tokenizer existing datasets were made with
  EXPECT_EQ(tok->encode(s), old.encode(s));
  std::vector<uint32_t> special = tok->encode(s, true);
  EXPECT_EQ(special, (std::vector<uint32_t>{'a', 255, '\n', 0, 'z', 256}));
  EXPECT_EQ(tok->decode(special), s);
  EXPECT_THROW(tok->decode(std::vector<uint32_t>{257}), Error);
}

TEST(ByteLevel, RoundTripsRandomBytes) {
  const auto tok = make_tokenizer("byte");
  std::mt19937 rng(1);
  for (int i = 0; i < 100; ++i) {
    std::string s(rng() % 100, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    ASSERT_EQ(tok->decode(tok->encode(s)), s);
  }
}

TEST(MakeTokenizer, BadSpecsSayWhatIsAllowed) {
  for (const std::string& spec : std::vector<std::string>{"", "gpt2", "bytes", "/no/such/vocab.bpe"}) {
    try {
      make_tokenizer(spec);
      ADD_FAILURE() << "no error for '" << spec << "'";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("'" + spec + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("byte"), std::string::npos) << msg;
      EXPECT_NE(msg.find("gpt2:DIR"), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(make_tokenizer("gpt2:"), Error);
}

TEST(ParallelEncode, SameIdsForAnyThreadCount) {
  ASSERT_TRUE(test::have_gpt2_dir()) << test::gpt2_dir();
  const auto tok = make_tokenizer("gpt2:" + test::gpt2_dir());
  // About 3 MB: several 1 MB work items, lines ending in letters (cut points)
  // and runs of blank lines and spaces (no cut points) mixed.
  std::mt19937 rng(2);
  std::string text;
  while (text.size() < (size_t{3} << 20)) text += test::random_text(rng, 10) + (rng() % 4 ? "x\n" : "\n\n  ");
  const std::vector<TextSpan> spans = {
      {0, 1000, true}, {1000, 1000, true}, {1000, 2'500'000, false}, {2'500'000, text.size(), true}};
  std::vector<uint32_t> serial;
  for (const TextSpan& s : spans) {
    if (s.end_of_text_before) serial.push_back(tok->end_of_text());
    tok->encode_ordinary(std::string_view(text).substr(s.begin, s.end - s.begin), serial);
  }
  const int saved = omp_get_max_threads();
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    uint64_t last = 0;
    const auto ids = encode_spans(*tok, text, spans, [&](uint64_t done, uint64_t total) {
      EXPECT_GT(done, last);
      EXPECT_EQ(total, text.size());
      last = done;
    });
    EXPECT_EQ(ids, serial) << threads << " threads";
    EXPECT_EQ(last, text.size());
  }
  omp_set_num_threads(saved);
}

TEST(ParallelEncode, SpansAroundEndOfText) {
  const auto tok = make_tokenizer("byte");
  const std::string text = "ab<|endoftext|><|endoftext|>c";
  const auto spans = spans_around_end_of_text(text);
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(encode_spans(*tok, text, spans), (std::vector<uint32_t>{'a', 'b', 256, 256, 'c'}));
  EXPECT_EQ(encode_spans(*tok, text, spans), tok->encode(text, true));
}

}  // namespace
}  // namespace gpt
