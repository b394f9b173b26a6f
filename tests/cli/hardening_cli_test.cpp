// Bad input through the real binary, as a demanding user gives it: every
// case ends with exit status 1 and one "error: ..." line that names the
// input and what is allowed, never a crash, a hang, a silent success or a
// write outside where it belongs. Each test here failed before its fix.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include <nlohmann/json.hpp>

#include "data/shard.h"
#include "train/checkpoint.h"
#include "util/llmc_model.h"
#include "util/run_binary.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

using test::Result;
using test::run;

class Hardening : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gpt_hardening_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "data");
    std::vector<uint32_t> tokens(6000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((i * 7919) % 257);
    write_shard((dir_ / "data" / "t_train_000001.bin").string(), tokens, 2);
    write_shard((dir_ / "data" / "t_val_000000.bin").string(), tokens, 2);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string config(const std::string& extra = "") {
    const std::string path = (dir_ / ("cfg" + std::to_string(n_++) + ".json")).string();
    std::ofstream(path) << R"({"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "context": 16}, "data": {"train": ")"
                        << (dir_ / "data" / "t_train_*.bin").string() << R"(", "val": ")"
                        << (dir_ / "data" / "t_val_*.bin").string()
                        << R"("}, "train": {"batch_size": 2, "steps": 3, "warmup_steps": 1, "threads": 1},
                            "eval": {"multiples": [1, 2], "tokens": 512}, "run": {"dir": ")"
                        << (dir_ / "run").string() << "\"}" << extra << "}";
    return path;
  }
  std::string run_dir() const { return (dir_ / "run").string(); }
  std::string ckpt3() const { return (dir_ / "run" / "checkpoints" / "step_00000003.bin").string(); }
  void train_once() { ASSERT_EQ(run("train " + config()).status, 0); }

  // Exit status 1 and the project's one format: a line starting "error: ".
  static void expect_error(const Result& r, const std::vector<std::string>& needles) {
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find("error: "), std::string::npos) << r.output;
    for (const auto& s : needles)
      EXPECT_NE(r.output.find(s), std::string::npos) << "missing \"" << s << "\" in:\n" << r.output.substr(0, 4000);
  }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // A sweep file over the tiny config; `runs` is the JSON of "runs".
  std::string sweep(const std::string& runs, const std::string& extra = "") {
    return write("sweep" + std::to_string(n_++) + ".json", R"({"dir": ")" + (dir_ / "sweep").string() +
                                                               R"(", "base": ")" + config() + R"(", "runs": )" + runs +
                                                               extra + "}");
  }

  fs::path dir_;
  int n_ = 0;
};

// ---- command line ---------------------------------------------------------------

TEST_F(Hardening, CommandLineErrorsUseTheProjectFormat) {
  // A config that does not exist or is a directory: "error: config: ..." and status 1 (was CLI11's text, 105).
  expect_error(run("train " + (dir_ / "nope.json").string()), {"nope.json", "does not exist"});
  expect_error(run("train " + dir_.string()), {"is a directory"});
  // Range errors name the option and the allowed values (were 300-digit bounds).
  const Result tokens = run("eval " + dir_.string() + " --tokens 0");
  expect_error(tokens, {"--tokens: must be a number > 0, got 0"});
  EXPECT_EQ(tokens.output.find("1797693134862315708"), std::string::npos) << tokens.output;
  expect_error(run("eval " + dir_.string() + " --context 0"), {"--context 0", "1..16777216"});
  expect_error(run("sample " + dir_.string() + " --temperature inf"),
               {"--temperature: must be a number >= 0, got inf"});
  expect_error(run("sample " + dir_.string() + " --temperature nan"), {"--temperature", "got nan"});
  expect_error(run("train --no-such-option"), {"--no-such-option", "gpt train --help"});
  // --help still succeeds.
  EXPECT_EQ(run("train --help").status, 0);
}

TEST_F(Hardening, SampleTopKLargerThanTheVocabularyIsRefused) {
  train_once();
  expect_error(run("sample " + run_dir() + " --tokens 2 --top-k 100000"),
               {"--top-k 100000 is larger than the vocabulary", "257"});
  EXPECT_EQ(run("sample " + run_dir() + " --tokens 2 --top-k 257").status, 0);
}

TEST_F(Hardening, EncodeAndDecodeOfADirectoryAreRefused) {
  expect_error(run("data encode --tokenizer byte " + dir_.string()), {"is a directory"});
  expect_error(run("data decode --tokenizer byte " + dir_.string()), {"is a directory"});
}

// ---- JSON: nesting, numbers, FIFOs ------------------------------------------------

TEST_F(Hardening, DeeplyNestedJsonIsRefusedNotACrash) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_error(run("train " + write("deep.json", deep)), {"deep.json", "nested deeper than 64 levels"});
  expect_error(run("sweep --dry-run " + write("deep_sweep.json", deep)), {"deep_sweep.json", "nested deeper"});
}

TEST_F(Hardening, NumberOverflowNamesTheFileAndTheKey) {
  expect_error(run("train " + write("big.json", R"({"model": {"n_embd": 1e400}})")),
               {"big.json", "model.n_embd", "number overflow"});
}

TEST_F(Hardening, FifoConfigAndShardsAreRefusedWithoutHanging) {
  const std::string fifo = (dir_ / "fifo.json").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  // `timeout` turns a hang into status 124.
  expect_error(test::run_command("timeout 20 " + std::string(GPT_BINARY) + " train " + fifo), {"not a regular file"});
  const std::string shard = (dir_ / "data" / "f_train_000001.bin").string();
  ASSERT_EQ(::mkfifo(shard.c_str(), 0644), 0);
  expect_error(test::run_command("timeout 20 " + std::string(GPT_BINARY) + " train " + config() +
                                 " --set data.train=" + (dir_ / "data" / "f_train_*.bin").string()),
               {"f_train_000001.bin", "not a regular file"});
}

// ---- sweep files ------------------------------------------------------------------

TEST_F(Hardening, SweepRunNamesArePlainBoundedNames) {
  expect_error(run("sweep --dry-run " + sweep(R"([{"name": ")" + std::string(200000, 'a') + R"("}])")),
               {"200000 characters", "1 to 100"});
  expect_error(run("sweep --dry-run " + sweep(R"([{"name": ")" + std::string(3000000, 'a') + R"("}])")),
               {"3000000 characters"});
  expect_error(run("sweep --dry-run " + sweep(R"([{"name": ".."}])")), {"\"..\"", "not a plain name"});
  expect_error(run("sweep --dry-run " + sweep(R"([{"name": "."}])")), {"not a plain name"});
  expect_error(run("sweep --dry-run " + sweep(R"([{"name": "a/b"}])")), {"a/b", "letters, digits"});
  EXPECT_FALSE(fs::exists(dir_ / "seed1"));
}

TEST_F(Hardening, SweepSeedsAreDistinctNonNegativeIntegers) {
  expect_error(run("sweep --dry-run " + sweep(R"([{"name": "a", "seeds": [1, 1]}])")), {"seed 1 twice"});
  expect_error(run("sweep --dry-run " + sweep(R"([{"name": "a"}])", R"(, "seeds": [-1])")), {"-1", "0 to 2^64-1"});
  expect_error(run("sweep --dry-run " + sweep(R"([{"name": "a", "seeds": [1.5]}])")), {"1.5", "integers"});
  expect_error(run("sweep --dry-run " + sweep(R"([{"name": "a", "seeds": ["x"]}])")), {"\"x\"", "integers"});
  // Seeds past 2^32 are train.seed values like any other, not narrowed to 1
  // (the old int reading): the run directory and the override say the same.
  const Result big = run("sweep --dry-run " + sweep(R"([{"name": "a", "seeds": [4294967297, 1e10]}])"));
  EXPECT_EQ(big.status, 0) << big.output;
  EXPECT_NE(big.output.find("seed4294967297"), std::string::npos) << big.output;
  EXPECT_NE(big.output.find("train.seed=4294967297"), std::string::npos) << big.output;
  EXPECT_NE(big.output.find("train.seed=10000000000"), std::string::npos) << big.output;
  EXPECT_EQ(big.output.find("train.seed=1 "), std::string::npos) << big.output;
}

// ---- checkpoints ------------------------------------------------------------------

TEST_F(Hardening, CheckpointStepIsReadAtFullWidth) {
  train_once();
  Checkpoint c = load_checkpoint(ckpt3());
  c.meta["step"] = (uint64_t{1} << 32) + 3;
  save_checkpoint(ckpt3(), c);
  expect_error(run("train --resume " + run_dir() + " --set train.steps=10"),
               {"step_00000003.bin", "\"step\" = 4294967299, outside 0..2147483647"});
}

TEST_F(Hardening, NonFiniteParametersAreRefusedAtLoad) {
  train_once();
  Checkpoint c = load_checkpoint(ckpt3());
  for (auto& t : c.tensors)
    if (t.name == "param/wte") std::fill(t.data.begin(), t.data.end(), std::numeric_limits<float>::quiet_NaN());
  save_checkpoint(ckpt3(), c);
  expect_error(run("eval " + run_dir()), {"step_00000003.bin", "param/wte", "non-finite"});
  expect_error(run("train --resume " + run_dir() + " --set train.steps=5"), {"param/wte", "non-finite"});
}

// FNV-1a 64 of the file's bytes, then the file: the format of checkpoint.h
// written from its comment, so that a table the writer never makes can be tried.
std::string raw_checkpoint(const nlohmann::json& header, size_t payload_bytes) {
  std::string f = "GPTCKPT";
  f.push_back('\0');
  const uint32_t version = 1, reserved = 0;
  const std::string j = header.dump();
  const uint64_t len = j.size();
  f.append(reinterpret_cast<const char*>(&version), 4).append(reinterpret_cast<const char*>(&reserved), 4);
  f.append(reinterpret_cast<const char*>(&len), 8).append(j);
  f.append((64 - f.size() % 64) % 64, '\0');
  f.append(payload_bytes, '\0');
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : f) h = (h ^ ch) * 0x100000001b3ull;
  f.append(reinterpret_cast<const char*>(&h), 8);
  return f;
}

TEST_F(Hardening, CheckpointTablesWithOverlappingOrRepeatedEntriesAreRefused) {
  train_once();
  const nlohmann::json cfg = load_checkpoint(ckpt3()).meta["config"];
  // 5,000 entries aliasing one 4 KB region: the file is small, the reader
  // must not allocate 5,000 copies.
  nlohmann::json table = nlohmann::json::array();
  for (int i = 0; i < 5000; ++i)
    table.push_back(
        {{"name", "param/t" + std::to_string(i)}, {"dtype", "f32"}, {"shape", {1024}}, {"offset", 0}, {"bytes", 4096}});
  const std::string alias =
      write("alias.bin", raw_checkpoint({{"config", cfg}, {"step", 3}, {"tensors", table}}, 4096));
  expect_error(run("eval " + alias), {"alias.bin", "overlap"});
  nlohmann::json twice = nlohmann::json::array();
  for (int i = 0; i < 2; ++i)
    twice.push_back({{"name", "param/wte"}, {"dtype", "f32"}, {"shape", {16}}, {"offset", 64 * i}, {"bytes", 64}});
  const std::string dup = write("dup.bin", raw_checkpoint({{"config", cfg}, {"step", 3}, {"tensors", twice}}, 128));
  expect_error(run("eval " + dup), {"dup.bin", "param/wte appears twice"});
}

TEST_F(Hardening, LlmcImportRefusesNonFiniteWeightsAndWarnsOfPaddingRows) {
  test::LlmcModel m;
  m.randomize(7);
  m.t[4][5] = std::numeric_limits<float>::infinity();  // qkvw
  const std::string bad = (dir_ / "bad_llmc.bin").string();
  m.write(bad);
  expect_error(run("convert --from-llmc " + bad + " " + (dir_ / "out.bin").string()),
               {"bad_llmc.bin", "qkvw", "non-finite"});
  EXPECT_FALSE(fs::exists(dir_ / "out.bin"));
  test::LlmcModel p;
  p.randomize(7);
  p.t[0][static_cast<size_t>(p.V) * p.C + 3] = 0.5f;  // a padding row of wte
  const std::string pad = (dir_ / "pad_llmc.bin").string();
  p.write(pad);
  const Result r = run("convert --from-llmc " + pad + " " + (dir_ / "pad.bin").string());
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("padding rows"), std::string::npos) << r.output;
}

// ---- training ---------------------------------------------------------------------

// A finite gradient whose update overflows (eps underflows to 0 in float32:
// a tiny gradient over a zero second moment): the run stops at that step,
// names the tensor, and no checkpoint with a non-finite tensor exists.
TEST_F(Hardening, NonFiniteUpdateStopsTheRunAndNoBadCheckpointIsLabelledGood) {
  const Result r = run("train " + config() + " --set train.eps=1e-300 --set train.lr=10 --set train.steps=20");
  expect_error(r, {"non-finite"});
  EXPECT_EQ(r.output.find("the last good state is saved"), std::string::npos) << r.output;
  if (fs::exists(dir_ / "run" / "checkpoints"))
    for (const auto& e : fs::directory_iterator(dir_ / "run" / "checkpoints")) {
      if (e.path().extension() != ".bin") continue;
      const Result ev = run("eval " + e.path().string() + " --tokens 64");
      EXPECT_EQ(ev.status, 0) << e.path() << ": " << ev.output;
    }
}

TEST_F(Hardening, ResumeWithAnotherAttentionOrContextIsRefused) {
  train_once();
  expect_error(run("train --resume " + run_dir() + " --set train.steps=5 --set attention.preset=cosine"),
               {"attention section", "differs", "gpt eval"});
  expect_error(run("train --resume " + run_dir() + " --set train.steps=5 --set context.mask=window"),
               {"context section", "differs"});
}

TEST_F(Hardening, MetricsWriteErrorsStopTheRun) {
  fs::create_directories(dir_ / "run");
  fs::create_symlink("/dev/full", dir_ / "run" / "metrics.jsonl");  // every write fails with ENOSPC
  expect_error(run("train " + config()), {"metrics.jsonl", "No space left on device"});
}

TEST_F(Hardening, AModelTooLargeForMemorySaysHowManyBytes) {
  expect_error(run("train " + config() + " --set model.n_layer=256 --set model.n_embd=65536 --set model.n_head=1"),
               {"out of memory", "bytes", "parameters"});
  EXPECT_FALSE(fs::exists(dir_ / "run"));
}

// A second trainer on a run directory in use is refused at once, naming the
// holder's pid, and leaves the first run's files alone.
TEST_F(Hardening, ASecondTrainerOnOneRunDirectoryIsRefused) {
  const std::string cfg = config();
  const pid_t pid = test::spawn({"train", cfg, "--set", "train.steps=1000000", "--set", "train.checkpoint_every=2"},
                                (dir_ / "first.log").string());
  ASSERT_NE(pid, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && !fs::exists(dir_ / "run" / "checkpoints" / "latest"))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::string holder = "pid " + std::to_string(pid);
  expect_error(run("train " + cfg), {run_dir(), "in use by another gpt process", holder});
  expect_error(run("train --resume " + run_dir()), {"in use by another gpt process", holder});
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  int w = 0;
  ASSERT_EQ(::waitpid(pid, &w, 0), pid);
  ASSERT_TRUE(WIFEXITED(w));
  EXPECT_EQ(WEXITSTATUS(w), 130);
  // The lock went with its holder: the run resumes.
  const Result r = run("train --resume " + run_dir() + " --set train.steps=1");
  EXPECT_EQ(r.status, 0) << r.output;
}

// ---- vocabularies -----------------------------------------------------------------

TEST_F(Hardening, BpeVocabularyTokensAreBounded) {
  // Each merge doubles the last token: 40 lines would describe a 2^41-byte token.
  std::string text = "gpt-bpe 1\npattern gpt2\nvocab_size 297\nmerges 40\n97 97\n";
  for (int i = 1; i < 40; ++i) text += std::to_string(256 + i) + " " + std::to_string(256 + i) + "\n";
  const std::string vocab = write("doubling.bpe", text);
  expect_error(test::run_command("echo aaaa | timeout 60 " + std::string(GPT_BINARY) + " data encode --tokenizer " +
                                 vocab + " -"),
               {"doubling.bpe", "longer than the 1024"});
}

}  // namespace
}  // namespace gpt
