// Training-loop tests: resume equivalence and an end-to-end run on KJV bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/tokens.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "data/text_to_shards.h"
#include "train/model_io.h"
#include "train/trainer.h"
#include "util/metrics_log.h"
#include "util/run_binary.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

using test::train_losses;

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("gpt_trainer_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Part of the King James Bible, from Debian's bible-kjv (installed by
// scripts/setup.sh). books: a verse range for `bible -f`.
std::string kjv_text(const std::string& range) {
  const std::string cmd = "bible -f " + range + " </dev/null 2>/dev/null | cut -d' ' -f2-";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string text;
  if (!p) return text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  ::pclose(p);
  return text;
}

// Writes shards for `text` into dir and returns a config that trains on them.
// doc_sep: how the text splits into documents (TextToShardsOptions).
Config tiny_run(const fs::path& dir, const std::string& text, const std::string& doc_sep = "none") {
  std::ofstream(dir / "corpus.txt") << text;
  TextToShardsOptions opt;
  opt.val_fraction = 0.1;
  opt.doc_sep = doc_sep;
  text_to_shards((dir / "corpus.txt").string(), (dir / "data").string(), opt);
  Config c;
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.n_embd = 32;
  c.model.context = 32;
  c.data.train = (dir / "data" / "data_train_*.bin").string();
  c.data.val = (dir / "data" / "data_val_*.bin").string();
  c.train.batch_size = 4;
  c.train.warmup_steps = 2;
  c.train.log_every = 100;
  c.eval.multiples = {1, 2};
  c.eval.tokens = 2048;
  return c;
}

// A model's learned attention parameters beyond the plain ones (edit: what
// the test sets; empty: the plain model) resume with the rest.
// tensors: parameters the checkpoint must hold.
void expect_resume_bit_identical(const std::string& name, void (*edit)(Config&),
                                 const std::vector<std::string>& tensors = {}) {
  const fs::path dir = temp_dir("resume_" + name);
  const std::string text = kjv_text("Gen1:1-Gen10:32");
  ASSERT_GT(text.size(), 10000u) << "the bible command (Debian package bible-kjv) is needed; run scripts/setup.sh";
  Config cfg = tiny_run(dir, text);
  if (edit) edit(cfg);
  const int n = 6;
  cfg.train.steps = 2 * n;
  cfg.train.checkpoint_every = n;
  cfg.train.grad_accum = 2;

  // A: 2n steps in one go (it also saves a checkpoint at step n).
  cfg.run.dir = (dir / "a").string();
  ASSERT_EQ(run_training(cfg, ""), 0);
  // B: starts from A's checkpoint at step n and trains the remaining n steps.
  const std::string b_dir = (dir / "b").string();
  save_run_checkpoint(b_dir, n, load_checkpoint(checkpoint_path(cfg.run.dir, n)));
  Config cfg_b = cfg;
  cfg_b.run.dir = b_dir;
  ASSERT_EQ(run_training(cfg_b, resolve_checkpoint(b_dir)), 0);

  const auto la = train_losses(dir / "a"), lb = train_losses(dir / "b");
  ASSERT_EQ(la.size(), 2u * n);
  ASSERT_EQ(lb.size(), static_cast<size_t>(n));
  for (int s = n + 1; s <= 2 * n; ++s) {
    std::printf("[resume] step %2d: uninterrupted %.17g resumed %.17g\n", s, la.at(s), lb.at(s));
    EXPECT_EQ(la.at(s), lb.at(s)) << "step " << s;
  }
  const Checkpoint fa = load_checkpoint(checkpoint_path(cfg.run.dir, 2 * n));
  const Checkpoint fb = load_checkpoint(checkpoint_path(b_dir, 2 * n));
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i)
    EXPECT_EQ(fa.tensors[i].data, fb.tensors[i].data) << fa.tensors[i].name;
  for (const std::string& t : tensors) {
    bool found = false;
    for (const auto& ct : fa.tensors) found = found || ct.name == "param/" + t;
    EXPECT_TRUE(found) << name << ": the checkpoint should hold " << t;
  }
  fs::remove_all(dir);
}

TEST(Trainer, ResumeIsBitIdenticalToAnUninterruptedRun) { expect_resume_bit_identical("plain", nullptr); }

// The contenders' parameters (KERPLE's ρ, the forget gate's projection, the
// output gate, FIRE's block, differential attention's λ vectors and gain) in
// the checkpoint, resumed bit for bit.
TEST(Trainer, ContendersParametersResumeBitIdentically) {
  expect_resume_bit_identical("kerple",
                              [](Config& c) {
                                c.model.position = "none";
                                c.attention.position_bias = "kerple_power";
                              },
                              {"attnkerple"});
  expect_resume_bit_identical("forget_gate",
                              [](Config& c) {
                                c.attention.position_bias = "forget";
                                c.attention.output_gate = "sigmoid";
                                c.attention.preset = "sink";
                              },
                              {"fgatew", "fgateb", "ogatew", "ogateb", "attnsink"});
  expect_resume_bit_identical("fire",
                              [](Config& c) {
                                c.model.position = "none";
                                c.attention.position_bias = "fire";
                              },
                              {"attnfire"});
  expect_resume_bit_identical("differential",
                              [](Config& c) {
                                c.attention.preset = "stick_breaking";
                                c.attention.differential = "on";
                              },
                              {"attnlambda", "attnsubln"});
}

// A per-layer plan (a windowed RoPE layer, then a NoPE layer with the sink
// and the output gate) resumes bit for bit, its layers' parameters with it.
TEST(Trainer, LayerPlanResumesBitIdentically) {
  expect_resume_bit_identical("layer_plan",
                              [](Config& c) {
                                c.model.layer_pattern = "LG";
                                c.model.layer_kinds = nlohmann::json::parse(R"({"L": {"window": 16},
            "G": {"position": "none", "attention": {"preset": "sink", "output_gate": "sigmoid"}}})");
                              },
                              {"attnsink", "ogatew", "ogateb"});
}

// The modern block's tensors (docs/blocks.md: RMSNorm gains without biases,
// SwiGLU's fused gate and up, the grouped qkv, QK-norm's gains, the untied
// head) in the checkpoint, resumed bit for bit, with the parallel residual.
TEST(Trainer, ModernBlockResumesBitIdentically) {
  expect_resume_bit_identical("modern_block",
                              [](Config& c) {
                                c.model.norm = "rmsnorm";
                                c.model.norm_eps = 1e-6;
                                c.model.mlp = "swiglu";
                                c.model.mlp_hidden = 40;
                                c.model.bias = "none";
                                c.model.n_kv_head = 1;
                                c.model.qk_norm = "rms";
                                c.model.qk_norm_scale = "learned";
                                c.model.head = "untied";
                                c.model.residual = "parallel";
                              },
                              {"lmhead", "qnormw", "knormw", "qkscale", "fcw", "qkvw"});
}

// Muon (docs/optimizers.md): its momentum in the checkpoint's first-moment
// tensors, resumed bit for bit; a checkpoint resumed with the other optimizer
// is refused with the reason.
TEST(Trainer, MuonResumesBitIdentically) {
  expect_resume_bit_identical("muon", [](Config& c) {
    c.train.optimizer = "muon";
    c.model.mlp = "swiglu";
    c.model.n_kv_head = 1;
  });
}

TEST(Trainer, ResumingWithTheOtherOptimizerIsRefused) {
  const fs::path dir = temp_dir("optimizer_switch");
  Config cfg = tiny_run(dir, kjv_text("Gen1:1-Gen5:32"));
  cfg.train.steps = 2;
  cfg.train.optimizer = "muon";
  cfg.run.dir = (dir / "a").string();
  ASSERT_EQ(run_training(cfg, ""), 0);
  const Checkpoint ck = load_checkpoint(checkpoint_path(cfg.run.dir, 2));
  EXPECT_EQ(ck.meta.at("optimizer"), "muon");
  Config other = cfg;
  other.train.optimizer = "adamw";
  other.train.steps = 4;
  other.run.dir = (dir / "b").string();
  save_run_checkpoint(other.run.dir, 2, ck);
  try {
    run_training(other, resolve_checkpoint(other.run.dir));
    ADD_FAILURE() << "resuming Muon's state with AdamW should be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds the state of train.optimizer \"muon\""), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Trainer, SameSeedGivesIdenticalLosses) {
  const fs::path dir = temp_dir("determinism");
  Config cfg = tiny_run(dir, kjv_text("Gen1:1-Gen10:32"));
  cfg.train.steps = 4;
  cfg.run.dir = (dir / "a").string();
  ASSERT_EQ(run_training(cfg, ""), 0);
  cfg.run.dir = (dir / "b").string();
  ASSERT_EQ(run_training(cfg, ""), 0);
  EXPECT_EQ(train_losses(dir / "a"), train_losses(dir / "b"));
  fs::remove_all(dir);
}

// Gives every shard matching `pattern` a loss mask: token i of a shard is
// scored iff i % 32 < (i / 32) * 11 % 32, so sequences of 32 tokens score
// very different numbers of targets.
void write_uneven_masks(const std::string& pattern) {
  for (const std::string& path : glob_files(pattern)) {
    const ShardInfo info = read_shard_header(path);
    std::vector<uint8_t> mask(info.ntokens);
    for (uint64_t i = 0; i < info.ntokens; ++i) mask[i] = i % 32 < (i / 32) * 11 % 32;
    write_mask_shard(mask_path_for(path), mask);
  }
}

// Trains cfg (6 steps, batch 4, a checkpoint at step 3) in dir/one, the same
// as 2 micro-batches of 2 in dir/accum, and resumes dir/one's step-3
// checkpoint in dir/resumed: the two splits follow the same trajectory and the
// resumed run is bit-identical. Returns dir/one's losses.
std::map<int, double> expect_splits_and_resume_agree(Config cfg, const fs::path& dir, const char* tag) {
  cfg.train.steps = 6;
  cfg.train.checkpoint_every = 3;
  cfg.run.dir = (dir / "one").string();
  EXPECT_EQ(run_training(cfg, ""), 0);
  Config accum = cfg;
  accum.train.batch_size = 2;
  accum.train.grad_accum = 2;
  accum.run.dir = (dir / "accum").string();
  EXPECT_EQ(run_training(accum, ""), 0);
  const auto l1 = train_losses(dir / "one"), l2 = train_losses(dir / "accum");
  EXPECT_EQ(l1.size(), 6u);
  EXPECT_EQ(l2.size(), 6u);
  for (int step = 1; step <= 6 && l1.count(step) && l2.count(step); ++step) {
    const double rel = std::abs(l1.at(step) - l2.at(step)) / l1.at(step);
    std::printf("[%s] step %d: one micro-batch %.9f, two %.9f, rel %.1e\n", tag, step, l1.at(step), l2.at(step), rel);
    EXPECT_LT(rel, 1e-5) << tag << " step " << step;
  }
  const std::string b_dir = (dir / "resumed").string();
  save_run_checkpoint(b_dir, 3, load_checkpoint(checkpoint_path(cfg.run.dir, 3)));
  Config cfg_b = cfg;
  cfg_b.run.dir = b_dir;
  EXPECT_EQ(run_training(cfg_b, resolve_checkpoint(b_dir)), 0);
  const auto lb = train_losses(dir / "resumed");
  for (int step = 4; step <= 6; ++step)
    EXPECT_EQ(lb.count(step) ? lb.at(step) : -1.0, l1.count(step) ? l1.at(step) : -2.0) << tag << " step " << step;
  return l1;
}

// The losses by step of cfg trained in dir for `steps` steps.
std::map<int, double> train_twin(Config cfg, const fs::path& dir, int steps) {
  cfg.train.steps = steps;
  cfg.run.dir = dir.string();
  EXPECT_EQ(run_training(cfg, ""), 0);
  return train_losses(dir);
}

// gpt eval of a finished run's checkpoint gives the losses of the trainer's
// own final evaluation, bit for bit; returns that evaluation's results.
nlohmann::json expect_eval_repeats_training(const fs::path& run, const char* why) {
  std::ifstream in(run / "extrapolation.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  const fs::path out = run / "eval_again.json";
  const test::Result ev = test::run("eval " + run.string() + " --out " + out.string());
  EXPECT_EQ(ev.status, 0) << ev.output;
  if (ev.status != 0) return j;
  std::ifstream ein(out);
  const nlohmann::json e = nlohmann::json::parse(ein);
  for (size_t m = 0; m < j.at("multiples").size(); ++m)
    EXPECT_EQ(j["multiples"][m]["loss"], e.at("multiples")[m]["loss"]) << why;
  return j;
}

// Training-time position ids (train.positions; train/position_ids.h) are
// drawn per global row: one micro-batch of 4 and two of 2 see the same ids
// and follow one trajectory, and a resumed run draws the same ids, bit for
// bit. The results JSON names the ids that trained the model, and PoSE's
// steps differ from plain training's (the ids reach RoPE).
TEST(Trainer, PositionIdsFollowTheRowsAndResume) {
  const fs::path dir = temp_dir("position_ids");
  Config cfg = tiny_run(dir, kjv_text("Gen1:1-Gen10:32"));
  cfg.train.positions = "pose";
  cfg.train.pose_chunks = 3;
  const auto pose = expect_splits_and_resume_agree(cfg, dir / "pose", "pose");
  Config plain = cfg;
  plain.train.positions = "plain";
  const auto flat = train_twin(plain, dir / "plain", 2);
  ASSERT_TRUE(pose.count(2) && flat.count(2));
  EXPECT_NE(pose.at(1), flat.at(1)) << "the same weights and tokens at step 1: PoSE's ids must change the loss";
  EXPECT_NE(pose.at(2), flat.at(2));
  std::ifstream in(dir / "pose" / "one" / "extrapolation.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("train_positions").at("kind"), "pose");
  EXPECT_EQ(j.at("train_positions").at("chunks"), 3);
  EXPECT_EQ(j.at("train_positions").at("span"), 16 * 32);
  Config rnd = cfg;
  rnd.train.positions = "randomized";
  rnd.train.position_span = 100;
  expect_splits_and_resume_agree(rnd, dir / "randomized", "randomized");
  fs::remove_all(dir);
}

// The document mask (train.document_mask; every verse line a document, so
// that most windows of 32 bytes cross a boundary), with position ids that
// restart per document and with PoSE's: micro-batch splits agree, resume is
// bit-identical, the mask changes training, and the results JSON records it.
TEST(Trainer, DocumentMaskFollowsTheRowsAndResumes) {
  const fs::path dir = temp_dir("document_mask");
  Config cfg = tiny_run(dir, kjv_text("Gen1:1-Gen10:32"), "regex:\\n");
  cfg.train.document_mask = "on";
  const auto masked = expect_splits_and_resume_agree(cfg, dir / "mask", "document mask");
  Config plain = cfg;
  plain.train.document_mask = "off";
  // (Step 1's four windows may cross no document boundary: the seed's first
  // batch here does not, and its loss is the plain one, bit for bit.)
  const auto flat = train_twin(plain, dir / "plain", 3);
  ASSERT_TRUE(masked.count(3) && flat.count(3));
  EXPECT_NE(std::make_tuple(masked.at(2), masked.at(3)), std::make_tuple(flat.at(2), flat.at(3)))
      << "the mask must change training";
  std::ifstream in(dir / "mask" / "one" / "extrapolation.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("train_documents").at("mask"), "on");
  Config restart = cfg;
  restart.train.document_positions = "restart";
  restart.train.positions = "pose";
  const auto r = expect_splits_and_resume_agree(restart, dir / "restart", "document mask + restart + pose");
  ASSERT_TRUE(r.count(1));
  EXPECT_NE(r.at(1), masked.at(1)) << "PoSE's ids, restarted, must change RoPE's positions";
  fs::remove_all(dir);
}

// The window warm-up (train.window_start; train/schedule.h): windows of 8,
// 16 and 24 keys of 32 over the first 5 steps, full attention from step 5;
// micro-batch splits agree, a resume from step 3 (between two stages) is
// bit-identical, the first step differs from plain training, and the
// evaluation (unwindowed) is recorded with the warm-up.
TEST(Trainer, WindowWarmupFollowsItsStagesAndResumes) {
  const fs::path dir = temp_dir("window_warmup");
  Config cfg = tiny_run(dir, kjv_text("Gen1:1-Gen10:32"));
  cfg.train.window_start = 8;
  cfg.train.window_steps = 5;
  const auto warm = expect_splits_and_resume_agree(cfg, dir / "warm", "window warm-up");
  Config plain = cfg;
  plain.train.window_start = 0;
  const auto flat = train_twin(plain, dir / "plain", 2);
  ASSERT_TRUE(warm.count(1) && flat.count(1));
  EXPECT_NE(warm.at(1), flat.at(1)) << "a window of 8 keys must change step 1";
  // Still in the warm-up when training ends (window_steps > steps): the
  // trainer's evaluation is gpt eval's of the checkpoint, which knows
  // nothing of the warm-up.
  Config mid = cfg;
  mid.train.window_steps = 100;
  train_twin(mid, dir / "mid", 2);
  const nlohmann::json j = expect_eval_repeats_training(dir / "mid", "evaluation runs unwindowed");
  EXPECT_EQ(j.at("train_window").at("start"), 8);
  fs::remove_all(dir);
}

// YaRN at each switch of the window warm-up (train.grow_yarn): stage 0
// runs RoPE's own frequencies (step 1 as without it, bit for bit), the
// switches change the later steps; micro-batch splits agree and a resume
// from step 3, across the switch to stage 2, is bit-identical. The results
// name the grown windows, and gpt eval of the checkpoint (whose config grows
// the same frequencies) reproduces the trainer's evaluation.
TEST(Trainer, WindowWarmupGrowsRopeWithYarnAndResumes) {
  const fs::path dir = temp_dir("window_yarn");
  Config cfg = tiny_run(dir, kjv_text("Gen1:1-Gen10:32"));
  cfg.train.window_start = 8;
  cfg.train.window_steps = 5;  // windows 8, 8, 16, 24, then 32 at steps 1..5
  const auto warm = train_twin(cfg, dir / "plain", 4);
  cfg.train.grow_yarn = "on";
  const auto grown = expect_splits_and_resume_agree(cfg, dir / "yarn", "window warm-up + yarn");
  ASSERT_TRUE(warm.count(4) && grown.count(4));
  EXPECT_EQ(grown.at(1), warm.at(1)) << "no switch before step 1";
  EXPECT_NE(grown.at(3), warm.at(3)) << "the switch to 16 keys must change the frequencies";
  EXPECT_NE(grown.at(4), warm.at(4));
  const nlohmann::json j =
      expect_eval_repeats_training(dir / "yarn" / "one", "evaluation keeps the grown frequencies");
  EXPECT_EQ(j.at("train_window").at("yarn"), "on");
  EXPECT_EQ(j.at("context").at("grown_windows"), (std::vector<int>{8, 16, 24, 32}));
  fs::remove_all(dir);
}

// The length schedule (train.length_start; train/schedule.h): each step's
// 4 windows of 32 tokens are trained as 16 windows of 8 (steps 1-2), 8 of 16
// (step 3), then whole (from step 4); micro-batch splits agree, a resume at
// the switch to 32 is bit-identical, step 1 differs from plain training, and
// the results record it. With grow_yarn the switches grow RoPE (8 -> 16 -> 32).
TEST(Trainer, LengthScheduleCutsTheWindowsAndResumes) {
  const fs::path dir = temp_dir("length_schedule");
  Config cfg = tiny_run(dir, kjv_text("Gen1:1-Gen10:32"));
  cfg.train.length_start = 8;
  cfg.train.length_steps = 4;
  const auto staged = expect_splits_and_resume_agree(cfg, dir / "staged", "length schedule");
  Config plain = cfg;
  plain.train.length_start = 0;
  const auto flat = train_twin(plain, dir / "plain", 2);
  ASSERT_TRUE(staged.count(1) && flat.count(1));
  EXPECT_NE(staged.at(1), flat.at(1)) << "windows of 8 tokens must change step 1";
  std::ifstream in(dir / "staged" / "one" / "extrapolation.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("train_length").at("start"), 8);
  EXPECT_EQ(j.at("trained_context"), 32);
  cfg.train.grow_yarn = "on";
  const auto grown = expect_splits_and_resume_agree(cfg, dir / "yarn", "length schedule + yarn");
  EXPECT_EQ(grown.at(1), staged.at(1)) << "no switch before step 1";
  EXPECT_NE(grown.at(3), staged.at(3));
  std::ifstream yin(dir / "yarn" / "one" / "extrapolation.json");
  EXPECT_EQ(nlohmann::json::parse(yin).at("context").at("grown_windows"), (std::vector<int>{8, 16, 32}));
  fs::remove_all(dir);
}

// With loss masks a step's loss and gradient are those of the mean over all
// its scored targets: 4 sequences in one micro-batch and 2 + 2 in two
// micro-batches (different scored counts each) follow the same trajectory,
// where an average of the micro-batch means would not (a wide initialisation
// makes the per-position losses differ). Resuming is bit-identical.
TEST(Trainer, MaskedLossWeighsEveryScoredTargetOfTheStepAlike) {
  const fs::path dir = temp_dir("masks");
  Config cfg = tiny_run(dir, kjv_text("Gen1:1-Gen10:32"));
  write_uneven_masks(cfg.data.train);
  write_uneven_masks(cfg.data.val);
  cfg.model.init_std = 1.0;
  expect_splits_and_resume_agree(cfg, dir, "masks");
  // Every step records its scored targets, fewer than its 4 x 32.
  std::ifstream in(dir / "one" / "metrics.jsonl");
  std::string line;
  int steps_seen = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["event"] == "train") {
      ++steps_seen;
      ASSERT_TRUE(j.contains("scored_tokens")) << line;
      EXPECT_GT(j["scored_tokens"].get<int64_t>(), 0);
      EXPECT_LT(j["scored_tokens"].get<int64_t>(), 4 * 32);
    }
    if (j["event"] == "eval") {
      const auto& row = j["results"]["multiples"][0];
      EXPECT_LT(row["tokens"].get<int64_t>(), j["results"]["tokens_per_multiple"].get<int64_t>())
          << "the validation masks leave targets out";
      EXPECT_GT(row["tokens"].get<int64_t>(), 0);
    }
  }
  EXPECT_EQ(steps_seen, 6);
  fs::remove_all(dir);
}

// data.mix_task: half the sequences become induction examples above the
// text's 257 ids, scored on their answers alone. Each step's scored count is
// what the mixer gives the step's sequence numbers (32 per text row); 4
// sequences in one micro-batch and 2 + 2 in two follow the same trajectory
// (the examples depend on the sequence number, not on the split); resuming
// is bit-identical.
TEST(Trainer, MixedSyntheticTaskScoresItsAnswersWhateverTheSplit) {
  const fs::path dir = temp_dir("mix");
  Config cfg = tiny_run(dir, kjv_text("Gen1:1-Gen10:32"));
  cfg.data.mix_task = "induction";
  cfg.data.mix_fraction = 0.5;
  cfg.data.mix_options = {{"alphabet", 16}};
  cfg.model.vocab_size = 257 + synth::kFirstSymbol + 16;
  cfg.model.init_std = 1.0;
  expect_splits_and_resume_agree(cfg, dir, "mix");
  const SyntheticMixer mixer("induction", cfg.data.mix_options, 0.5, 257, cfg.train.seed);
  std::ifstream in(dir / "one" / "metrics.jsonl");
  std::string line;
  int replaced = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["event"] != "train") continue;
    const int step = j["step"].get<int>();
    std::vector<int32_t> x(4 * 32, 0), y(4 * 32, 0);  // text rows score all 32
    replaced += mixer.apply(x.data(), y.data(), 4, 32, static_cast<uint64_t>(step - 1) * 4);
    const int64_t want = 4 * 32 - std::count(y.begin(), y.end(), kIgnoreTarget);
    ASSERT_TRUE(j.contains("scored_tokens")) << line;
    EXPECT_EQ(j["scored_tokens"].get<int64_t>(), want) << "step " << step;
  }
  EXPECT_GT(replaced, 0);
  EXPECT_LT(replaced, 24);
  fs::remove_all(dir);
}

// Unigram entropy (nats) of the token ids of a shard stream.
double unigram_entropy(const std::string& pattern) {
  TokenStream s(pattern, 257);
  std::vector<int32_t> ids(s.size());
  s.read(0, s.size(), ids.data());
  std::vector<double> count(257, 0.0);
  for (int32_t id : ids) count[id] += 1;
  double h = 0;
  for (double c : count)
    if (c > 0) h -= c / ids.size() * std::log(c / ids.size());
  return h;
}

TEST(Trainer, LearnsKjvWellBelowUnigramEntropy) {
  const fs::path dir = temp_dir("e2e");
  Config cfg = tiny_run(dir, kjv_text("Gen1:1-Exo40:38"));
  cfg.model.n_embd = 64;
  cfg.model.n_head = 4;
  cfg.model.context = 64;
  cfg.train.batch_size = 8;
  cfg.train.steps = 150;
  cfg.train.lr = 3e-3;
  cfg.train.lr_min = 3e-4;
  cfg.train.warmup_steps = 10;
  cfg.eval.tokens = 8192;
  cfg.eval.multiples = {1, 2, 4};
  cfg.run.dir = (dir / "run").string();
  ASSERT_EQ(run_training(cfg, ""), 0);
  const double entropy = unigram_entropy(cfg.data.train);
  std::ifstream in(dir / "run" / "extrapolation.json");
  const auto results = nlohmann::json::parse(in);
  const double val_loss = results["multiples"][0]["loss"];
  std::printf("[e2e] unigram entropy %.4f nats, validation loss at 1x %.4f nats\n", entropy, val_loss);
  EXPECT_GT(entropy, 2.5);  // sanity: English text in bytes
  EXPECT_LT(val_loss, entropy - 0.6);
  EXPECT_EQ(results["multiples"].size(), 3u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpt
