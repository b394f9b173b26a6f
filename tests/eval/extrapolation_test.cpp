// evaluate_extrapolation against a brute-force loop over the same sequences.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include "core/check.h"
#include "data/shard.h"
#include "eval/extrapolation.h"
#include "model/gpt.h"

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

  fs::path dir_;
  ModelConfig cfg_;
  std::unique_ptr<Backend<float>> be_ = make_cpu_backend<float>();
  std::unique_ptr<GPT<float>> model_;
  std::vector<uint32_t> tokens_;
};

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
    if (row.multiple == 1) EXPECT_TRUE(std::isnan(row.loss_past_train));
    else EXPECT_NEAR(row.loss_past_train, past / n_past, 1e-5) << row.multiple;
    ASSERT_EQ(row.profile.size(), 2u);
    EXPECT_NEAR(row.profile[0], first_half / 32, 1e-5) << row.multiple;
    EXPECT_NEAR((row.profile[0] + row.profile[1]) / 2, row.loss, 1e-5) << row.multiple;
  }
  // The JSON carries the same figures, with null for "past T" at 1x.
  const auto j = r.to_json();
  EXPECT_TRUE(j["multiples"][0]["loss_past_train"].is_null());
  EXPECT_EQ(j["multiples"][2]["profile"][1]["start"], 8);
}

TEST_F(Extrapolation, WindowsSpreadOverTheWholeStream) {
  // 1001 tokens, 4 windows of 16: windows start every 250 tokens.
  TokenStream val(write_val(1001), 257);
  EvalConfig ec;
  ec.multiples = {1, 4};
  ec.tokens = 64;
  const ExtrapolationResult r = evaluate_extrapolation(*model_, val, ec, 4, 64);
  double sum = 0;
  for (int w = 0; w < 4; ++w) {
    const auto l = losses_at(static_cast<uint64_t>(w) * 250, 16);
    sum += std::accumulate(l.begin(), l.end(), 0.0);
  }
  EXPECT_NEAR(r.rows[1].loss, sum / 64, 1e-5);
}

TEST_F(Extrapolation, NonDividingMultipleScoresWholeSequencesPerWindow) {
  TokenStream val(write_val(65), 257);
  EvalConfig ec;
  ec.multiples = {3, 4};
  ec.tokens = 64;
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
    evaluate_extrapolation(*model_, val, ec, 4, 64);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("validation data has 65 tokens"), std::string::npos) << e.what();
  }
  ec.tokens = 32;
  try {
    check_eval_feasible(1 << 20, ec, 4);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("eval.tokens = 32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpt
