// The gpt binary with run.device "cuda", end to end: training follows the
// CPU step by step, a run resumed from a device checkpoint continues as the
// uninterrupted one, and eval, sample and bench run on the device. Skipped where
// no CUDA device is usable; in the CUDA emulator build
// (-DGPT_CUDA_EMULATOR=ON, scripts/test.sh) they run on the CPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "data/orbits.h"
#include "data/shard.h"
#include "dist/communicator.h"
#include "util/metrics_log.h"
#include "util/run_binary.h"

namespace gpt {
namespace {

namespace fs = std::filesystem;
using test::Result;
using test::run;

class CudaCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
    dir_ = fs::temp_directory_path() /
           ("gpt_cuda_cli_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "data");
    std::vector<uint32_t> tokens(8000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((i * 7919 + i / 13) % 257);
    write_shard((dir_ / "data" / "t_train_000001.bin").string(), tokens, 2);
    write_shard((dir_ / "data" / "t_val_000000.bin").string(), tokens, 2);
    // Head size 16 (the smallest the CUDA attention kernels take), two
    // layers, RoPE; a checkpoint every 3 steps.
    config_ = (dir_ / "config.json").string();
    std::ofstream(config_) << R"({"model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "context": 16, "position": "rope"},
      "data": {"train": ")" << (dir_ / "data" / "t_train_*.bin").string()
                           << R"(", "val": ")" << (dir_ / "data" / "t_val_*.bin").string() << R"("},
      "train": {"batch_size": 4, "steps": 6, "warmup_steps": 1, "log_every": 1, "checkpoint_every": 3},
      "eval": {"multiples": [1, 2], "tokens": 256}})";
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // gpt train CONFIG into dir_/name on `device`; env: "VAR=value " to prefix
  // the command with; extra: more arguments.
  Result train(const std::string& name, const std::string& device, const std::string& env = "",
               const std::string& extra = "") {
    return test::run_command(env + GPT_BINARY + " train " + config_ + " --set run.dir=" + (dir_ / name).string() +
                             " --set run.device=" + device + extra);
  }
  // The validation loss at each multiple from an extrapolation or eval JSON.
  static std::vector<double> losses(const fs::path& json_file) {
    std::ifstream in(json_file);
    const auto j = nlohmann::json::parse(in);
    std::vector<double> out;
    for (const auto& m : j.at("multiples")) out.push_back(m.at("loss").get<double>());
    return out;
  }
  // Points run_dir's checkpoints/latest at step 3 and resumes the run; the
  // losses of metrics.jsonl then hold the resumed records of steps 4-6.
  std::map<int, double> resume_from_step_3(const fs::path& run_dir) {
    std::ofstream(run_dir / "checkpoints" / "latest") << "step_00000003.bin\n";
    const Result resumed = run("train --resume " + run_dir.string());
    EXPECT_EQ(resumed.status, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
    return test::train_losses(run_dir);
  }
  // Both runs logged all 6 steps, and run b's loss at each is within rel of run a's.
  static void expect_losses_follow(const fs::path& a, const fs::path& b, double rel, const char* what) {
    const auto la = test::train_losses(a), lb = test::train_losses(b);
    ASSERT_EQ(la.size(), 6u) << a;
    ASSERT_EQ(lb.size(), 6u) << b;
    for (const auto& [step, loss] : la) expect_close(lb.at(step), loss, rel, what, step);
  }
  static void expect_close(double a, double b, double rel, const char* what, size_t at) {
    EXPECT_LE(std::abs(a - b), rel * std::abs(b)) << what << " " << at << ": " << a << " vs " << b;
  }

  fs::path dir_;
  std::string config_;
};

// Float32 GEMMs on both (run.precision fp32): the losses agree to float32
// rounding of differently ordered sums (the tolerance of
// CudaOps.TinyModelTrainsLikeCpu).
TEST_F(CudaCli, TrainingOnTheDeviceFollowsTheCpu) {
  const Result cpu = train("cpu", "cpu");
  ASSERT_EQ(cpu.status, 0) << cpu.output;
  const Result gpu = train("cuda", "cuda");
  ASSERT_EQ(gpu.status, 0) << gpu.output;
  ASSERT_NO_FATAL_FAILURE(expect_losses_follow(dir_ / "cpu", dir_ / "cuda", 1e-4, "train loss at step"));
  const auto ec = losses(dir_ / "cpu" / "extrapolation.json"), eg = losses(dir_ / "cuda" / "extrapolation.json");
  ASSERT_EQ(ec.size(), 2u);
  ASSERT_EQ(eg.size(), 2u);
  for (size_t i = 0; i < ec.size(); ++i) expect_close(eg[i], ec[i], 1e-4, "validation loss, multiple index", i);
}

// The checkpoint at step 3 (written from device memory) resumes on the
// device into the same steps 4-6 as the run that went straight through.
TEST_F(CudaCli, DeviceCheckpointResumesIntoTheSameRun) {
  const Result r = train("cuda", "cuda");
  ASSERT_EQ(r.status, 0) << r.output;
  const fs::path run_dir = dir_ / "cuda";
  const auto straight = test::train_losses(run_dir);
  ASSERT_EQ(straight.size(), 6u);
  ASSERT_TRUE(fs::exists(run_dir / "checkpoints" / "step_00000003.bin"));
  const auto after = resume_from_step_3(run_dir);
  for (int step = 4; step <= 6; ++step)
    expect_close(after.at(step), straight.at(step), 1e-5, "resumed loss at step", step);
}

// run.storage "bf16" on the device follows bf16 storage on the cpu (a
// rounding to bf16 may differ by one step where the float32 kernels do:
// 1e-2), and its checkpoint resumes into the same steps.
TEST_F(CudaCli, Bf16StorageOnTheDeviceFollowsTheCpu) {
  const std::string bf16 = " --set run.storage=bf16";
  const Result cpu = train("cpu", "cpu", "", bf16);
  ASSERT_EQ(cpu.status, 0) << cpu.output;
  const Result gpu = train("cuda", "cuda", "", bf16);
  ASSERT_EQ(gpu.status, 0) << gpu.output;
  EXPECT_NE(gpu.output.find("bf16 storage"), std::string::npos) << gpu.output;
  ASSERT_NO_FATAL_FAILURE(expect_losses_follow(dir_ / "cpu", dir_ / "cuda", 1e-2, "bf16-storage train loss at step"));
  const auto lg = test::train_losses(dir_ / "cuda");
  const auto after = resume_from_step_3(dir_ / "cuda");
  for (int step = 4; step <= 6; ++step)
    expect_close(after.at(step), lg.at(step), 1e-4, "bf16-storage resumed loss at step", step);
}

// GPT_DIST_NCCL=1 sends a one-GPU run through the NCCL communicator (the
// parameter broadcast, the overlapped per-layer all-reduce): with one rank
// the losses are those of the plain run. (Skipped in builds without NCCL.)
TEST_F(CudaCli, OneRankThroughNcclTrainsAsThePlainRun) {
  if (!dist::built_with_nccl()) GTEST_SKIP() << "this build has no NCCL";
  const Result plain = train("plain", "cuda");
  ASSERT_EQ(plain.status, 0) << plain.output;
  const Result nccl = train("nccl", "cuda", "GPT_DIST_NCCL=1 ");
  ASSERT_EQ(nccl.status, 0) << nccl.output;
  EXPECT_NE(nccl.output.find("NCCL"), std::string::npos) << nccl.output;
  ASSERT_NO_FATAL_FAILURE(expect_losses_follow(dir_ / "plain", dir_ / "nccl", 1e-5, "train loss through NCCL at step"));
}

// eval and sample read a checkpoint onto the device; eval agrees with the CPU.
TEST_F(CudaCli, EvalAndSampleOnTheDevice) {
  const Result r = train("cpu", "cpu");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string run_dir = (dir_ / "cpu").string();
  for (const std::string device : {"cpu", "cuda"}) {
    const Result e = run("eval " + run_dir + " --device " + device + " --multiples 1,2,4 --tokens 256 --out " +
                         (dir_ / ("eval_" + device + ".json")).string());
    ASSERT_EQ(e.status, 0) << e.output;
  }
  const auto ec = losses(dir_ / "eval_cpu.json"), eg = losses(dir_ / "eval_cuda.json");
  ASSERT_EQ(ec.size(), 3u);
  ASSERT_EQ(eg.size(), 3u);
  for (size_t i = 0; i < ec.size(); ++i) expect_close(eg[i], ec[i], 1e-4, "eval loss, multiple index", i);
  // Context extension on the device: frequency rules, masks, temperatures and
  // the distance remappings (the far copy of q and k) agree with the CPU.
  for (const std::string methods :
       {"yarn,sinks,llama4_temp --context-set window=20 --context-set sinks=2",
        "rerope,yarn --context-set remap_window=5", "streaming_llm --context-set window=9"}) {
    for (const std::string device : {"cpu", "cuda"}) {
      const Result e = run("eval " + run_dir + " --device " + device + " --context " + methods +
                           " --multiples 1,2,4 --tokens 256 --out " + (dir_ / ("ctx_" + device + ".json")).string());
      ASSERT_EQ(e.status, 0) << e.output;
    }
    const auto cc = losses(dir_ / "ctx_cpu.json"), cg = losses(dir_ / "ctx_cuda.json");
    ASSERT_EQ(cg.size(), 3u);
    SCOPED_TRACE(methods);
    for (size_t i = 0; i < cc.size(); ++i) expect_close(cg[i], cc[i], 1e-4, "context eval loss, multiple index", i);
  }
  const Result s = run("sample " + run_dir + " --device cuda --tokens 24 --seed 7");
  ASSERT_EQ(s.status, 0) << s.output;
  EXPECT_FALSE(s.output.empty());
  const Result bad = run("sample " + run_dir + " --device cuda --tokens 24 --precision fp16");
  EXPECT_NE(bad.status, 0) << bad.output;
}

// The evaluation protocols on the device and with bf16 storage: sliding
// windows and documents score the same windows on cpu and cuda (the "scored"
// record agrees) and the losses agree as in EvalAndSampleOnTheDevice (float32:
// 1e-4; bf16 storage, where one rounding may differ: 1e-2). The data's
// end-of-text ids (256, the byte tokenizer's) open the documents.
TEST_F(CudaCli, ProtocolsOnTheDeviceAndWithBf16Storage) {
  const Result r = train("cpu", "cpu");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string run_dir = (dir_ / "cpu").string();
  struct Case {
    std::string args;
    std::string storage;
    double rel;
  };
  const std::vector<Case> cases = {
      {"--protocol sliding --stride 8 --span 64 --tokens 256", "fp32", 1e-4},
      {"--protocol documents --span 64 --tokens 256", "fp32", 1e-4},
      {"--protocol sliding --stride 8 --span 64 --tokens 256", "bf16", 1e-2},
      {"--protocol documents --span 64 --tokens 256", "bf16", 1e-2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args + " storage " + c.storage);
    nlohmann::json out[2];
    int k = 0;
    for (const std::string device : {"cpu", "cuda"}) {
      const fs::path file = dir_ / ("protocol_" + device + ".json");
      const Result e = run("eval " + run_dir + " --device " + device + " --storage " + c.storage +
                           " --multiples 1,2,4 " + c.args + " --out " + file.string());
      ASSERT_EQ(e.status, 0) << e.output;
      std::ifstream in(file);
      out[k++] = nlohmann::json::parse(in);
    }
    EXPECT_EQ(out[0].at("scored"), out[1].at("scored"));
    const std::string protocol = c.args.find("sliding") != std::string::npos ? "sliding" : "documents";
    EXPECT_EQ(out[1].at("scored").at("protocol"), protocol);
    ASSERT_EQ(out[0].at("multiples").size(), 3u);
    ASSERT_EQ(out[1].at("multiples").size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      const double lc = out[0]["multiples"][i].at("loss").get<double>();
      const double lg = out[1]["multiples"][i].at("loss").get<double>();
      EXPECT_TRUE(std::isfinite(lg));
      EXPECT_EQ(out[0]["multiples"][i].at("tokens"), out[1]["multiples"][i].at("tokens"));
      expect_close(lg, lc, c.rel, "protocol eval loss, multiple index", i);
    }
  }
}

// gpt bench --device cuda on the tiny model: every row of the GEMM,
// training, evaluation and memory parts is made (times are not checked).
TEST_F(CudaCli, BenchOnTheDeviceMakesEveryRow) {
  const Result b =
      run("bench " + config_ + " --device cuda --only gemm,train,eval,memory --steps 1 --square 64 --min-seconds 0");
  ASSERT_EQ(b.status, 0) << b.output;
  for (const char* row : {"square 64^3", "step fwd+bwd+AdamW B=4 T=16", "forward losses B=4 T=16",
                          "eval 1x: 1 sequence of 16", "eval 16x: 1 sequence of 256", "device memory +"})
    EXPECT_NE(b.output.find(row), std::string::npos) << "no \"" << row << "\" in:\n" << b.output;
  const Result bad = run("bench " + config_ + " --device cuda --only train --precision fp8");
  EXPECT_NE(bad.status, 0) << bad.output;
}

// gpt probe force on the device (the regression head's forward and
// backward through the backend's matmul) follows the CPU: each step's loss,
// and the fitted exponents of the predictions.
TEST_F(CudaCli, ForceProbeOnTheDeviceFollowsTheCpu) {
  orbits::DataOptions d;
  d.out_dir = (dir_ / "orbits").string();
  d.train_sequences = 12;
  d.val_sequences = 8;
  d.orbit.rows = 40;
  d.orbit.max_planets = 1;
  orbits::write_orbit_data(d);
  const std::string pre = (dir_ / "pre").string();
  const Result p = run("train " + config_ + " --set model.vocab_size=7002 --set data.train=" + d.out_dir +
                       "/orbits_train_*.bin --set data.val=" + d.out_dir +
                       "/orbits_val_*.bin --set data.tokenizer=none --set train.steps=2 --set run.dir=" + pre);
  ASSERT_EQ(p.status, 0) << p.output;
  const std::string common = " --data " + d.out_dir +
                             " --steps 6 --batch 4 --labelled-sequences 6 --sparse-sequences 2 --eval-sequences 4"
                             " --log-every 1 --from " + pre;
  const Result c = run("probe force --device cpu --out " + (dir_ / "probe_cpu").string() + common);
  ASSERT_EQ(c.status, 0) << c.output;
  const Result g = run("probe force --device cuda --out " + (dir_ / "probe_cuda").string() + common);
  ASSERT_EQ(g.status, 0) << g.output;
  ASSERT_NO_FATAL_FAILURE(expect_losses_follow(dir_ / "probe_cpu", dir_ / "probe_cuda", 1e-4, "probe loss at step"));
  const auto rc = nlohmann::json::parse(std::ifstream(dir_ / "probe_cpu" / "results.json"));
  const auto rg = nlohmann::json::parse(std::ifstream(dir_ / "probe_cuda" / "results.json"));
  for (const char* k : {"a", "b", "c"})
    EXPECT_NEAR(rg["model"][k]["value"].get<double>(), rc["model"][k]["value"].get<double>(), 1e-3) << k;
}

}  // namespace
}  // namespace gpt
