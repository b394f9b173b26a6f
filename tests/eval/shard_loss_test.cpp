// shard_loss against llm.c's batching written out by hand: batch k of a shard
// is rows k·B … k·B+B−1, row r = tokens r·T … r·T+T; batches never cross a
// shard; the reader wraps to the first shard after the last.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "core/check.h"
#include "data/shard.h"
#include "eval/shard_loss.h"
#include "model/gpt.h"
#include "util/llmc_model.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

class ShardLoss : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gpt_shard_loss_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
            "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    cfg_.n_layer = 1, cfg_.n_head = 2, cfg_.n_embd = 8, cfg_.vocab_size = 61, cfg_.context = 6;
    cfg_.position = "learned", cfg_.max_position = 8, cfg_.init_std = 0.5;
    AttentionSpec spec;
    spec.trained_context = 6;
    model_ = std::make_unique<GPT<float>>(cfg_, spec, *be_);
    model_->init(3);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<uint32_t> shard(const std::string& name, size_t n, uint32_t seed) {
    std::vector<uint32_t> t(n);
    for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>((seed + i * 17 + i * i * 5) % cfg_.vocab_size);
    write_shard((dir_ / name).string(), t, 2);
    return t;
  }

  // Sum of per-position losses of row r (tokens r·T … r·T+T) of a shard.
  double row_loss(const std::vector<uint32_t>& toks, size_t r, int T) {
    std::vector<int32_t> in(T), tg(T);
    for (int t = 0; t < T; ++t)
      in[t] = static_cast<int32_t>(toks[r * T + t]), tg[t] = static_cast<int32_t>(toks[r * T + t + 1]);
    std::vector<float> l;
    model_->forward_losses(in.data(), tg.data(), 1, T, l);
    double s = 0;
    for (float v : l) s += v;
    return s;
  }

  fs::path dir_;
  ModelConfig cfg_;
  std::unique_ptr<Backend<float>> be_ = make_cpu_backend<float>();
  std::unique_ptr<GPT<float>> model_;
};

TEST_F(ShardLoss, BatchesShardByShardAsLlmcDoes) {
  const int T = 5, B = 3;
  // 2 batches of 15 need 31 tokens: a shard of 45 holds 2 (45 - 1 = 44 < 46),
  // one of 46 holds 3, one of 15 holds none.
  const auto a = shard("x_000000.bin", 46, 1), b = shard("x_000001.bin", 15, 2), c = shard("x_000002.bin", 45, 3);
  const TokenStream data((dir_ / "x_*.bin").string(), cfg_.vocab_size);
  EXPECT_EQ(shard_batches(data, T, B), 5);
  // Batches in llm.c's order: a0 a1 a2 c0 c1, then a0 again.
  std::vector<std::pair<const std::vector<uint32_t>*, int>> order = {{&a, 0}, {&a, 1}, {&a, 2},
                                                                     {&c, 0}, {&c, 1}, {&a, 0}};
  auto expected = [&](int K) {
    double s = 0;
    for (int k = 0; k < K; ++k)
      for (int r = 0; r < B; ++r) s += row_loss(*order[k].first, static_cast<size_t>(order[k].second) * B + r, T);
    return s / (static_cast<double>(K) * B * T);
  };
  const ShardLossResult all = shard_loss(*model_, data, T, B);
  EXPECT_EQ(all.batches, 5);
  EXPECT_EQ(all.available, 5);
  EXPECT_EQ(all.tokens, 5 * B * T);
  EXPECT_NEAR(all.loss, expected(5), 1e-6);
  EXPECT_GT(all.loss, 0.5);
  EXPECT_NEAR(shard_loss(*model_, data, T, B, 2).loss, expected(2), 1e-6);
  const ShardLossResult wrapped = shard_loss(*model_, data, T, B, 6);
  EXPECT_EQ(wrapped.tokens, 6 * B * T);
  EXPECT_NEAR(wrapped.loss, expected(6), 1e-6);
  // A different B changes which tokens are scored (more of shard b and c).
  EXPECT_EQ(shard_batches(data, T, 1), 9 + 2 + 8);
}

TEST_F(ShardLoss, MatchesLlmcsMathOnAnLlmcModel) {
  // The weights of a model in llm.c's layout, scored by llm.c's math in double.
  test::LlmcModel m;
  m.randomize(8);
  auto be = make_cpu_backend<float>();
  ModelConfig mc;
  mc.n_layer = m.L, mc.n_head = m.H, mc.n_embd = m.C, mc.vocab_size = m.V, mc.vocab_pad_multiple = 128;
  mc.context = m.T, mc.position = "learned";
  AttentionSpec spec;
  spec.trained_context = m.T;
  GPT<float> model(mc, spec, *be);
  std::vector<float> flat;
  for (const auto& t : m.t) flat.insert(flat.end(), t.begin(), t.end());  // same order as llm.c
  model.set_params(flat);
  std::vector<uint32_t> toks(2 * 4 * m.T + 7);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint32_t>((i * 13 + 5) % m.V);
  write_shard((dir_ / "v_000000.bin").string(), toks, 2);
  const TokenStream data((dir_ / "v_*.bin").string(), m.V);
  const ShardLossResult r = shard_loss(model, data, m.T, 4);
  ASSERT_EQ(r.batches, 2);
  double sum = 0;
  for (int row = 0; row < 8; ++row) {
    std::vector<int32_t> in(m.T), tg(m.T);
    for (int t = 0; t < m.T; ++t)
      in[t] = static_cast<int32_t>(toks[row * m.T + t]), tg[t] = static_cast<int32_t>(toks[row * m.T + t + 1]);
    for (double l : m.losses(in, tg)) sum += l;
  }
  EXPECT_NEAR(r.loss, sum / (8.0 * m.T), 1e-5);
}

TEST_F(ShardLoss, RefusesShardsWithoutAFullBatchOrWithIdsPastTheVocabulary) {
  shard("s_000000.bin", 10, 1);
  const TokenStream small((dir_ / "s_*.bin").string(), cfg_.vocab_size);
  try {
    shard_loss(*model_, small, 5, 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("11 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("has 10"), std::string::npos) << e.what();
  }
  std::vector<uint32_t> t(40, 3);
  t[17] = 61;  // = vocab_size
  write_shard((dir_ / "big_000000.bin").string(), t, 2);
  const TokenStream bad((dir_ / "big_*.bin").string(), cfg_.vocab_size);
  try {
    shard_loss(*model_, bad, 5, 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("big_000000.bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find("token id 61"), std::string::npos) << msg;
    EXPECT_NE(msg.find("vocabulary size 61"), std::string::npos) << msg;
  }
  EXPECT_THROW(shard_loss(*model_, bad, 9, 1), Error);  // past the 8-row position table
}

}  // namespace
}  // namespace gpt
