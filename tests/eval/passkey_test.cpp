// Passkey retrieval: the example builder's layout, the training mixer's
// determinism across ranks, the model's argmax path and the evaluation grid.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>

#include "backend/backend.h"
#include "config/attention.h"
#include "data/rng.h"
#include "data/shard.h"
#include "eval/passkey.h"
#include "eval/task_eval.h"
#include "model/gpt.h"

namespace gpt {
namespace {

std::vector<int32_t> text_ids(const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); }

std::string as_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += static_cast<char>(id);
  return s;
}

size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

TEST(Passkey, BuilderPlacesNeedleQuestionAndAnswer) {
  const auto tok = make_byte_tokenizer();
  const PasskeyBuilder b(*tok, 5);
  EXPECT_EQ(b.overhead(), 2 * 11 + 2 + 2 * 5);
  const std::string filler_text(200, 'x');
  const auto filler = text_ids(filler_text);
  for (double depth : {0.0, 0.5, 1.0}) {
    int answer = -1;
    const auto out = b.build(filler.data(), 100, "04217", depth, &answer);
    ASSERT_EQ(out.size(), 100u);
    EXPECT_EQ(answer, 95);
    const std::string s = as_text(out);
    EXPECT_EQ(s.substr(answer), "04217");
    EXPECT_EQ(s.substr(100 - 16), " pass key: 04217");
    EXPECT_EQ(count_of(s, " pass key: 04217"), 2u) << s;
    // The needle starts at round(depth * filler length) = round(depth * 66).
    const size_t at = s.find(" pass key: 04217. ");
    EXPECT_EQ(at, static_cast<size_t>(std::lround(depth * 66))) << s;
    EXPECT_EQ(count_of(s, "x"), 66u);
  }
}

TEST(Passkey, SequenceTooShortIsAnError) {
  const auto tok = make_byte_tokenizer();
  const PasskeyBuilder b(*tok, 5);
  const auto filler = text_ids(std::string(64, 'x'));
  try {
    b.build(filler.data(), 34, "12345", 0.5, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot hold a 5-digit passkey"), std::string::npos) << e.what();
  }
  EXPECT_THROW(b.build(filler.data(), 60, "12345", 1.5, nullptr), Error);
  EXPECT_THROW(PasskeyBuilder(*tok, 0), Error);
}

TEST(Passkey, RandomKeysHaveTheirDigits) {
  const auto tok = make_byte_tokenizer();
  const PasskeyBuilder b(*tok, 7);
  Rng rng(3);
  std::set<std::string> seen;
  for (int i = 0; i < 50; ++i) {
    const std::string k = b.random_key(rng);
    ASSERT_EQ(k.size(), 7u);
    for (char c : k) EXPECT_TRUE(c >= '0' && c <= '9');
    seen.insert(k);
  }
  EXPECT_GT(seen.size(), 45u);
}

// A batch of rows × T inputs/targets from consecutive text, as the loader gives.
void batch(int rows, int T, std::vector<int32_t>& in, std::vector<int32_t>& tg) {
  in.resize(static_cast<size_t>(rows) * T);
  tg.resize(in.size());
  for (int r = 0; r < rows; ++r)
    for (int t = 0; t < T; ++t) {
      in[r * T + t] = 'a' + (r * 7 + t) % 26;
      tg[r * T + t] = 'a' + (r * 7 + t + 1) % 26;
    }
}

TEST(Passkey, MixerIsTheSameSplitAcrossRanksAndKeepsTargetsShifted) {
  const auto tok = make_byte_tokenizer();
  const int rows = 16, T = 64;
  const PasskeyMixer mixer(*tok, 5, 0.5, 42);
  std::vector<int32_t> in1, tg1, in2, tg2;
  batch(rows, T, in1, tg1);
  batch(rows, T, in2, tg2);
  const std::vector<int32_t> orig = in1;
  const int n = mixer.apply(in1.data(), tg1.data(), rows, T, 0, 7);
  // Two "ranks" of 8 rows each make the same choices.
  const int n2 =
      mixer.apply(in2.data(), tg2.data(), 8, T, 0, 7) + mixer.apply(in2.data() + 8 * T, tg2.data() + 8 * T, 8, T, 8, 7);
  EXPECT_EQ(n, n2);
  EXPECT_EQ(in1, in2);
  EXPECT_EQ(tg1, tg2);
  EXPECT_GT(n, 2);
  EXPECT_LT(n, 14);
  int changed = 0;
  for (int r = 0; r < rows; ++r) {
    const std::vector<int32_t> row(in1.begin() + r * T, in1.begin() + (r + 1) * T);
    if (row == std::vector<int32_t>(orig.begin() + r * T, orig.begin() + (r + 1) * T)) continue;
    ++changed;
    for (int t = 0; t + 1 < T; ++t) EXPECT_EQ(tg1[r * T + t], in1[r * T + t + 1]);
    std::string s = as_text(row);
    s += static_cast<char>(tg1[r * T + T - 1]);
    EXPECT_EQ(count_of(s, " pass key: "), 2u) << s;
    // The last 5 tokens (of the T+1) are the key that the needle holds.
    const std::string key = s.substr(s.size() - 5);
    EXPECT_NE(s.find(" pass key: " + key + ". "), std::string::npos) << s;
  }
  EXPECT_EQ(changed, n);
  // Another draw chooses differently; fraction 0 and 1 are exact.
  std::vector<int32_t> in3, tg3;
  batch(rows, T, in3, tg3);
  mixer.apply(in3.data(), tg3.data(), rows, T, 0, 8);
  EXPECT_NE(in3, in1);
  batch(rows, T, in3, tg3);
  EXPECT_EQ(PasskeyMixer(*tok, 5, 0.0, 42).apply(in3.data(), tg3.data(), rows, T, 0, 7), 0);
  EXPECT_EQ(in3, orig);
  EXPECT_EQ(PasskeyMixer(*tok, 5, 1.0, 42).apply(in3.data(), tg3.data(), rows, T, 0, 7), rows);
  EXPECT_THROW(PasskeyMixer(*tok, 5, 0.5, 1).apply(in3.data(), tg3.data(), rows, 20, 0, 7), Error);
}

ModelConfig tiny_model() {
  ModelConfig m;
  m.n_layer = 1;
  m.n_head = 2;
  m.n_embd = 16;
  m.vocab_size = 257;
  m.context = 40;
  m.position = "rope";
  return m;
}

TEST(Passkey, ForwardArgmaxMatchesNextTokenLogits) {
  auto be = make_cpu_backend<float>();
  GPT<float> model(tiny_model(), resolve_attention(AttentionConfig{}, tiny_model()), *be);
  model.init(5);
  std::vector<int32_t> tokens(2 * 24);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37) % 257);
  std::vector<int32_t> pred;
  model.forward_argmax(tokens.data(), 2, 24, pred);
  ASSERT_EQ(pred.size(), tokens.size());
  // Position t of sequence b sees tokens[b][0..t] only (causal).
  for (int b = 0; b < 2; ++b)
    for (int t : {0, 5, 23}) {
      const auto logits = model.next_token_logits(tokens.data() + b * 24, t + 1);
      const int32_t best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      EXPECT_EQ(pred[b * 24 + t], best) << "b=" << b << " t=" << t;
    }
}

TEST(Passkey, EvaluationGridHasEveryCell) {
  const auto dir = std::filesystem::temp_directory_path() / ("gpt_passkey_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<uint32_t> text(5000);
  for (size_t i = 0; i < text.size(); ++i) text[i] = 'a' + (i * 13) % 26;
  write_shard((dir / "v_val_000000.bin").string(), text, 2);
  const TokenStream val((dir / "v_val_*.bin").string(), 257);
  auto be = make_cpu_backend<float>();
  GPT<float> model(tiny_model(), resolve_attention(AttentionConfig{}, tiny_model()), *be);
  model.init(5);
  const auto tok = make_byte_tokenizer();
  PasskeyEvalConfig pc;
  pc.multiples = {1, 2};
  pc.depths = {0.0, 1.0};
  pc.samples = 3;
  pc.digits = 1;
  const PasskeyResult r = evaluate_passkey(model, val, *tok, pc, 40, 160);
  ASSERT_EQ(r.exact.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(r.exact[i].size(), 2u);
    for (size_t d = 0; d < 2; ++d) {
      // One answer token: exact match and token accuracy are the same count.
      EXPECT_DOUBLE_EQ(r.exact[i][d], r.token_accuracy[i][d]);
      EXPECT_GE(r.exact[i][d], 0.0);
      EXPECT_LE(r.exact[i][d], 1.0);
    }
  }
  const auto j = r.to_json();
  EXPECT_EQ(j["multiples"].size(), 2u);
  EXPECT_EQ(j["multiples"][1]["context"], 80);
  EXPECT_NE(r.table().find("1.00"), std::string::npos);  // the depth row label
  // The effective length is that of the mean exact match over the depths.
  const std::vector<double> mean = r.mean_exact();
  ASSERT_EQ(mean.size(), 2u);
  EXPECT_DOUBLE_EQ(mean[1], (r.exact[1][0] + r.exact[1][1]) / 2);
  const int eff = effective_multiple(pc.multiples, mean);
  EXPECT_EQ(j["effective_multiple"]["exact"], eff > 0 ? nlohmann::json(eff) : nlohmann::json(nullptr));
  EXPECT_NE(r.table().find("effective length"), std::string::npos);
  pc.digits = 30;                                        // does not fit in 40 tokens
  EXPECT_THROW(evaluate_passkey(model, val, *tok, pc, 40, 160), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpt
