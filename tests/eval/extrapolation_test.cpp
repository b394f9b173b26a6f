// evaluate_extrapolation against a brute-force loop over the same sequences.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <numeric>

#include "core/check.h"
#include "data/shard.h"
#include "eval/extrapolation.h"
#include "model/gpt.h"
#include "tokenizer/bpe_train.h"
#include "tokenizer/tokenizer.h"
#include "../tokenizer/tokenizer_test_util.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

class Extrapolation : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpt_extrap_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    cfg_.n_layer = 1;
    cfg_.n_head = 2;
    cfg_.n_embd = 8;
    cfg_.vocab_size = 257;
    cfg_.context = 4;
    cfg_.init_std = 0.5;  // a model that is far from uniform, so positions differ
    model_ = std::make_unique<GPT<float>>(cfg_, AttentionSpec{}, *be_);
    model_->init(2);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_val(size_t n) {
    tokens_.resize(n);
    for (size_t i = 0; i < n; ++i) tokens_[i] = static_cast<uint32_t>((i * 131 + i / 7) % 257);
    const std::string path = (dir_ / ("val_" + std::to_string(n) + ".bin")).string();
    write_shard(path, tokens_, 2);
    return path;
  }

  // Mean loss over sequences of length L starting at `starts`, one at a time.
  std::vector<float> losses_at(uint64_t start, int L) {
    std::vector<int32_t> in(L), tg(L);
    for (int t = 0; t < L; ++t) in[t] = tokens_[start + t], tg[t] = tokens_[start + t + 1];
    std::vector<float> losses;
    model_->forward_losses(in.data(), tg.data(), 1, L, losses);
    return losses;
  }

  // Sum and count of the losses of the chunks of L tokens that fill `tokens`,
  // over the positions t of chunk s that scored(s, t) keeps.
  std::pair<double, int> chunk_losses(int L, int tokens, const std::function<bool(int, int)>& scored) {
    double sum = 0;
    int n = 0;
    for (int s = 0; s < tokens / L; ++s) {
      const auto l = losses_at(static_cast<uint64_t>(s) * L, L);
      for (int t = 0; t < L; ++t)
        if (scored(s, t)) sum += l[t], ++n;
    }
    return {sum, n};
  }

  fs::path dir_;
  ModelConfig cfg_;
  std::unique_ptr<Backend<float>> be_ = make_cpu_backend<float>();
  std::unique_ptr<GPT<float>> model_;
  std::vector<uint32_t> tokens_;
};

// llama.cpp's perplexity protocol (its examples/perplexity: non-overlapping
// chunks of n_ctx, the logits of positions n_ctx/2 .. n_ctx − 2 scored, each
// predicting a token inside its chunk): the same chunks as `chunks`, fewer
// positions.
TEST_F(Extrapolation, LlamaCppProtocolScoresTheSecondHalfOfEachChunk) {
  TokenStream val(write_val(65), 257);
  EvalConfig ec;
  ec.multiples = {1, 2, 4};
  ec.tokens = 64;
  ec.protocol = "llamacpp";
  const ExtrapolationResult r = evaluate_extrapolation(*model_, val, ec, 4, 8);
  for (const MultipleResult& row : r.rows) {
    const int L = 4 * row.multiple;
    const auto [sum, n] = chunk_losses(L, 64, [L](int, int t) { return t >= L / 2 && t <= L - 2; });
    EXPECT_EQ(row.tokens, n) << row.multiple;
    EXPECT_NEAR(row.loss, sum / n, 1e-5) << row.multiple;
  }
  EXPECT_EQ(r.to_json()["scored"]["protocol"], "llamacpp");
}

TEST_F(Extrapolation, MatchesBruteForceOnContiguousWindows) {
  // 4 windows of the longest context (4x4 = 16 tokens) fill 64 tokens + 1.
  TokenStream val(write_val(65), 257);
  EvalConfig ec;
  ec.multiples = {1, 2, 4};
  ec.tokens = 64;
  ec.profile_buckets = 2;
  const ExtrapolationResult r = evaluate_extrapolation(*model_, val, ec, 4, 8);
  ASSERT_EQ(r.rows.size(), 3u);
  EXPECT_EQ(r.tokens_per_multiple, 64);
  for (const MultipleResult& row : r.rows) {
    // Diagnostics cover every scored row of every layer and head: (L, NH, stats).
    const int L = r.n_layer, NH = r.n_head;
    ASSERT_EQ(row.attention_diag.size(), static_cast<size_t>(L) * NH * kAttentionDiagStats);
    for (int i = 0; i < L * NH; ++i) {
      const double* d = &row.attention_diag[static_cast<size_t>(i) * kAttentionDiagStats];
      EXPECT_EQ(d[4], 64.0) << "rows counted";
      EXPECT_NEAR(d[3], 64.0, 1e-3) << "softmax rows sum to 1";
      EXPECT_GT(d[0], 0.0) << "entropy";
      EXPECT_LE(d[1], d[4]) << "sink share <= 1 per row";
    }
  }
  for (const MultipleResult& row : r.rows) {
    const int L = 4 * row.multiple;
    EXPECT_EQ(row.tokens, 64) << "every multiple scores the same tokens";
    double sum = 0, past = 0, first_half = 0;
    int n_past = 0;
    for (int s = 0; s < 64 / L; ++s) {
      const auto l = losses_at(static_cast<uint64_t>(s) * L, L);
      for (int t = 0; t < L; ++t) {
        sum += l[t];
        if (t >= 4) past += l[t], ++n_past;
        if (t < L / 2) first_half += l[t];
      }
    }
    EXPECT_NEAR(row.loss, sum / 64, 1e-5) << row.multiple;
    if (row.multiple == 1)
      EXPECT_TRUE(std::isnan(row.loss_past_train));
    else
      EXPECT_NEAR(row.loss_past_train, past / n_past, 1e-5) << row.multiple;
    ASSERT_EQ(row.profile.size(), 2u);
    EXPECT_NEAR(row.profile[0], first_half / 32, 1e-5) << row.multiple;
    EXPECT_NEAR((row.profile[0] + row.profile[1]) / 2, row.loss, 1e-5) << row.multiple;
  }
  // The JSON carries the same figures, with null for "past T" at 1x.
  const auto j = r.to_json();
  EXPECT_TRUE(j["multiples"][0]["loss_past_train"].is_null());
  EXPECT_EQ(j["multiples"][2]["profile"][1]["start"], 8);
}

// With a loss mask on the validation shard, each multiple's loss is the mean
// over the scored targets only (brute force: the unmasked per-position losses
// of the same sequences, kept where the mask byte of the target is 1).
TEST_F(Extrapolation, LossMasksLeaveUnscoredTargetsOut) {
  const std::string path = write_val(65);
  std::vector<uint8_t> mask(65);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = (i * 7) % 5 < 2;  // 2 in 5 scored, spread unevenly
  write_mask_shard(mask_path_for(path), mask);
  TokenStream val(path, 257);
  ASSERT_TRUE(val.has_masks());
  EvalConfig ec;
  ec.multiples = {1, 2, 4};
  ec.tokens = 64;
  const ExtrapolationResult r = evaluate_extrapolation(*model_, val, ec, 4, 8);
  for (const MultipleResult& row : r.rows) {
    const int L = 4 * row.multiple;
    const auto [sum, n] =
        chunk_losses(L, 64, [&](int s, int t) { return mask[static_cast<size_t>(s) * L + t + 1] != 0; });
    ASSERT_GT(n, 0);
    EXPECT_LT(n, 64);
    EXPECT_EQ(row.tokens, n) << row.multiple;
    EXPECT_NEAR(row.loss, sum / n, 1e-5) << row.multiple;
  }
}

TEST_F(Extrapolation, WindowsSpreadOverTheWholeStream) {
  // 1001 tokens, 4 windows of 16: windows start every 250 tokens.
  TokenStream val(write_val(1001), 257);
  EvalConfig ec;
  ec.multiples = {1, 4};
  ec.tokens = 64;
  ec.span = 16;
  const ExtrapolationResult r = evaluate_extrapolation(*model_, val, ec, 4, 64);
  EXPECT_EQ(r.layout.starts, (std::vector<uint64_t>{0, 250, 500, 750}));
  double sum = 0;
  for (int w = 0; w < 4; ++w) {
    const auto l = losses_at(static_cast<uint64_t>(w) * 250, 16);
    sum += std::accumulate(l.begin(), l.end(), 0.0);
  }
  EXPECT_NEAR(r.rows[1].loss, sum / 64, 1e-5);
}

TEST_F(Extrapolation, WindowsOfAMaskedStreamStartAtMultiplesOfTheContext) {
  // The same 1001 tokens with a loss mask: every 250 tokens rounds down to
  // every 248 (a multiple of T = 4), where synthetic examples begin.
  const std::string path = write_val(1001);
  write_mask_shard(mask_path_for(path), std::vector<uint8_t>(1001, 1));
  TokenStream val(path, 257);
  EvalConfig ec;
  ec.multiples = {1, 4};
  ec.tokens = 64;
  ec.span = 16;
  const ExtrapolationResult r = evaluate_extrapolation(*model_, val, ec, 4, 64);
  EXPECT_EQ(r.layout.starts, (std::vector<uint64_t>{0, 248, 496, 744}));
  // A span that is not a multiple of T keeps its windows apart: 5 tokens
  // occupy 8, so 1000 / 8 = 125 windows, every 8 tokens.
  ec.span = 5;
  ec.multiples = {1};
  ec.tokens = 5000;
  const ExtrapolationResult odd = evaluate_extrapolation(*model_, val, ec, 4, 64);
  ASSERT_EQ(odd.layout.starts.size(), 125u);
  for (size_t k = 0; k < odd.layout.starts.size(); ++k) EXPECT_EQ(odd.layout.starts[k], 8 * k);
  // A stream that holds the span but not its rounded-up room: one window.
  const std::string short_path = write_val(7);
  write_mask_shard(mask_path_for(short_path), std::vector<uint8_t>(7, 1));
  ec.tokens = 5;
  const ExtrapolationResult one = evaluate_extrapolation(*model_, TokenStream(short_path, 257), ec, 4, 64);
  EXPECT_EQ(one.layout.starts, (std::vector<uint64_t>{0}));
}

TEST_F(Extrapolation, NonDividingMultipleScoresWholeSequencesPerWindow) {
  TokenStream val(write_val(65), 257);
  EvalConfig ec;
  ec.multiples = {3, 4};
  ec.tokens = 64;
  ec.span = 16;
  const ExtrapolationResult r = evaluate_extrapolation(*model_, val, ec, 4, 64);
  EXPECT_EQ(r.rows[0].tokens, 4 * 12);  // one 12-token sequence per 16-token window
  EXPECT_EQ(r.rows[1].tokens, 64);
}

TEST_F(Extrapolation, InfeasibleRequestsNameTheirCause) {
  TokenStream val(write_val(65), 257);
  EvalConfig ec;
  ec.multiples = {1, 32};  // one sequence is 128 tokens
  ec.tokens = 1 << 20;
  try {
    evaluate_extrapolation(*model_, val, ec, 4, 64);  // the default span is 16 * 4 = 64
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit in the scored window eval.span = 64"), std::string::npos)
        << e.what();
  }
  ec.span = 128;
  try {
    evaluate_extrapolation(*model_, val, ec, 4, 64);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("validation data has 65 tokens"), std::string::npos) << e.what();
  }
  ec.tokens = 96;
  try {
    check_eval_feasible(1 << 20, ec, 4);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("eval.tokens = 96 is less than one scored window"), std::string::npos)
        << e.what();
  }
}

// The scored set depends on the span, never on the multiples asked.
TEST_F(Extrapolation, OneMultipleScoresTheSameTokensWhateverElseIsAsked) {
  TokenStream val(write_val(1001), 257);
  EvalConfig a, b;
  a.multiples = {1};
  b.multiples = {1, 2, 4};
  a.tokens = b.tokens = 128;
  const ExtrapolationResult ra = evaluate_extrapolation(*model_, val, a, 4, 64);
  const ExtrapolationResult rb = evaluate_extrapolation(*model_, val, b, 4, 64);
  EXPECT_EQ(ra.layout.to_json(), rb.layout.to_json());
  EXPECT_EQ(ra.rows[0].loss, rb.rows[0].loss);
  EXPECT_EQ(ra.rows[0].window_losses, rb.rows[0].window_losses);
}

// Standard error: the windows' sample sd over √K (every window scores the
// same number of tokens), computed here from the windows' own brute-force losses.
TEST_F(Extrapolation, StandardErrorOverTheWindows) {
  TokenStream val(write_val(1001), 257);
  EvalConfig ec;
  ec.multiples = {1, 2};
  ec.tokens = 80;
  ec.span = 16;  // 5 windows, every 200 tokens
  ec.profile_buckets = 2;
  const ExtrapolationResult r = evaluate_extrapolation(*model_, val, ec, 4, 64);
  for (const MultipleResult& row : r.rows) {
    const int L = row.context;
    std::vector<double> w;
    std::vector<std::vector<double>> half(2);
    for (int k = 0; k < 5; ++k) {
      double s = 0, h[2] = {0, 0};
      for (int j = 0; j < 16; j += L) {
        const auto l = losses_at(static_cast<uint64_t>(k) * 200 + j, L);
        for (int t = 0; t < L; ++t) s += l[t], h[t * 2 / L] += l[t];
      }
      w.push_back(s / 16);
      half[0].push_back(h[0] / 8), half[1].push_back(h[1] / 8);
    }
    auto se = [](const std::vector<double>& x) {
      double m = 0, ss = 0;
      for (double v : x) m += v / x.size();
      for (double v : x) ss += (v - m) * (v - m);
      return std::sqrt(ss / (x.size() - 1) / x.size());
    };
    ASSERT_EQ(row.window_losses.size(), 5u);
    for (int k = 0; k < 5; ++k) EXPECT_NEAR(row.window_losses[k], w[k], 1e-5);
    EXPECT_NEAR(row.loss_se, se(w), 1e-6) << L;
    EXPECT_GT(row.loss_se, 0.0);
    EXPECT_NEAR(row.profile_se[0], se(half[0]), 1e-6);
    EXPECT_NEAR(row.profile_se[1], se(half[1]), 1e-6);
  }
  // One window: no standard error (null in the JSON, "-" in the table).
  ec.tokens = 16;
  const ExtrapolationResult one = evaluate_extrapolation(*model_, val, ec, 4, 64);
  EXPECT_TRUE(std::isnan(one.rows[0].loss_se));
  EXPECT_TRUE(one.to_json()["multiples"][0]["loss_se"].is_null());
}

TEST(RatioStandardError, MatchesTheRatioEstimatorFormula) {
  // Units with unequal denominators: sqrt(sum (n_k - R d_k)^2 / (K (K - 1))) / mean(d).
  const std::vector<double> num = {3, 5, 2, 7}, den = {2, 4, 1, 5};
  const double R = 17.0 / 12.0, dbar = 3.0;
  double ss = 0;
  for (int k = 0; k < 4; ++k) ss += std::pow(num[k] - R * den[k], 2);
  EXPECT_NEAR(ratio_standard_error(num, den), std::sqrt(ss / 12.0) / dbar, 1e-12);
  EXPECT_TRUE(std::isnan(ratio_standard_error({1}, {1})));
  EXPECT_TRUE(std::isnan(ratio_standard_error({1, 2}, {1, 0})));  // a unit with nothing scored is left out
}

// Sliding windows, checked against the protocol's definition written out here:
// window k covers stream positions [p, p + W), scored in blocks of S from p,
// each block as the last positions of the sequence of L that ends with it;
// the stream's first L tokens (the only place a sequence cannot reach back)
// are one sequence [0, L) scored whole, the blocks following it.
TEST_F(Extrapolation, SlidingScoresEveryTokenOnceWithAtLeastLMinusSContext) {
  TokenStream val(write_val(1001), 257);
  EvalConfig ec;
  ec.multiples = {1, 2, 4};
  ec.tokens = 64;
  ec.span = 16;  // 4 windows, every 250 tokens; the first at the stream's start
  ec.protocol = "sliding";
  ec.stride = 3;
  const ExtrapolationResult r = evaluate_extrapolation(*model_, val, ec, 4, 64);
  EXPECT_EQ(r.layout.to_json()["stride"], 3);
  for (const MultipleResult& row : r.rows) {
    const int L = row.context;
    const int S = std::min(3, L);
    double sum = 0;
    int64_t scored = 0;
    for (int k = 0; k < 4; ++k) {
      const int64_t p = 250 * k;
      for (int64_t q = p; q < p + 16; ++q) {
        // The stream's first L tokens are one sequence, scored whole; the
        // blocks of S follow it.
        int64_t ws = 0;
        if (!(p == 0 && q < L)) {
          const int64_t base = p == 0 ? L : p;
          const int64_t e = std::min(base + ((q - base) / S + 1) * S, p + 16);
          ws = e - L;
        }
        EXPECT_TRUE(q - ws >= L - S || ws == 0) << "context of position " << q << " at L = " << L;
        sum += losses_at(static_cast<uint64_t>(ws), L)[q - ws];
        ++scored;
      }
    }
    EXPECT_EQ(row.tokens, 64) << "every token of the span, once";
    EXPECT_NEAR(row.loss, sum / scored, 1e-5) << L;
  }
  // The pieces themselves: every window position exactly once, nothing else.
  for (int L : {4, 8, 16}) {
    std::map<uint64_t, int> seen;
    for (const EvalPiece& pc : eval_pieces(r.layout, L)) {
      EXPECT_LE(pc.hi, L);
      EXPECT_TRUE(pc.lo >= L - 3 || pc.start == 0) << L;
      for (int t = pc.lo; t < pc.hi; ++t) ++seen[pc.start + t];
    }
    EXPECT_EQ(seen.size(), 64u);
    for (const auto& [pos, n] : seen) {
      EXPECT_EQ(n, 1) << pos;
      EXPECT_LT(pos % 250, 16u) << pos;
    }
  }
}

TEST_F(Extrapolation, SlidingWithStrideEqualToTheContextEqualsChunks) {
  TokenStream val(write_val(1001), 257);
  for (int m : {1, 2, 4}) {
    EvalConfig chunks;
    chunks.multiples = {m};
    chunks.tokens = 64;
    chunks.span = 16;
    EvalConfig sliding = chunks;
    sliding.protocol = "sliding";
    sliding.stride = 4 * m;
    const ExtrapolationResult a = evaluate_extrapolation(*model_, val, chunks, 4, 64);
    const ExtrapolationResult b = evaluate_extrapolation(*model_, val, sliding, 4, 64);
    EXPECT_EQ(a.rows[0].loss, b.rows[0].loss) << m;
    EXPECT_EQ(a.rows[0].window_losses, b.rows[0].window_losses) << m;
    EXPECT_EQ(a.rows[0].profile, b.rows[0].profile) << m;
    EXPECT_EQ(a.rows[0].sequences, b.rows[0].sequences) << m;
  }
}

// Documents: a stream of end-of-text-opened documents of known lengths.
TEST_F(Extrapolation, DocumentsOpenWindowsAtSeparatorsAndKeepOnlyWholeSpans) {
  const std::vector<int> lengths = {5, 20, 16, 40, 15, 17, 3};  // tokens after each separator
  tokens_.clear();
  std::vector<uint64_t> seps;
  for (int n : lengths) {
    seps.push_back(tokens_.size());
    tokens_.push_back(256);
    for (int i = 0; i < n; ++i) tokens_.push_back(static_cast<uint32_t>((tokens_.size() * 37) % 256));
  }
  const std::string path = (dir_ / "docs.bin").string();
  write_shard(path, tokens_, 2);
  TokenStream val(path, 257);
  EvalConfig ec;
  ec.multiples = {1, 2, 4};
  ec.tokens = 64;
  ec.span = 16;
  ec.protocol = "documents";
  EvalText text;
  text.separator = 256;
  const ExtrapolationResult r = evaluate_extrapolation(*model_, val, ec, 4, 64, &text);
  // Exactly the documents of >= 16 tokens: the 2nd, 3rd, 4th and 6th.
  EXPECT_EQ(r.layout.documents, 4);
  EXPECT_EQ(r.layout.starts, (std::vector<uint64_t>{seps[1], seps[2], seps[3], seps[5]}));
  for (uint64_t s : r.layout.starts)
    for (uint64_t q = s + 1; q <= s + 16; ++q) EXPECT_NE(tokens_[q], 256u) << "a window crosses a separator at " << q;
  for (const MultipleResult& row : r.rows) {
    double sum = 0;
    for (uint64_t s : r.layout.starts)
      for (int j = 0; j < 16; j += row.context) {
        const auto l = losses_at(s + j, row.context);
        sum += std::accumulate(l.begin(), l.end(), 0.0);
      }
    EXPECT_NEAR(row.loss, sum / 64, 1e-5) << row.multiple;
  }
  // Two documents asked of three: spread over them.
  ec.tokens = 32;
  EXPECT_EQ(eval_layout(val, ec, 4, 256).starts, (std::vector<uint64_t>{seps[1], seps[3]}));
  // Too few: the error says how many qualify.
  ec.tokens = 80;
  try {
    eval_layout(val, ec, 4, 256);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has 4 document(s) of at least eval.span = 16 tokens"), std::string::npos)
        << e.what();
  }
  try {
    eval_layout(val, ec, 4, -1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs the end-of-text id"), std::string::npos) << e.what();
  }
}

// Bits per byte: total nats / (ln 2 · bytes of the scored targets), the bytes
// counted here by hand from the tokenizer's pieces.
TEST_F(Extrapolation, BitsPerByteFromTheScoredTargetsBytes) {
  // The byte tokenizer: every id but end-of-text is one byte.
  const EvalText bytes = eval_text("byte", 257);
  EXPECT_EQ(bytes.separator, 256);
  EXPECT_EQ(bytes.bytes[65], 1u);
  EXPECT_EQ(bytes.bytes[256], 0u);
  TokenStream val(write_val(1001), 257);
  EvalConfig ec;
  ec.multiples = {1, 2};
  ec.tokens = 64;
  ec.span = 16;
  const ExtrapolationResult r = evaluate_extrapolation(*model_, val, ec, 4, 64, &bytes);
  int64_t n_bytes = 0;
  for (int k = 0; k < 4; ++k)
    for (int q = 1; q <= 16; ++q) n_bytes += tokens_[250 * k + q] == 256 ? 0 : 1;
  for (const MultipleResult& row : r.rows) {
    EXPECT_EQ(row.bytes, n_bytes);
    EXPECT_NEAR(row.bits_per_byte, row.loss * 64 / (std::log(2.0) * n_bytes), 1e-9);
    EXPECT_GT(row.bits_per_byte_se, 0.0);
  }
  EXPECT_THROW(eval_text("byte", 300), Error);  // not the shards' tokenizer

  // A trained BPE: the pieces' bytes add up to the text ("hello world" by hand: 11 bytes).
  const std::string text = "hello world hello hello world";
  const std::string file = (dir_ / "tok.bpe").string();
  write_bpe_file(file, train_bpe(text, 300).merges);
  const auto tok = make_tokenizer(file);
  const EvalText bpe = eval_text(*tok);
  const std::vector<uint32_t> ids = tok->encode("hello world");
  EXPECT_LT(ids.size(), 11u) << "merged pieces";
  uint64_t sum = 0;
  for (uint32_t id : ids) sum += bpe.bytes[id];
  EXPECT_EQ(sum, 11u);
  EXPECT_EQ(bpe.bytes[tok->end_of_text()], 0u);

  // GPT-2's vocabulary (where its files are: CI has them in shared/).
  if (!test::have_gpt2_dir()) GTEST_SKIP() << "GPT-2 vocabulary not found in " << test::gpt2_dir();
  const EvalText g = eval_text("gpt2:" + test::gpt2_dir(), 50257);
  EXPECT_EQ(g.separator, 50256);
  EXPECT_EQ(g.bytes[50256], 0u);
  const auto gtok = make_tokenizer("gpt2:" + test::gpt2_dir());
  const std::string words = "Hello world, the bits per byte of caf\xc3\xa9!";  // 40 bytes, é is 2
  uint64_t gsum = 0;
  for (uint32_t id : gtok->encode(words)) gsum += g.bytes[id];
  EXPECT_EQ(gsum, 40u);
  EXPECT_LT(gtok->encode(words).size(), 20u) << "GPT-2 merges the words";
}

}  // namespace
}  // namespace gpt
