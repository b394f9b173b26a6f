// `gpt data encode|decode|train-tokenizer|text` through the binary: round
// trips of bytes that are not UTF-8, a trained vocabulary used end to end,
// and bad input (exit status 1 and a message naming the file and the fault).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <sys/wait.h>

#include "data/shard.h"
#include "tokenizer/tokenizer_test_util.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

struct Result {
  int status = -1;  // exit status; -1 if killed by a signal
  std::string out;  // standard output only
  std::string err;  // standard error
};

class DataCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpt_data_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result run(const std::string& args) {
    const std::string err = (dir_ / "stderr.txt").string();
    const std::string cmd = std::string(GPT_BINARY) + " " + args + " 2>" + err;
    FILE* p = ::popen(cmd.c_str(), "r");
    Result r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int w = ::pclose(p);
    r.status = WIFEXITED(w) ? WEXITSTATUS(w) : -1;
    r.err = read(err);
    return r;
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::string write(const std::string& name, const std::string& content) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  static void expect_error(const Result& r, const std::vector<std::string>& needles) {
    EXPECT_EQ(r.status, 1) << r.err;
    for (const auto& s : needles)
      EXPECT_NE(r.err.find(s), std::string::npos) << "missing \"" << s << "\" in:\n" << r.err;
  }

  fs::path dir_;
};

TEST_F(DataCli, EncodeDecodeRoundTripAnyBytes) {
  std::mt19937 rng(4);
  std::string text;
  for (int i = 0; i < 200; ++i) text += test::random_text(rng, 10) + "\n";
  const std::string in = write("in.txt", text);
  for (const std::string& spec : {std::string("byte"), "gpt2:" + test::gpt2_dir()}) {
    const Result e = run("data encode --tokenizer " + spec + " " + in);
    ASSERT_EQ(e.status, 0) << e.err;
    EXPECT_NE(e.err.find("tokens/byte"), std::string::npos) << e.err;
    const std::string ids = write("ids.txt", e.out);
    const Result d = run("data decode --tokenizer " + spec + " " + ids);
    ASSERT_EQ(d.status, 0) << d.err;
    EXPECT_EQ(d.out, text) << spec;
  }
  // With --special, "<|endoftext|>" is the end-of-text id (GPT-2: 50256).
  const Result s = run("data encode --special --tokenizer gpt2:" + test::gpt2_dir() + " " +
                       write("s.txt", "Hello<|endoftext|>world"));
  ASSERT_EQ(s.status, 0) << s.err;
  EXPECT_EQ(s.out, "15496\n50256\n6894\n");
}

TEST_F(DataCli, TrainedVocabularyEndToEnd) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += "In the beginning was the word, and the word was " + std::to_string(i) + ".\n";
  const std::string corpus = write("corpus.txt", text), vocab = (dir_ / "v.bpe").string();
  const Result t = run("data train-tokenizer " + corpus + " " + vocab + " --vocab-size 300 --val-fraction 0.1");
  ASSERT_EQ(t.status, 0) << t.out << t.err;
  EXPECT_NE(t.out.find("vocabulary 300"), std::string::npos) << t.out;
  const Result s =
      run("data text " + corpus + " " + (dir_ / "ds").string() + " --tokenizer " + vocab + " --val-fraction 0.1");
  ASSERT_EQ(s.status, 0) << s.out << s.err;
  EXPECT_NE(s.out.find("vocabulary 300"), std::string::npos) << s.out;
  // Decoding the shards gives the text back: end-of-text shows as "<|endoftext|>".
  const Result train = run("data decode --tokenizer " + vocab + " " + (dir_ / "ds" / "ds_train_000001.bin").string());
  const Result val = run("data decode --tokenizer " + vocab + " " + (dir_ / "ds" / "ds_val_000000.bin").string());
  ASSERT_EQ(train.status, 0) << train.err;
  ASSERT_EQ(val.status, 0) << val.err;
  EXPECT_EQ(train.out + val.out, "<|endoftext|>" + text.substr(0, train.out.size() - 13) + "<|endoftext|>" +
                                     text.substr(train.out.size() - 13));
  EXPECT_LT(fs::file_size(dir_ / "ds" / "ds_train_000001.bin"), 1024 + text.size());  // fewer tokens than bytes
}

TEST_F(DataCli, BadInput) {
  const std::string text = write("t.txt", "abc\ndef\n");
  // Vocabulary files: missing, truncated, inconsistent.
  const std::string missing = (dir_ / "missing.bpe").string();
  expect_error(run("data encode --tokenizer " + missing + " " + text), {missing, "gpt2:DIR"});
  const std::string cut = write("cut.bpe", "gpt-bpe 1\npattern gpt2\nvocab_size 260\nmerges 3\n97 98\n");
  expect_error(run("data text " + text + " " + (dir_ / "o").string() + " --tokenizer " + cut), {cut, "truncated"});
  const std::string unknown = write("unknown.bpe", "gpt-bpe 1\npattern gpt2\nvocab_size 258\nmerges 1\n97 400\n");
  expect_error(run("data encode --tokenizer " + unknown + " " + text), {unknown, "400", "unknown token"});
  expect_error(run("data encode --tokenizer gpt2:" + (dir_ / "nope").string() + " " + text), {"nope", "not a folder"});
  // Ids outside the vocabulary: as text, and in a shard.
  expect_error(run("data decode --tokenizer byte " + write("ids.txt", "97\n98\n257\n")),
               {"ids.txt", "line 3", "257", "outside the vocabulary"});
  expect_error(run("data decode --tokenizer byte " + write("junk.txt", "97 x1\n")), {"junk.txt", "\"x1\""});
  const std::string shard = (dir_ / "big_val_000000.bin").string();
  write_shard(shard, {97, 98, 300}, 2);
  expect_error(run("data decode --tokenizer byte " + shard), {shard, "300", "vocabulary"});
  // Separators and sizes.
  expect_error(run("data text " + text + " " + (dir_ / "o").string() + " --doc-sep lines"), {"--doc-sep", "blank"});
  const Result small = run("data train-tokenizer " + text + " " + (dir_ / "v.bpe").string() + " --vocab-size 100");
  EXPECT_NE(small.status, 0);
  EXPECT_NE(small.err.find("--vocab-size"), std::string::npos) << small.err;
  expect_error(run("data encode --tokenizer byte " + (dir_ / "none.txt").string()), {"none.txt", "cannot open"});
}

}  // namespace
}  // namespace gpt

namespace gpt {
namespace {

// gpt data synthetic -> gpt train -> gpt eval --task, and the refusals.
TEST_F(DataCli, SyntheticTaskTrainsAndEvaluates) {
  const std::string data = (dir_ / "copy").string();
  Result r = run("data synthetic copy " + data +
                 " --context 32 --train-examples 200 --val-examples 20 --seed 4 "
                 "--max-length 8");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE((r.out + r.err).find("vocabulary 58"), std::string::npos) << r.out << r.err;
  for (const char* f :
       {"copy_train_000001.bin", "copy_train_000001.mask", "copy_val_000000.bin", "copy_val_000000.mask", "task.json"})
    EXPECT_TRUE(fs::exists(fs::path(data) / f)) << f;
  const std::string run_dir = (dir_ / "run").string();
  const std::string cfg =
      write("copy.json", R"({"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "vocab_size": 58,
    "context": 32}, "data": {"train": ")" +
                             data + R"(/copy_train_*.bin", "val": ")" + data +
                             R"(/copy_val_*.bin"}, "train": {"batch_size": 4, "steps": 3, "warmup_steps": 1},
    "eval": {"multiples": [1, 2], "tokens": 512}, "run": {"dir": ")" +
                             run_dir + R"("}})");
  r = run("train " + cfg + " --set train.threads=1");
  ASSERT_EQ(r.status, 0) << r.err;
  r = run("eval " + run_dir + " --task copy --multiples 1,2 --samples 4 --threads 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("copy exact match"), std::string::npos) << r.out;
  const std::string out = read(run_dir + "/eval/task_copy_step_00000003.json");
  EXPECT_NE(out.find("\"token_accuracy\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"context\": 64"), std::string::npos) << out;
  // The run's task is copy: another task name, --depths' sibling options of
  // the text passkey, and a task file that is not one are refused by name.
  r = run("eval " + run_dir + " --task mqar --threads 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("describes the task copy"), std::string::npos) << r.err;
  r = run("eval " + run_dir + " --task copy --passkey-digits 3 --threads 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--passkey-digits"), std::string::npos) << r.err;
  r = run("eval " + run_dir + " --task copy --task-file " + cfg + " --threads 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("not a synthetic task file"), std::string::npos) << r.err;
  r = run("eval " + run_dir + " --task-file " + data + " --threads 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--task-file belongs to --task"), std::string::npos) << r.err;
  // An option the task does not take.
  r = run("data synthetic copy " + data + " --context 32 --train-examples 2 --val-examples 2 --pairs 3");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--pairs is not an option of this task"), std::string::npos) << r.err;
}

// data.mix_task on byte text: training logs the mix and scores fewer targets
// than it reads; `gpt eval --task` finds the task in the run's config (ids
// above the 257 text ids) and the loss evaluation keeps bits per byte.
TEST_F(DataCli, MixedTaskTrainsOnTextAndEvaluatesFromTheRunsConfig) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "In the beginning was the word, and the word was " + std::to_string(i) + ".\n";
  const std::string corpus = write("corpus.txt", text), data = (dir_ / "text").string();
  Result r = run("data text " + corpus + " " + data + " --val-fraction 0.1");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string run_dir = (dir_ / "run").string();
  const std::string cfg = write("mix.json", R"({"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "vocab_size": 299,
    "context": 32}, "data": {"train": ")" + data +
                                                R"(/*_train_*.bin", "val": ")" + data +
                                                R"(/*_val_*.bin", "mix_task": "induction", "mix_fraction": 0.5,
    "mix_options": {"alphabet": 16}}, "train": {"batch_size": 4, "steps": 3, "warmup_steps": 1},
    "eval": {"multiples": [1, 2], "tokens": 512}, "run": {"dir": ")" +
                                                run_dir + R"("}})");
  r = run("train " + cfg + " --set train.threads=1");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string log = r.out + r.err;
  EXPECT_NE(log.find("50% of training sequences become induction examples"), std::string::npos) << log;
  EXPECT_NE(log.find("ids 257..298"), std::string::npos) << log;
  EXPECT_EQ(log.find("bits per byte left out"), std::string::npos) << log;
  const std::string metrics = read(run_dir + "/metrics.jsonl");
  EXPECT_NE(metrics.find("\"scored_tokens\""), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\"bits_per_byte\""), std::string::npos) << metrics;
  r = run("eval " + run_dir + " --task induction --multiples 1,2 --samples 4 --threads 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("induction exact match"), std::string::npos) << r.out;
  EXPECT_NE((r.out + r.err).find("(data.mix_task)"), std::string::npos) << r.out << r.err;
  const std::string out = read(run_dir + "/eval/task_induction_step_00000003.json");
  EXPECT_NE(out.find("\"base\": 257"), std::string::npos) << out;
  EXPECT_NE(out.find("\"task_file\": \"data.mix_task\""), std::string::npos) << out;
  // Another task than the mixed one has no task file to come from.
  expect_error(run("eval " + run_dir + " --task copy --threads 1"), {"data.mix_task is induction", "--task-file"});
  // The text passkey by its own name, and `passkey` falling back to it on a
  // run whose synthetic task is not a passkey (both write passkey_*.json).
  for (const char* task : {"text_passkey", "passkey"}) {
    r = run("eval " + run_dir + " --task " + task + " --passkey-digits 1 --multiples 1 --samples 2 --threads 1");
    ASSERT_EQ(r.status, 0) << task << r.err;
    EXPECT_NE(r.out.find("passkey exact match"), std::string::npos) << task << r.out;
    const bool fell_back = (r.out + r.err).find("no synthetic passkey") != std::string::npos;
    EXPECT_EQ(fell_back, std::string(task) == "passkey") << task << r.out << r.err;
  }
  EXPECT_TRUE(fs::exists(run_dir + "/eval/passkey_step_00000003.json"));
  expect_error(run("eval " + run_dir + " --task text_passkey --task-file x --threads 1"),
               {"--task-file belongs to a synthetic task"});
  // Too small a vocabulary for the task's ids, before anything is written.
  expect_error(run("train " + cfg + " --set model.vocab_size=280 --set run.dir=" + (dir_ / "run2").string()),
               {"model.vocab_size must be at least 299"});
  EXPECT_FALSE(fs::exists(dir_ / "run2"));
}

}  // namespace
}  // namespace gpt
