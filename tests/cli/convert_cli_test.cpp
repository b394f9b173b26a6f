// `gpt convert` and `gpt eval --context/--batch` end to end: an llm.c file
// written by the test is imported, scored with llm.c's batching (the printed
// loss equals llm.c's math on the same tokens), exported back byte for byte,
// fine-tuned with `gpt train --resume`; bad input exits 1 naming the problem.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "data/shard.h"
#include "train/checkpoint.h"
#include "util/llmc_model.h"

namespace fs = std::filesystem;

#include "util/run_binary.h"

namespace gpt {
namespace {

using test::Result;
using test::run;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class ConvertCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gpt_convert_cli_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
            "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    model_.randomize(21);
    model_.write(p("m.bin"), 3);
    // 3 batches of 2 x 8 (and 8 tokens to spare); ids < V = 50.
    tokens_.resize(3 * 16 + 9);
    for (size_t i = 0; i < tokens_.size(); ++i) tokens_[i] = static_cast<uint32_t>((i * 7 + i / 3) % model_.V);
    write_shard(p("val_000000.bin"), tokens_, 2);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string p(const std::string& name) const { return (dir_ / name).string(); }
  static void expect_error(const Result& r, const std::vector<std::string>& needles) {
    EXPECT_EQ(r.status, 1) << r.output;
    for (const auto& s : needles)
      EXPECT_NE(r.output.find(s), std::string::npos) << "missing \"" << s << "\" in:\n" << r.output;
  }
  // llm.c's mean loss over the first K batches of B rows of T = model_.T.
  double reference_loss(int B, int K) const {
    const int T = model_.T;
    double sum = 0;
    for (int row = 0; row < K * B; ++row) {
      std::vector<int32_t> in(T), tg(T);
      for (int t = 0; t < T; ++t)
        in[t] = static_cast<int32_t>(tokens_[row * T + t]), tg[t] = static_cast<int32_t>(tokens_[row * T + t + 1]);
      for (double l : model_.losses(in, tg)) sum += l;
    }
    return sum / (static_cast<double>(K) * B * T);
  }
  static double printed_loss(const Result& r, long long* tokens) {
    std::smatch m;
    const std::regex re("val loss ([0-9.]+) over ([0-9]+) tokens");
    if (!std::regex_search(r.output, m, re)) return -1;
    *tokens = std::stoll(m[2]);
    return std::stod(m[1]);
  }

  fs::path dir_;
  test::LlmcModel model_;
  std::vector<uint32_t> tokens_;
};

TEST_F(ConvertCli, ImportEvaluateAndExportBack) {
  Result r = run("convert --from-llmc " + p("m.bin") + " " + p("c.ckpt"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + p("c.ckpt")), std::string::npos) << r.output;

  r = run("eval " + p("c.ckpt") + " --data '" + p("val_*.bin") + "' --context 8 --batch 2");
  ASSERT_EQ(r.status, 0) << r.output;
  long long tokens = 0;
  EXPECT_NEAR(printed_loss(r, &tokens), reference_loss(2, 3), 2e-6) << r.output;
  EXPECT_EQ(tokens, 3 * 2 * 8);
  r = run("eval " + p("c.ckpt") + " --data '" + p("val_*.bin") + "' --context 8 --batch 2 --batches 1 --out " +
          p("loss.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NEAR(printed_loss(r, &tokens), reference_loss(2, 1), 2e-6) << r.output;
  EXPECT_EQ(tokens, 16);
  EXPECT_TRUE(fs::exists(p("loss.json")));
  // The default 1x evaluation runs on a converted model too.
  r = run("eval " + p("c.ckpt") + " --data '" + p("val_*.bin") + "' --tokens 32 --span 32 --out " + p("x.json"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("1x"), std::string::npos) << r.output;

  r = run("convert --to-llmc " + p("c.ckpt") + " " + p("back.bin"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_bytes(p("back.bin")), read_bytes(p("m.bin")));
}

TEST_F(ConvertCli, Bf16RoundTripIsByteExact) {
  model_.randomize(22, /*bf16_exact=*/true);
  model_.write(p("m5.bin"), 5);
  Result r = run("convert --from-llmc " + p("m5.bin") + " " + p("c5.ckpt"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("convert --to-llmc " + p("c5.ckpt") + " " + p("back5.bin") + " --bf16");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("version 5"), std::string::npos) << r.output;
  EXPECT_EQ(read_bytes(p("back5.bin")), read_bytes(p("m5.bin")));
  r = run("eval " + p("c5.ckpt") + " --data '" + p("val_*.bin") + "' --context 8 --batch 3");
  ASSERT_EQ(r.status, 0) << r.output;
  long long tokens = 0;
  EXPECT_NEAR(printed_loss(r, &tokens), reference_loss(3, 2), 2e-6) << r.output;
}

TEST_F(ConvertCli, FineTunesAnImportedModelWithTrainResume) {
  Result r = run("convert --from-llmc " + p("m.bin") + " " + p("c.ckpt") + " --with-optimizer");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string data = p("val_*.bin");
  r = run("train --resume " + p("c.ckpt") + " --set run.dir=" + p("ft") + " --set 'data.train=" + data +
          "' --set 'data.val=" + data +
          "' --set train.steps=20 --set train.warmup_steps=0 --set train.batch_size=2 --set train.lr=0.003 --set "
          "train.lr_min=0.0001" +
          " --set eval.tokens=16 --set eval.span=16");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(p("ft/checkpoints/step_00000020.bin")));
  r = run("eval " + p("ft") + " --data '" + data + "' --context 8 --batch 2");
  ASSERT_EQ(r.status, 0) << r.output;
  long long tokens = 0;
  const double tuned = printed_loss(r, &tokens);
  EXPECT_GT(tuned, 0);
  EXPECT_LT(tuned, reference_loss(2, 3) - 0.1);  // 20 steps on these very tokens lower their loss (4.17 -> 3.78)
}

// train.init_from: a converted (learned-position) model fine-tuned with RoPE,
// the way to study extrapolation on a pretrained model. With a learning rate
// of 1e-12, one step leaves the weights where init_from put them: the
// imported ones, not a fresh initialisation.
TEST_F(ConvertCli, FineTunesAnImportedModelWithRope) {
  ASSERT_EQ(run("convert --from-llmc " + p("m.bin") + " " + p("c.ckpt")).status, 0);
  nlohmann::json cfg = load_checkpoint(p("c.ckpt")).meta["config"];
  cfg["model"]["position"] = "rope";
  cfg["model"]["max_position"] = 0;
  cfg["data"]["train"] = cfg["data"]["val"] = p("val_*.bin");
  cfg["train"].update({{"steps", 1}, {"warmup_steps", 0}, {"batch_size", 2}, {"lr", 1e-12}, {"lr_min", 0}});
  cfg["eval"].update({{"multiples", {1, 2}}, {"tokens", 16}, {"span", 16}});
  cfg["run"]["dir"] = p("rope_ft");
  cfg["train"]["init_from"] = p("c.ckpt");
  std::ofstream(p("rope_ft.json")) << cfg.dump();
  const Result r = run("train " + p("rope_ft.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("initialised 15 parameter tensors from"), std::string::npos) << r.output;
  const Checkpoint imported = load_checkpoint(p("c.ckpt")),
                   tuned = load_checkpoint(p("rope_ft/checkpoints/step_00000001.bin"));
  EXPECT_FALSE(tuned.has("param/wpe")) << "rope has no position table";
  for (const char* name : {"param/wte", "param/qkvw", "param/fcprojb", "param/lnfw"}) {
    const auto& a = imported.tensor(name).data;
    const auto& b = tuned.tensor(name).data;
    ASSERT_EQ(a.size(), b.size()) << name;
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-6) << name << "[" << i << "]";
  }
  // Nothing in common: a clear error.
  nlohmann::json other = cfg;
  other["model"]["n_embd"] = 2 * other["model"]["n_embd"].get<int>();
  other["run"]["dir"] = p("other");
  std::ofstream(p("other.json")) << other.dump();
  expect_error(run("train " + p("other.json")), {"train.init_from", "no parameter tensor"});
}

TEST_F(ConvertCli, BadInputExitsWithAClearError) {
  std::string bytes = read_bytes(p("m.bin"));
  std::string bad = bytes;
  const int32_t wrong = 7;
  std::memcpy(&bad[0], &wrong, 4);
  std::ofstream(p("magic.bin"), std::ios::binary) << bad;
  expect_error(run("convert --from-llmc " + p("magic.bin") + " " + p("o.ckpt")), {"magic.bin", "magic 7", "20240326"});
  bad = bytes;
  const int32_t v4 = 4;
  std::memcpy(&bad[4], &v4, 4);
  std::ofstream(p("version.bin"), std::ios::binary) << bad;
  expect_error(run("convert --from-llmc " + p("version.bin") + " " + p("o.ckpt")), {"version.bin", "version 4"});
  std::ofstream(p("short.bin"), std::ios::binary) << bytes.substr(0, bytes.size() - 10);
  expect_error(run("convert --from-llmc " + p("short.bin") + " " + p("o.ckpt")), {"short.bin", "truncated"});
  EXPECT_FALSE(fs::exists(p("o.ckpt")));
  expect_error(run("convert --from-llmc " + p("val_000000.bin") + " " + p("o.ckpt")),
               {"val_000000.bin", "token shard"});
  expect_error(run("convert " + p("o.ckpt")), {"exactly one of --from-llmc"});
  expect_error(run("convert --from-llmc " + p("m.bin") + " --to-llmc " + p("m.bin") + " " + p("o.ckpt")),
               {"exactly one of"});
  expect_error(run("convert --to-llmc " + p("m.bin") + " " + p("o.bin")), {"m.bin", "not a gpt checkpoint"});
  expect_error(run("convert --from-llmc " + p("m.bin") + " " + p("o.ckpt") + " --context 9"), {"--context 9", "T = 8"});

  ASSERT_EQ(run("convert --from-llmc " + p("m.bin") + " " + p("c.ckpt")).status, 0);
  std::vector<uint32_t> t = tokens_;
  t[20] = 50;  // = V
  write_shard(p("oov_000000.bin"), t, 2);
  expect_error(run("eval " + p("c.ckpt") + " --data " + p("oov_000000.bin") + " --context 8 --batch 2"),
               {"oov_000000.bin", "token id 50", "vocabulary size 50"});
  expect_error(run("eval " + p("c.ckpt") + " --data " + p("val_000000.bin") + " --context 9 --batch 2"),
               {"--context 9", "learned position table", "8 rows"});
  expect_error(run("eval " + p("c.ckpt") + " --data " + p("val_000000.bin") + " --context 8 --batch 8"),
               {"no shard holds one full batch", "65 tokens", "has 57"});
  expect_error(run("eval " + p("c.ckpt") + " --data " + p("val_000000.bin") + " --batch 2 --multiples 1"),
               {"--multiples"});
}

}  // namespace
}  // namespace gpt
