// Data-parallel training through mpirun on the gpt binary: 2 ranks with B/2
// sequences each follow the loss trajectory of 1 rank with B (with and without
// ZeRO-1), a 2-rank resume is bit-identical to an uninterrupted 2-rank run, a
// killed or hung rank ends the run with an error, SIGUSR1 stops every rank at
// the same step with a checkpoint. Skipped where mpirun or MPI support is
// missing. Runs as root too (CI), with Open MPI's consent variables.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "data/shard.h"
#include "dist/communicator.h"
#include "train/checkpoint.h"
#include "util/metrics_log.h"
#include "util/run_binary.h"

extern char** environ;
namespace fs = std::filesystem;

namespace gpt {
namespace {

// Relative tolerance of the loss trajectories of different rank counts. The
// arithmetic differs only in the order of float32 sums: each rank sums the
// gradient over its half of the rows and MPI adds the halves, where one rank
// sums all rows at once (the per-token loss weights are identical). Those
// rounding differences (~1e-7 relative per gradient element) enter the loss
// through AdamW updates of size ~lr, so over 20 steps of these tiny models
// the trajectories agree to ~1e-8 (measured); 1e-5 leaves a wide margin
// while a real error (a dropped rank, a wrong scale, a shifted batch slice)
// changes the loss at the first step by far more.
constexpr double kRelTol = 1e-5;

using test::Result;
using test::run_command;
using test::train_losses;

size_t count_events(const fs::path& run_dir, const std::string& event) {
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) n += nlohmann::json::parse(line)["event"] == event;
  return n;
}

// Pid of the child of `parent` that MPI launched as `rank` (0 if none yet).
pid_t rank_pid(pid_t parent, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t close = line.rfind(')');  // the command name may hold spaces
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    std::ifstream env(e.path() / "environ");
    const std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    if (all.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos)
      return static_cast<pid_t>(std::stoi(name));
  }
  return 0;
}

// rank_pid, retried for up to 2 s while mpirun starts its ranks.
pid_t wait_for_rank_pid(pid_t parent, int rank) {
  pid_t pid = 0;
  for (int i = 0; i < 100 && !pid; ++i, std::this_thread::sleep_for(std::chrono::milliseconds(20)))
    pid = rank_pid(parent, rank);
  return pid;
}

class DataParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    mpirun_ = test::find_in_path("mpirun");
    if (mpirun_.empty()) GTEST_SKIP() << "mpirun not found in PATH (install openmpi-bin: scripts/setup.sh)";
    if (!dist::built_with_mpi()) GTEST_SKIP() << "gpt was built without MPI (install libopenmpi-dev, reconfigure)";
    // Open MPI refuses to run as root without these (CI containers run as root);
    // the shared-memory transport's single-copy mode needs ptrace rights that
    // containers often lack.
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
    dir_ = fs::temp_directory_path() /
           ("gpt_dist_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "data");
    // Pseudo-random bytes with some structure to learn (each token depends on
    // the one before), 257-token vocabulary.
    std::vector<uint32_t> tokens(20000);
    uint64_t x = 12345;
    for (size_t i = 0; i < tokens.size(); ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      tokens[i] = static_cast<uint32_t>(i && (x >> 60) < 12 ? (tokens[i - 1] * 31 + 7) % 257 : (x >> 33) % 257);
    }
    write_shard((dir_ / "data" / "t_train_000001.bin").string(), tokens, 2);
    write_shard((dir_ / "data" / "t_val_000000.bin").string(), tokens, 2);
    std::ofstream(dir_ / "cfg.json")
        << R"({"model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "context": 16},
               "data": {"train": ")"
        << (dir_ / "data" / "t_train_*.bin").string() << R"(", "val": ")" << (dir_ / "data" / "t_val_*.bin").string()
        << R"("}, "train": {"batch_size": 8, "steps": 20, "warmup_steps": 2, "log_every": 100, "threads": 1},
               "eval": {"multiples": [1], "tokens": 256}})";
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string mpi(int ranks) const {
    return mpirun_ + " --oversubscribe --bind-to none -np " + std::to_string(ranks) + " " + GPT_BINARY;
  }
  // `gpt train cfg.json` on `ranks` ranks (0: without mpirun) into RUN, with --set overrides.
  Result train(int ranks, const std::string& run, const std::string& sets = "") const {
    const std::string gpt = ranks == 0 ? std::string(GPT_BINARY) : mpi(ranks);
    return run_command(gpt + " train " + (dir_ / "cfg.json").string() + " --set run.dir=" + (dir_ / run).string() +
                       " " + sets);
  }
  // Starts `gpt train` on 2 ranks for a long run in the background; returns mpirun's pid.
  pid_t start_long_run(const std::vector<std::string>& env = {}) {
    std::vector<std::string> args = {mpirun_,
                                     "--oversubscribe",
                                     "--bind-to",
                                     "none",
                                     "-np",
                                     "2",
                                     GPT_BINARY,
                                     "train",
                                     (dir_ / "cfg.json").string(),
                                     "--set",
                                     "run.dir=" + (dir_ / "long").string(),
                                     "--set",
                                     "train.steps=1000000"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> envs(env);
    for (char** e = environ; *e; ++e) envs.push_back(*e);
    std::vector<char*> envp;
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    log_ = (dir_ / "long.log").string();
    posix_spawn_file_actions_addopen(&actions, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = 0;
    EXPECT_EQ(posix_spawn(&pid, mpirun_.c_str(), &actions, nullptr, argv.data(), envp.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
    // Training has started on both ranks once steps appear in the metrics.
    const auto metrics = dir_ / "long" / "metrics.jsonl";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline && (!fs::exists(metrics) || fs::file_size(metrics) < 500))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return pid;
  }
  // After a stop signal: mpirun exits 130 with rank 0's checkpoint, and the
  // run resumes from it for two more steps.
  void expect_stopped_with_checkpoint_then_resume(pid_t pid) {
    const int w = wait_for(pid, 60);
    ASSERT_TRUE(WIFEXITED(w)) << log();
    EXPECT_EQ(WEXITSTATUS(w), 130) << log();
    EXPECT_NE(log().find("checkpoint saved"), std::string::npos) << log();
    EXPECT_NE(log().find("resume with: gpt train --resume"), std::string::npos) << log();
    std::ifstream latest(dir_ / "long" / "checkpoints" / "latest");
    std::string name;
    std::getline(latest, name);
    ASSERT_EQ(name.size(), 17u) << name;
    const int saved = std::stoi(name.substr(5, 8));
    EXPECT_GT(saved, 0);
    const Result r = run_command(mpi(2) + " train --resume " + (dir_ / "long").string() +
                                 " --set train.steps=" + std::to_string(saved + 2));
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  }
  // Waits up to `seconds` for pid; returns its wait status, or kills it and fails.
  int wait_for(pid_t pid, int seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    int wstatus = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid, &wstatus, WNOHANG) == pid) return wstatus;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &wstatus, 0);
    ADD_FAILURE() << "mpirun did not exit within " << seconds << " s:\n" << log();
    return wstatus;
  }
  std::string log() const {
    std::ifstream in(log_);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  // Loss trajectories a (reference) and b agree within kRelTol at every step.
  static void expect_close(const std::map<int, double>& a, const std::map<int, double>& b, const char* what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    double worst = 0;
    for (const auto& [step, la] : a) {
      const double lb = b.at(step), rel = std::abs(la - lb) / std::abs(la);
      worst = std::max(worst, rel);
      std::printf("[%s] step %2d: %.9f %.9f rel %.1e\n", what, step, la, lb, rel);
      EXPECT_LE(rel, kRelTol) << what << " step " << step;
    }
    std::printf("[%s] max relative difference over %zu steps: %.2e (tolerance %.0e)\n", what, a.size(), worst, kRelTol);
  }

  // 1 rank, 2 ranks and 2 ranks x 2 micro-batches of half the batch, with the
  // same overrides: the three follow one trajectory. Returns the 1-rank output.
  std::string expect_ranks_follow_one(const std::string& sets, const std::string& tag) {
    const Result one = train(0, "one", sets);
    EXPECT_EQ(one.status, 0) << one.output;
    const Result two = train(2, "two", sets);
    EXPECT_EQ(two.status, 0) << two.output;
    const Result accum = train(2, "accum", sets + " --set train.grad_accum=2 --set train.batch_size=4");
    EXPECT_EQ(accum.status, 0) << accum.output;
    const auto l1 = train_losses(dir_ / "one");
    EXPECT_EQ(l1.size(), 20u);
    expect_close(l1, train_losses(dir_ / "two"), (tag + ": 1 rank vs 2 ranks").c_str());
    expect_close(l1, train_losses(dir_ / "accum"), (tag + ": 1 rank vs 2 ranks x 2 micro-batches").c_str());
    return one.output;
  }

  // ZeRO-1 on 2 ranks with `sets` (which hold train.grad_accum = 2): the
  // trajectory of 1 rank, and exactly the plain 2-rank one (each update
  // element is computed by one rank with the same arithmetic, then copied by
  // the all-gather). Returns the 1-rank run's output.
  std::string expect_zero_one_follows_one_rank(const std::string& sets, const std::string& tag) {
    const Result one = train(0, "one", sets);
    EXPECT_EQ(one.status, 0) << one.output;
    const Result zero = train(2, "zero", sets + " --set train.zero=1");
    EXPECT_EQ(zero.status, 0) << zero.output;
    EXPECT_NE(zero.output.find("ZeRO-1"), std::string::npos) << zero.output;
    const Result plain = train(2, "plain", sets);
    EXPECT_EQ(plain.status, 0) << plain.output;
    expect_close(train_losses(dir_ / "one"), train_losses(dir_ / "zero"), (tag + ": 1 rank vs 2 ranks ZeRO-1").c_str());
    EXPECT_EQ(train_losses(dir_ / "zero"), train_losses(dir_ / "plain")) << tag;
    return one.output;
  }

  std::string mpirun_;
  fs::path dir_;
  std::string log_;
};

TEST_F(DataParallel, TwoRanksWithHalfTheBatchFollowOneRank) {
  const Result one = train(0, "one");
  ASSERT_EQ(one.status, 0) << one.output;
  const Result two = train(2, "two");
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_NE(two.output.find("data parallel: 2 ranks"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("4 of the 8 sequences"), std::string::npos) << two.output;
  // Only rank 0 logs and writes: one record per step, one final evaluation.
  EXPECT_EQ(count_events(dir_ / "two", "train"), 20u);
  EXPECT_EQ(count_events(dir_ / "two", "eval"), 1u);
  EXPECT_EQ(count_events(dir_ / "two", "checkpoint"), 1u);
  const auto l1 = train_losses(dir_ / "one"), l2 = train_losses(dir_ / "two");
  ASSERT_EQ(l1.size(), 20u);
  EXPECT_LT(l1.at(20), l1.at(1) - 0.1) << "the model should learn";
  expect_close(l1, l2, "1 rank vs 2 ranks");
}

// Loss masks with uneven counts per sequence: the ranks' scored targets are
// counted together, so 2 ranks (each its own count) follow 1 rank, with a
// wide initialisation under which a mean of the ranks' means would not.
TEST_F(DataParallel, TwoRanksWithLossMasksFollowOneRank) {
  for (const char* name : {"t_train_000001", "t_val_000000"}) {
    const std::string shard = (dir_ / "data" / (std::string(name) + ".bin")).string();
    const ShardInfo info = read_shard_header(shard);
    std::vector<uint8_t> mask(info.ntokens);
    for (uint64_t i = 0; i < info.ntokens; ++i) mask[i] = i % 16 < (i / 16) * 5 % 16;
    write_mask_shard(mask_path_for(shard), mask);
  }
  expect_ranks_follow_one("--set model.init_std=1.0", "masks");
}

// data.mix_task: the mixed examples depend on the sequence's number alone,
// so 2 ranks (and 2 ranks x 2 micro-batches) see the same examples, count the
// same scored targets and follow 1 rank.
TEST_F(DataParallel, TwoRanksWithAMixedTaskFollowOneRank) {
  const std::string sets =
      "--set data.mix_task=mqar --set data.mix_fraction=0.5 "
      "--set model.vocab_size=299 --set 'data.mix_options={\"pairs\": 3, \"keys\": 8, "
      "\"values\": 8}'";
  const std::string out = expect_ranks_follow_one(sets, "mix");
  EXPECT_NE(out.find("50% of training sequences become mqar examples"), std::string::npos) << out;
}

// ZeRO-1 with gradient accumulation: the same trajectory as one rank, and
// exactly the plain 2-rank one (expect_zero_one_follows_one_rank).
TEST_F(DataParallel, ZeroOneFollowsOneRankAndMatchesPlainDataParallel) {
  expect_zero_one_follows_one_rank("--set train.grad_accum=2 --set train.batch_size=4", "plain model");
}

// A per-layer plan whose second layer alone has the forget gate and ssmax
// scales (unused slices in layer 0): ZeRO-1 on 2 ranks follows 1 rank and
// is exactly the plain 2-rank run.
TEST_F(DataParallel, LayerPlanUnderZeroOneFollowsOneRank) {
  const std::string plan =
      "--set train.grad_accum=2 --set train.batch_size=4 --set model.layer_pattern=LG --set "
      "'model.layer_kinds={\"L\": {\"window\": 8}, \"G\": {\"position\": \"none\", \"attention\": "
      "{\"preset\": \"ssmax\", \"position_bias\": \"forget\"}}}'";
  const std::string one = expect_zero_one_follows_one_rank(plan, "plan");
  EXPECT_NE(one.find("layer plan: \"LG\" over 2 layers"), std::string::npos) << one;
}

// A modern block (docs/blocks.md): RMSNorm, SwiGLU, grouped-query attention,
// QK-norm, no biases, an untied head. ZeRO-1 on 2 ranks follows 1 rank and
// is exactly the plain 2-rank run.
TEST_F(DataParallel, ModernBlockUnderZeroOneFollowsOneRank) {
  const std::string block =
      "--set train.grad_accum=2 --set train.batch_size=4 --set model.norm=rmsnorm --set model.mlp=swiglu "
      "--set model.mlp_hidden=40 --set model.n_kv_head=1 --set model.qk_norm=rms --set model.bias=none "
      "--set model.head=untied --set model.qk_norm_scale=learned";
  const std::string one = expect_zero_one_follows_one_rank(block, "block");
  EXPECT_NE(one.find("block: 1 key/value heads"), std::string::npos) << one;
}

// Muon (docs/optimizers.md) under ZeRO-1: each rank forms the momentum
// update of its shard, the updates are all-gathered, and the matrices that
// overlap a rank's shard are orthogonalised there (one across the boundary on
// both ranks). The same trajectory as 1 rank, and exactly the plain 2-rank run.
TEST_F(DataParallel, MuonUnderZeroOneFollowsOneRank) {
  const std::string muon =
      "--set train.grad_accum=2 --set train.batch_size=4 --set model.norm=rmsnorm --set model.mlp=swiglu "
      "--set model.mlp_hidden=40 --set model.n_kv_head=1 --set model.bias=none --set train.optimizer=muon";
  const std::string one = expect_zero_one_follows_one_rank(muon, "muon");
  EXPECT_NE(one.find("optimizer muon"), std::string::npos) << one;
}

// run.storage "bf16" under ZeRO-1: each rank updates its shard of the
// float32 master parameters, the all-gather completes them, and every
// rank's next forward pass rounds the whole of them into its bf16 working
// copy; so ZeRO-1 gives exactly the plain 2-rank run, as in float32.
TEST_F(DataParallel, Bf16StorageZeroOneMatchesPlainDataParallel) {
  const std::string bf16 = "--set run.storage=bf16 --set train.grad_accum=2 --set train.batch_size=4";
  const Result zero = train(2, "zero", bf16 + " --set train.zero=1");
  ASSERT_EQ(zero.status, 0) << zero.output;
  EXPECT_NE(zero.output.find("ZeRO-1"), std::string::npos) << zero.output;
  EXPECT_NE(zero.output.find("bf16 storage"), std::string::npos) << zero.output;
  const Result plain = train(2, "plain", bf16);
  ASSERT_EQ(plain.status, 0) << plain.output;
  const auto lz = train_losses(dir_ / "zero"), lp = train_losses(dir_ / "plain");
  ASSERT_EQ(lz.size(), 20u);
  EXPECT_LT(lz.at(20), lz.at(1) - 0.1) << "the model should learn";
  EXPECT_EQ(lz, lp);
}

// Each layer's gradients reduced as soon as its backward pass is done (the
// default), with gradient accumulation (only the last micro-batch reduces):
// bit-identical to one reduction after the backward pass, losses and final
// parameters. With two ranks every sum is a + b either way.
TEST_F(DataParallel, OverlappedReductionEqualsOneReductionAfterBackward) {
  const std::string accum = "--set train.grad_accum=2 --set train.batch_size=4";
  const Result overlap = train(2, "overlap", accum);
  ASSERT_EQ(overlap.status, 0) << overlap.output;
  EXPECT_NE(overlap.output.find("gradient all-reduce overlapped with the backward pass"), std::string::npos)
      << overlap.output;
  const Result after = train(2, "after", accum + " --set train.overlap_reduce=0");
  ASSERT_EQ(after.status, 0) << after.output;
  EXPECT_EQ(after.output.find("overlapped"), std::string::npos) << after.output;
  const auto lo = train_losses(dir_ / "overlap"), la = train_losses(dir_ / "after");
  ASSERT_EQ(lo.size(), 20u);
  EXPECT_EQ(lo, la);
  const Checkpoint co = load_checkpoint((dir_ / "overlap" / "checkpoints" / "step_00000020.bin").string());
  const Checkpoint ca = load_checkpoint((dir_ / "after" / "checkpoints" / "step_00000020.bin").string());
  ASSERT_EQ(co.tensors.size(), ca.tensors.size());
  for (size_t i = 0; i < co.tensors.size(); ++i)
    EXPECT_EQ(co.tensors[i].data, ca.tensors[i].data) << co.tensors[i].name;
}

// A 2-rank ZeRO-1 run resumed from its step-10 checkpoint under 2 ranks ends
// bit-identical to the uninterrupted run (losses and the final checkpoint,
// gathered moments included); resumed with 1 rank it follows within kRelTol.
// The attention is the learned sink under differential attention, so the
// sink logits (attnsink) and differential attention's λ vectors and gain
// (attnlambda, attnsubln) are sharded, checkpointed and resumed with the rest.
TEST_F(DataParallel, ResumeUnderTwoRanksIsBitIdentical) {
  const Result a = train(2, "a",
                         "--set train.zero=1 --set train.checkpoint_every=10 --set attention.preset=sink "
                         "--set attention.differential=on");
  ASSERT_EQ(a.status, 0) << a.output;
  for (const char* run : {"b", "c"}) {
    fs::create_directories(dir_ / run / "checkpoints");
    fs::copy_file(dir_ / "a" / "checkpoints" / "step_00000010.bin", dir_ / run / "checkpoints" / "step_00000010.bin");
    std::ofstream(dir_ / run / "checkpoints" / "latest") << "step_00000010.bin\n";
  }
  const Result b = run_command(mpi(2) + " train --resume " + (dir_ / "b").string());
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_NE(b.output.find("resumed from"), std::string::npos) << b.output;
  const Result c = run_command(std::string(GPT_BINARY) + " train --resume " + (dir_ / "c").string());
  ASSERT_EQ(c.status, 0) << c.output;

  const auto la = train_losses(dir_ / "a"), lb = train_losses(dir_ / "b"), lc = train_losses(dir_ / "c");
  ASSERT_EQ(la.size(), 20u);
  ASSERT_EQ(lb.size(), 10u);
  std::map<int, double> la_tail(la.find(11), la.end());
  EXPECT_EQ(la_tail, lb);
  expect_close(la_tail, lc, "2 ranks vs resumed with 1 rank");
  const Checkpoint fa = load_checkpoint((dir_ / "a" / "checkpoints" / "step_00000020.bin").string());
  const Checkpoint fb = load_checkpoint((dir_ / "b" / "checkpoints" / "step_00000020.bin").string());
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  int learned = 0;
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    EXPECT_EQ(fa.tensors[i].data, fb.tensors[i].data) << fa.tensors[i].name;
    const std::string& name = fa.tensors[i].name;
    if (name != "param/attnsink" && name != "param/attnsubln") continue;
    ++learned;
    const float start = name == "param/attnsink" ? 0.0f : 1.0f;  // zeros (sink), ones (gain); trained 20 steps
    bool moved = false;
    for (float x : fa.tensors[i].data) moved = moved || x != start;
    EXPECT_TRUE(moved) << name << " should have been trained";
  }
  EXPECT_EQ(learned, 2) << "the checkpoint should hold the sink logits and the differential gain";
  bool lambda = false;
  for (const auto& t : fa.tensors) lambda = lambda || t.name == "param/attnlambda";
  EXPECT_TRUE(lambda) << "the checkpoint should hold differential attention's lambda vectors";
  EXPECT_EQ(fa.meta["loader"], fb.meta["loader"]);
  EXPECT_EQ(fa.meta["adam_steps"], fb.meta["adam_steps"]);
}

TEST_F(DataParallel, BatchNotDivisibleByRanksIsAnError) {
  const Result r = train(2, "odd", "--set train.batch_size=5");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("train.batch_size 5 (the global batch) must be divisible by the number of ranks 2"),
            std::string::npos)
      << r.output;
}

// A rank killed with SIGKILL: mpirun ends the other rank and exits non-zero,
// naming the rank.
TEST_F(DataParallel, KilledRankEndsTheRun) {
  const pid_t pid = start_long_run();
  const pid_t victim = wait_for_rank_pid(pid, 1);
  ASSERT_NE(victim, 0) << log();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const int w = wait_for(pid, 60);
  ASSERT_TRUE(WIFEXITED(w)) << log();
  EXPECT_NE(WEXITSTATUS(w), 0) << log();
  // Open MPI 4 says "process rank 1 ... exited on signal 9 (Killed)".
  const std::string out = log();
  EXPECT_TRUE(out.find("signal 9") != std::string::npos || out.find("Killed") != std::string::npos) << out;
}

// A rank that hangs (stopped with SIGSTOP; mpirun sees nothing wrong): the
// other rank gives up after GPT_DIST_TIMEOUT seconds in a collective.
TEST_F(DataParallel, HungRankMakesTheOthersExitAfterTheTimeout) {
  const pid_t pid = start_long_run({"GPT_DIST_TIMEOUT=2"});
  const pid_t victim = wait_for_rank_pid(pid, 1);
  ASSERT_NE(victim, 0) << log();
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  const int w = wait_for(pid, 60);
  ::kill(victim, SIGKILL);  // in case it survived
  ASSERT_TRUE(WIFEXITED(w)) << log();
  EXPECT_NE(WEXITSTATUS(w), 0) << log();
  EXPECT_NE(log().find("error: rank 0 of 2: waited"), std::string::npos) << log();
  EXPECT_NE(log().find("another rank died or hangs"), std::string::npos) << log();
}

// SIGUSR1 to mpirun (forwarded to every rank): all ranks stop at the same
// step, rank 0 saves, exit status 130, and the run resumes.
TEST_F(DataParallel, Sigusr1StopsEveryRankWithACheckpoint) {
  const pid_t pid = start_long_run();
  ASSERT_EQ(::kill(pid, SIGUSR1), 0);
  expect_stopped_with_checkpoint_then_resume(pid);
}

// SIGTERM, as a scheduler (SLURM, Kubernetes) sends it to every task before
// a kill, here to rank 1 alone: the ranks share the flag at the next step,
// so every rank stops at the same step, rank 0 saves, exit status 130, and
// the run resumes.
TEST_F(DataParallel, SigtermToOneRankStopsEveryRankWithACheckpoint) {
  const pid_t pid = start_long_run();
  const pid_t victim = wait_for_rank_pid(pid, 1);
  ASSERT_NE(victim, 0) << log();
  ASSERT_EQ(::kill(victim, SIGTERM), 0);
  expect_stopped_with_checkpoint_then_resume(pid);
}

}  // namespace
}  // namespace gpt
