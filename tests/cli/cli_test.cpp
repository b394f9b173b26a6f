// The gpt binary on bad input: every case exits non-zero with a message that
// names the problem, and never crashes. Also SIGINT during training.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "data/shard.h"

extern char** environ;
namespace fs = std::filesystem;

#include "util/metrics_log.h"
#include "util/run_binary.h"

namespace gpt {
namespace {

using test::Result;
using test::run;

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gpt_cli_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "data");
    std::vector<uint32_t> tokens(6000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((i * 7919) % 257);
    write_shard((dir_ / "data" / "t_train_000001.bin").string(), tokens, 2);
    write_shard((dir_ / "data" / "t_val_000000.bin").string(), tokens, 2);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A tiny valid config; `extra` is spliced into the top-level object.
  std::string config(const std::string& model_extra = "", const std::string& extra = "") {
    const std::string path = (dir_ / ("cfg" + std::to_string(n_++) + ".json")).string();
    std::ofstream(path) << R"({"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "context": 16)" << model_extra
                        << R"(}, "data": {"train": ")" << (dir_ / "data" / "t_train_*.bin").string() << R"(", "val": ")"
                        << (dir_ / "data" / "t_val_*.bin").string()
                        << R"("}, "train": {"batch_size": 2, "steps": 3, "warmup_steps": 1},
                            "eval": {"multiples": [1, 2], "tokens": 512}, "run": {"dir": ")"
                        << (dir_ / "run").string() << "\"}" << extra << "}";
    return path;
  }
  static void expect_error(const Result& r, const std::vector<std::string>& needles) {
    EXPECT_EQ(r.status, 1) << r.output;
    for (const auto& s : needles)
      EXPECT_NE(r.output.find(s), std::string::npos) << "missing \"" << s << "\" in:\n" << r.output;
  }

  // Starts a long run, sends `sig` once steps are logged, and checks that it
  // saved, exited 130 and resumes to completion.
  void interrupt_saves_and_resumes(int sig);

  fs::path dir_;
  int n_ = 0;
};

// A bare `gpt` prints the help and succeeds; errors name the source file
// relative to the repository, never the build machine's absolute path.
TEST_F(Cli, BareCommandPrintsHelpAndErrorsCarryNoAbsolutePath) {
  const Result help = run("");
  EXPECT_EQ(help.status, 0) << help.output;
  for (const char* s : {"Subcommands:", "train", "eval", "sweep"})
    EXPECT_NE(help.output.find(s), std::string::npos) << "missing \"" << s << "\" in:\n" << help.output;
  const Result e = run("train");
  expect_error(e, {"error:", "CONFIG"});
  EXPECT_NE(e.output.find("[src/cli/cmd_train.cpp:"), std::string::npos) << e.output;
  const std::string source_dir = GPT_SOURCE_DIR;
  EXPECT_EQ(e.output.find(source_dir), std::string::npos) << e.output;
}

TEST_F(Cli, TrainsAndEvaluatesATinyModel) {
  const Result r = run("train " + config());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("loss past T"), std::string::npos) << r.output;
  for (const char* f : {"config.json", "metrics.jsonl", "extrapolation.json", "checkpoints/latest"})
    EXPECT_TRUE(fs::exists(dir_ / "run" / f)) << f;
  const Result e = run("eval " + (dir_ / "run").string() + " --multiples 1,2,4 --tokens 256");
  ASSERT_EQ(e.status, 0) << e.output;
  EXPECT_NE(e.output.find("4x"), std::string::npos) << e.output;
  expect_error(run("eval " + (dir_ / "run").string() + " --multiples 2,1"), {"--multiples", "strictly increasing"});
  expect_error(run("eval " + (dir_ / "run").string() + " --multiples 1,8 --tokens 64"),
               {"eval.tokens", "must cover one scored window", "eval.span"});
  expect_error(run("eval " + (dir_ / "run").string() + " --multiples 1,32"), {"max(\"eval.multiples\")", "eval.span"});
  expect_error(run("eval " + (dir_ / "run").string() + " --stride 8"), {"--stride belongs to --protocol sliding"});
  // A longer span admits longer multiples, with an attention override too.
  const Result longer = run("eval " + (dir_ / "run").string() +
                            " --multiples 1,32 --span 512 --tokens 512 "
                            "--attention logn --out " +
                            (dir_ / "long.json").string());
  EXPECT_EQ(longer.status, 0) << longer.output;
  EXPECT_NE(longer.output.find("32x"), std::string::npos) << longer.output;
  expect_error(run("eval " + (dir_ / "run").string() + " --protocol sliding --stride 17"),
               {"\"eval.stride\" of the sliding protocol must be at most the shortest evaluated context"});
  // The data's end-of-text ids (256) open documents of exactly 256 tokens.
  const Result d = run("eval " + (dir_ / "run").string() + " --protocol documents --span 256 --tokens 512");
  EXPECT_EQ(d.status, 0) << d.output;
  EXPECT_NE(d.output.find("(documents protocol, 2 window(s) of 256 tokens"), std::string::npos) << d.output;
  expect_error(run("eval " + (dir_ / "run").string() + " --protocol documents --span 257 --tokens 514"),
               {"eval.protocol \"documents\"", "has 0 document(s) of at least eval.span = 257 tokens", "asks for 2"});
  const Result s = run("sample " + (dir_ / "run").string() + " --prompt abc --tokens 5 --seed 1");
  EXPECT_EQ(s.status, 0) << s.output;
  // The cpu computes in float32 only: --precision bf16 without --device cuda is refused.
  expect_error(run("eval " + (dir_ / "run").string() + " --precision bf16"),
               {"run.precision \"bf16\" with run.device \"cpu\""});
  expect_error(run("sample " + (dir_ / "run").string() + " --precision tf32 --tokens 2"),
               {"run.precision \"tf32\" with run.device \"cpu\""});
  // A tokenizer whose vocabulary is not the model's is refused.
  const std::string vocab = (dir_ / "v.txt").string();
  ASSERT_EQ(
      run("data train-tokenizer " + (dir_ / "run" / "config.json").string() + " " + vocab + " --vocab-size 300").status,
      0);
  expect_error(run("sample " + (dir_ / "run").string() + " --tokenizer " + vocab + " --tokens 2"),
               {"vocabulary of 257", "pass the tokenizer the model was trained with"});
  // A second fresh run into the same directory is refused (nothing overwritten).
  expect_error(run("train " + config()), {"already holds a training run", "--resume"});
}

// run.storage "bf16" on the cpu: bf16 activations over float32 master
// parameters. The run trains close to, but not exactly as, the float32 one;
// its checkpoint (float32 master parameters) resumes into the same steps;
// eval takes the run's storage unless --storage says otherwise.
TEST_F(Cli, Bf16StorageTrainsResumesAndEvaluates) {
  const std::string steps = " --set train.steps=6 --set train.checkpoint_every=3 --set train.log_every=1";
  const Result f = run("train " + config() + steps + " --set run.dir=" + (dir_ / "f32").string());
  ASSERT_EQ(f.status, 0) << f.output;
  const Result b = run("train " + config() + steps + " --set run.storage=bf16");
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_NE(b.output.find("device: cpu, bf16 storage"), std::string::npos) << b.output;
  std::ifstream cfg_in(dir_ / "run" / "config.json");
  EXPECT_EQ(nlohmann::json::parse(cfg_in).at("run").at("storage"), "bf16");
  const auto lf = test::train_losses(dir_ / "f32"), lb = test::train_losses(dir_ / "run");
  ASSERT_EQ(lf.size(), 6u);
  ASSERT_EQ(lb.size(), 6u);
  for (const auto& [step, loss] : lf) {
    EXPECT_NE(lb.at(step), loss) << "step " << step << ": bf16 storage rounded nothing";
    EXPECT_NEAR(lb.at(step), loss, 0.02 * loss) << "step " << step;
  }
  // Resume from step 3: the same steps 4-6 (the master parameters are float32 in the checkpoint).
  std::ofstream(dir_ / "run" / "checkpoints" / "latest") << "step_00000003.bin\n";
  const Result r = run("train --resume " + (dir_ / "run").string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto after = test::train_losses(dir_ / "run");
  for (int step = 4; step <= 6; ++step) EXPECT_NEAR(after.at(step), lb.at(step), 1e-6 * lb.at(step)) << step;
  // eval: the run's storage by default; --storage fp32 evaluates the same weights in float32.
  auto eval_losses = [&](const std::string& extra, const std::string& name) {
    const fs::path out = dir_ / name;
    const Result e =
        run("eval " + (dir_ / "run").string() + " --multiples 1,2 --tokens 256 --out " + out.string() + extra);
    EXPECT_EQ(e.status, 0) << e.output;
    std::ifstream in(out);
    const nlohmann::json j = nlohmann::json::parse(in);
    std::vector<double> v;
    for (const auto& m : j.at("multiples")) v.push_back(m.at("loss").get<double>());
    return v;
  };
  const auto eb = eval_losses("", "eb.json"), ef = eval_losses(" --storage fp32", "ef.json");
  ASSERT_EQ(eb.size(), 2u);
  ASSERT_EQ(ef.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NE(eb[i], ef[i]) << i;
    EXPECT_NEAR(eb[i], ef[i], 0.02 * ef[i]) << i;
  }
  const Result bad = run("eval " + (dir_ / "run").string() + " --storage fp16");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("--storage: fp16 not in {fp32,bf16}"), std::string::npos) << bad.output;
  expect_error(run("train " + config() + " --set run.storage=fp16 --set run.dir=" + (dir_ / "x").string()),
               {"run.storage", "fp32, bf16"});
}

// Training-free evaluation with another attention variant: compatible
// overrides run and are recorded; incompatible ones are refused with the reason.
TEST_F(Cli, EvalWithAnotherAttentionVariant) {
  ASSERT_EQ(run("train " + config()).status, 0);
  const std::string runs = (dir_ / "run").string(), out = (dir_ / "info.json").string();
  const Result e = run("eval " + runs + " --attention infoscale --tokens 256 --out " + out);
  ASSERT_EQ(e.status, 0) << e.output;
  EXPECT_NE(e.output.find("infoscale (dot, infoscale, exp, l1)"), std::string::npos) << e.output;
  EXPECT_NE(e.output.find("entropy (nats) by layer"), std::string::npos) << e.output;
  const auto j = nlohmann::json::parse(std::ifstream(out));
  EXPECT_EQ(j["attention"]["preset"], "infoscale");
  EXPECT_EQ(j["attention"]["scale"], "infoscale");
  EXPECT_EQ(j["attention"]["override"], true);
  ASSERT_EQ(j["multiples"][0]["attention_diagnostics"].size(), 1u);  // one layer
  EXPECT_EQ(j["multiples"][0]["attention_diagnostics"][0]["entropy_per_head"].size(), 2u);
  // Stage overrides on top of the trained variant.
  EXPECT_EQ(run("eval " + runs + " --attention-set scale=logn --attention-set p=15 --tokens 256").status, 0);
  expect_error(run("eval " + runs + " --attention lssa"), {"cosine scores", "score type cannot change"});
  expect_error(run("eval " + runs + " --attention ssmax"), {"learned per-head scales (ssmax s_h", "does not have"});
  expect_error(run("eval " + runs + " --attention-set scale=bogus"), {"attention.scale", "infoscale"});
  expect_error(run("eval " + runs + " --attention-set nokey=1"), {"attention.nokey"});
  const Result bad = run("eval " + runs + " --attention nosuch");  // CLI11's own exit status
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.status, -1);
  EXPECT_NE(bad.output.find("nosuch not in {softmax,logn"), std::string::npos) << bad.output;
}

// A run with parameters beyond its variant's (the forget gate, the output
// gate): --attention swaps the stages and keeps those, recorded in the
// results; dropping them, or adding a sink the checkpoint lacks, is refused.
TEST_F(Cli, EvalWithAnotherVariantKeepsTheGates) {
  const std::string runs = (dir_ / "gated").string(), out = (dir_ / "gated.json").string();
  ASSERT_EQ(run("train " + config() + " --set attention.position_bias=forget --set attention.output_gate=sigmoid" +
                " --set run.dir=" + runs)
                .status,
            0);
  const Result e = run("eval " + runs + " --attention softmax1 --tokens 256 --out " + out);
  ASSERT_EQ(e.status, 0) << e.output;
  const auto j = nlohmann::json::parse(std::ifstream(out));
  EXPECT_EQ(j["attention"]["preset"], "softmax1");
  EXPECT_EQ(j["attention"]["position_bias"], "forget");
  EXPECT_EQ(j["attention"]["output_gate"], "sigmoid");
  expect_error(run("eval " + runs + " --attention-set position_bias=none"), {"forget", "cannot be added, dropped"});
  expect_error(run("eval " + runs + " --attention-set output_gate=none"),
               {"would drop the output gate's projection W_g (ogatew)"});
  expect_error(run("eval " + runs + " --attention sink"), {"learned sink logits", "does not have"});
}

// Differential attention's λ vectors and gain belong to the checkpoint too:
// another variant keeps it (both maps change), dropping it is refused.
TEST_F(Cli, EvalWithAnotherVariantKeepsDifferentialAttention) {
  const std::string runs = (dir_ / "diff").string(), out = (dir_ / "diff.json").string();
  ASSERT_EQ(run("train " + config() + " --set attention.differential=on --set run.dir=" + runs).status, 0);
  const Result e = run("eval " + runs + " --attention stick_breaking --tokens 256 --out " + out);
  ASSERT_EQ(e.status, 0) << e.output;
  const auto j = nlohmann::json::parse(std::ifstream(out));
  EXPECT_EQ(j["attention"]["preset"], "stick_breaking");
  EXPECT_EQ(j["attention"]["differential"], "on");
  expect_error(run("eval " + runs + " --attention-set differential=none"),
               {"would drop differential attention's lambda (attnlambda)", "checkpoint"});
}

// Training-free evaluation with context-extension methods (gpt eval
// --context METHOD[,METHOD] --context-set key=value): recorded in the
// results JSON beside the attention; refused combinations name both parts;
// --context with a number keeps its meaning (the mean-loss mode's length).
TEST_F(Cli, EvalWithContextExtensionMethods) {
  ASSERT_EQ(run("train " + config()).status, 0);
  const std::string runs = (dir_ / "run").string(), out = (dir_ / "ctx.json").string();
  const Result plain = run("eval " + runs + " --tokens 256 --out " + (dir_ / "plain.json").string());
  ASSERT_EQ(plain.status, 0) << plain.output;
  const Result e = run("eval " + runs + " --context yarn,window --context-set window=24 --tokens 256 --out " + out);
  ASSERT_EQ(e.status, 0) << e.output;
  EXPECT_NE(e.output.find("context extension: yarn s=L/N (t=0.1 ln s + 1), window 24"), std::string::npos) << e.output;
  const auto j = nlohmann::json::parse(std::ifstream(out));
  const auto p = nlohmann::json::parse(std::ifstream(dir_ / "plain.json"));
  EXPECT_EQ(j["context"]["rope_scaling"], "yarn");
  EXPECT_EQ(j["context"]["mask"], "window");
  EXPECT_EQ(j["context"]["window"], 24);
  EXPECT_EQ(j["context"]["override"], true);
  EXPECT_EQ(p["context"]["rope_scaling"], "none");
  EXPECT_EQ(p["context"]["override"], false);
  // 1x (16 tokens, inside the window of 24, s = 1) is the plain model; 2x is not.
  EXPECT_EQ(j["multiples"][0]["loss"], p["multiples"][0]["loss"]);
  EXPECT_NE(j["multiples"][1]["loss"], p["multiples"][1]["loss"]);
  EXPECT_EQ(run("eval " + runs + " --context llama4_temp,sinks --context-set sinks=2 --tokens 256").status, 0);
  EXPECT_EQ(run("eval " + runs + " --context ntk --context-set factor=4 --tokens 256").status, 0);
  for (const char* m : {"rerope", "self_extend", "lambda", "streaming_llm", "rerope,yarn"}) {
    const Result r = run("eval " + runs + " --context " + m + " --tokens 256 --out " + (dir_ / "m.json").string());
    ASSERT_EQ(r.status, 0) << m << "\n" << r.output;
    const auto jm = nlohmann::json::parse(std::ifstream(dir_ / "m.json"));
    EXPECT_NE(jm["context"]["remap"], "none") << m;
  }
  expect_error(run("eval " + runs + " --context pi,yarn"), {"\"pi\" and \"yarn\"", "RoPE frequency rule"});
  expect_error(run("eval " + runs + " --context rerope2"), {"rerope2", "valid: pi, ntk"});
  expect_error(run("eval " + runs + " --context window --context-set window=32 --multiples 1,2"),
               {"never hide a key", "context.window"});
  expect_error(run("eval " + runs + " --context-set attn_factor=2"), {"context.attn_factor", "yarn"});
  expect_error(run("eval " + runs + " --context yarn --context-set factor=0.5"), {"context.factor"});
  // The mean-loss mode's --context T still works.
  const Result ml = run("eval " + runs + " --context 8 --batch 2 --batches 2");
  ASSERT_EQ(ml.status, 0) << ml.output;
  EXPECT_NE(ml.output.find("val loss"), std::string::npos) << ml.output;
}

// A model trained with a window and partial RoPE: the run records both,
// and alibi refuses a RoPE rule naming both keys.
TEST_F(Cli, TrainsWithContextMethods) {
  const Result t = run("train " + config(R"(, "rope_fraction": 0.5)",
                                         R"(, "context": {"mask": "sinks", "sinks": 2, "window": 6,
                                               "temperature": "llama4", "temp_floor": 8})"));
  ASSERT_EQ(t.status, 0) << t.output;
  EXPECT_NE(t.output.find("context extension: sinks 2 + window 6, temperature llama4 (beta=0.1, F=8)"),
            std::string::npos)
      << t.output;
  const auto j = nlohmann::json::parse(std::ifstream(dir_ / "run" / "extrapolation.json"));
  EXPECT_EQ(j["context"]["mask"], "sinks");
  EXPECT_EQ(j["context"]["rope_rot_dims"], 4);
  expect_error(run("train " + config(R"(, "position": "alibi")", R"(, "context": {"rope_scaling": "yarn"})")),
               {"context.rope_scaling", "model.position"});
}

// An lssa run evaluated with re-weighting added (how early LSSAR was used).
TEST_F(Cli, LssaRunEvaluatedWithReweighting) {
  ASSERT_EQ(run("train " + config("", R"(, "attention": {"preset": "lssa"})")).status, 0);
  const std::string out = (dir_ / "r.json").string();
  const Result e = run("eval " + (dir_ / "run").string() + " --attention-set p=15 --tokens 256 --out " + out);
  ASSERT_EQ(e.status, 0) << e.output;
  const auto j = nlohmann::json::parse(std::ifstream(out));
  EXPECT_EQ(j["attention"]["p"], 15.0);
  EXPECT_EQ(j["attention"]["score"], "cosine");
  EXPECT_EQ(run("eval " + (dir_ / "run").string() + " --attention lssar --tokens 256").status, 0);
}

// ssmax's learned scales are parameters: in the checkpoint, and required.
TEST_F(Cli, SsmaxRunKeepsItsLearnedScales) {
  ASSERT_EQ(run("train " + config("", R"(, "attention": {"preset": "ssmax"})")).status, 0);
  const std::string runs = (dir_ / "run").string();
  expect_error(run("eval " + runs + " --attention softmax"), {"would drop the learned per-head scales (ssmax s_h"});
  EXPECT_EQ(run("eval " + runs + " --attention-set p=15 --tokens 256").status, 0);
}

TEST_F(Cli, MissingConfigFile) {
  const Result r = run("train " + (dir_ / "nope.json").string());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.status, -1);
  EXPECT_NE(r.output.find("nope.json"), std::string::npos) << r.output;
}

TEST_F(Cli, ConfigErrors) {
  expect_error(run("train " + config(", \"n_heads\": 2")), {"unknown key", "model.n_heads", "n_head"});
  expect_error(run("train " + config() + " --set train.lr=abc"), {"train.lr", "number"});
  expect_error(run("train " + config() + " --set model.n_layer=0"), {"model.n_layer", "1..256"});
  expect_error(run("train " + config() + " --set model.position=sinusoidal"),
               {"model.position", "learned, rope, none, alibi"});
  expect_error(run("train " + config() + " --set nosuch.key=1"), {"nosuch"});
  // GEMM precisions other than fp32 need run.device cuda; refused before anything is written.
  expect_error(run("train " + config() + " --set run.precision=bf16"),
               {"run.precision \"bf16\" with run.device \"cpu\"", "valid: run.precision \"fp32\" on cpu"});
  EXPECT_FALSE(fs::exists(dir_ / "run" / "checkpoints"));
  expect_error(run("train " + config() + " --set run.precision=fp16"), {"run.precision", "fp32, tf32, bf16"});
  std::ofstream(dir_ / "broken.json") << "{\"model\": {";
  expect_error(run("train " + (dir_ / "broken.json").string()), {"broken.json"});
}

TEST_F(Cli, ContextBeyondLearnedPositionTable) {
  expect_error(run("train " + config(", \"position\": \"learned\"")), {"learned positions", "position table"});
}

TEST_F(Cli, ShardErrors) {
  // Wrong magic.
  {
    std::ofstream f(dir_ / "data" / "bad_train_000001.bin", std::ios::binary);
    std::vector<int32_t> header(256, 0);
    header[0] = 12345;
    header[1] = 1;
    header[2] = 4;
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
    f.write("\0\0\0\0\0\0\0\0", 8);
  }
  expect_error(run("train " + config() + " --set data.train=" + (dir_ / "data" / "bad_train_*.bin").string()),
               {"bad_train_000001.bin", "magic"});
  // Size disagreeing with the header.
  fs::copy_file(dir_ / "data" / "t_train_000001.bin", dir_ / "data" / "short_train_000001.bin");
  fs::resize_file(dir_ / "data" / "short_train_000001.bin", 1024 + 100);
  expect_error(run("train " + config() + " --set data.train=" + (dir_ / "data" / "short_train_*.bin").string()),
               {"short_train_000001.bin", "size"});
  // Token ids at or above the vocabulary.
  std::vector<uint32_t> big(4000, 300);
  write_shard((dir_ / "data" / "big_train_000001.bin").string(), big, 2);
  expect_error(run("train " + config() + " --set data.train=" + (dir_ / "data" / "big_train_*.bin").string()),
               {"big_train_000001.bin", "300"});
  // No file matches.
  expect_error(run("train " + config() + " --set data.train=" + (dir_ / "data" / "none_*.bin").string()),
               {"none_*.bin"});
}

TEST_F(Cli, CheckpointErrors) {
  ASSERT_EQ(run("train " + config()).status, 0);
  // Resume with another model shape.
  expect_error(run("train " + config(", \"n_embd\": 32") + " --resume " + (dir_ / "run").string()),
               {"model", "differs"});
  // Corrupt and missing checkpoints.
  const std::string ckpt = (dir_ / "run" / "checkpoints" / "step_00000003.bin").string();
  ASSERT_TRUE(fs::exists(ckpt));
  fs::resize_file(ckpt, fs::file_size(ckpt) - 100);
  expect_error(run("eval " + ckpt), {"step_00000003.bin", "truncated"});
  expect_error(run("eval " + (dir_ / "nothing.bin").string()), {"nothing.bin"});
  std::ofstream(dir_ / "junk.bin") << "not a checkpoint, only some text to fill more than 32 bytes";
  expect_error(run("eval " + (dir_ / "junk.bin").string()), {"junk.bin", "magic"});
}

// Weights of 1e30 overflow in the first step: the run stops with the step
// and the tensor, after saving the last good state (here: the initial one).
TEST_F(Cli, NonFiniteStepStopsAndSavesLastGoodState) {
  expect_error(run("train " + config() + " --set model.init_std=1e30"),
               {"non-finite", "at step 1", "in tensor", "step_00000000.bin"});
  EXPECT_TRUE(fs::exists(dir_ / "run" / "checkpoints" / "step_00000000.bin"));
}

// SIGINT (Ctrl-C) and SIGTERM (what cluster schedulers send before a kill)
// during training save a checkpoint and exit with status 130; the run then
// resumes to completion.
TEST_F(Cli, SigintSavesCheckpointAndResumes) { interrupt_saves_and_resumes(SIGINT); }
TEST_F(Cli, SigtermSavesCheckpointAndResumes) { interrupt_saves_and_resumes(SIGTERM); }

void Cli::interrupt_saves_and_resumes(int sig) {
  const std::string cfg = config();
  const std::string log = (dir_ / "log.txt").string();
  const pid_t pid = test::spawn({"train", cfg, "--set", "train.steps=100000", "--set", "train.threads=1"}, log);
  ASSERT_NE(pid, 0);
  // Wait for a few training steps to appear in the metrics.
  const auto metrics = dir_ / "run" / "metrics.jsonl";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && (!fs::exists(metrics) || fs::file_size(metrics) < 300))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(::kill(pid, sig), 0);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  std::ifstream in(log);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(wstatus)) << output;
  EXPECT_EQ(WEXITSTATUS(wstatus), 130) << output;
  EXPECT_NE(output.find("checkpoint saved"), std::string::npos) << output;
  EXPECT_NE(output.find("resume with: gpt train --resume"), std::string::npos) << output;
  ASSERT_TRUE(fs::exists(dir_ / "run" / "checkpoints" / "latest"));
  // Resume from the saved step and finish two more steps.
  std::ifstream latest(dir_ / "run" / "checkpoints" / "latest");
  std::string name;
  std::getline(latest, name);
  const int saved = std::stoi(name.substr(5, 8));  // step_NNNNNNNN.bin
  EXPECT_GT(saved, 0);
  const std::string total = std::to_string(saved + 2);
  const Result r = run("train --resume " + (dir_ / "run").string() + " --set train.steps=" + total);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step " + std::string(total.size() < 5 ? 5 - total.size() : 0, ' ') + total + "/" + total),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace gpt
