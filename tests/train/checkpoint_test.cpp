#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "model/gpt.h"
#include "train/checkpoint.h"
#include "train/model_io.h"
#include "train/optimizer.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("gpt_ckpt_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

Checkpoint sample_checkpoint() {
  Checkpoint c;
  c.meta = {{"step", 12}, {"note", "hello"}};
  c.tensors.push_back({"a", {2, 3}, {1, 2, 3, 4, 5, 6}});
  c.tensors.push_back({"b", {1}, {-0.5f}});
  return c;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Checkpoint, RoundTrip) {
  const fs::path dir = temp_dir("roundtrip");
  const std::string path = (dir / "c.bin").string();
  save_checkpoint(path, sample_checkpoint());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const Checkpoint c = load_checkpoint(path);
  EXPECT_EQ(c.meta["step"], 12);
  EXPECT_EQ(c.meta["note"], "hello");
  EXPECT_EQ(c.tensor("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(c.tensor("a").data, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(c.tensor("b").data, (std::vector<float>{-0.5f}));
  fs::remove_all(dir);
}

TEST(Checkpoint, DetectsCorruptionTruncationAndWrongFiles) {
  const fs::path dir = temp_dir("corrupt");
  const std::string path = (dir / "c.bin").string();
  save_checkpoint(path, sample_checkpoint());
  const auto size = fs::file_size(path);

  // One flipped payload byte: checksum mismatch.
  fs::copy_file(path, dir / "flip.bin");
  {
    std::fstream f(dir / "flip.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size) - 12);
    f.put('\x7f');
  }
  EXPECT_NE(error_of([&] { load_checkpoint((dir / "flip.bin").string()); }).find("checksum"), std::string::npos);

  // Truncated.
  fs::copy_file(path, dir / "short.bin");
  fs::resize_file(dir / "short.bin", size / 2);
  const std::string trunc = error_of([&] { load_checkpoint((dir / "short.bin").string()); });
  EXPECT_NE(trunc.find("short.bin"), std::string::npos) << trunc;

  // Not a checkpoint.
  std::ofstream(dir / "text.bin") << "this is not a checkpoint at all, just some text";
  EXPECT_NE(error_of([&] { load_checkpoint((dir / "text.bin").string()); }).find("bad magic"), std::string::npos);

  // Missing.
  EXPECT_NE(error_of([&] { load_checkpoint((dir / "nope.bin").string()); }).find("cannot open"), std::string::npos);
  fs::remove_all(dir);
}

ModelConfig small_model(int n_embd) {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = n_embd;
  m.vocab_size = 257;
  m.context = 8;
  return m;
}

TEST(Checkpoint, ModelAndOptimizerStateRoundTrip) {
  const fs::path dir = temp_dir("model");
  Config cfg;
  cfg.model = small_model(16);
  auto be = make_cpu_backend<float>();
  GPT<float> model(cfg.model, AttentionSpec{}, *be);
  model.init(3);
  Optimizer<float> opt(model, cfg.train);
  // Take one real step so the moments are non-zero.
  std::vector<int32_t> t(17);
  for (int i = 0; i < 17; ++i) t[i] = (i * 37) % 257;
  model.zero_grad();
  model.forward(t.data(), t.data() + 1, 2, 8);
  model.backward();
  opt.step(1e-3);
  TrainProgress p;
  p.step = 1;
  p.loader = {2, 5};
  save_run_checkpoint(dir.string(), 1, make_checkpoint(model, &opt, cfg, p));
  const std::string path = resolve_checkpoint(dir.string());
  EXPECT_EQ(path, checkpoint_path(dir.string(), 1));

  const Checkpoint c = load_checkpoint(path);
  GPT<float> model2(cfg.model, AttentionSpec{}, *be);
  Optimizer<float> opt2(model2, cfg.train);
  restore_checkpoint(c, path, model2, &opt2);
  EXPECT_EQ(model2.get_params(), model.get_params());
  EXPECT_EQ(opt2.steps_taken(), 1);
  for (size_t i = 0; i < model.num_params(); ++i) {
    ASSERT_EQ(opt2.m()[i], opt.m()[i]);
    ASSERT_EQ(opt2.v()[i], opt.v()[i]);
  }
  const TrainProgress p2 = checkpoint_progress(c, path);
  EXPECT_EQ(p2.step, 1);
  EXPECT_EQ(p2.loader.epoch, 2u);
  EXPECT_EQ(p2.loader.index, 5u);
  EXPECT_EQ(config_to_json(checkpoint_config(c, path)), config_to_json(cfg));

  // A model of another shape refuses the checkpoint, naming tensor and shapes.
  GPT<float> wider(small_model(32), AttentionSpec{}, *be);
  const std::string err = error_of([&] { restore_checkpoint(c, path, wider, nullptr); });
  EXPECT_NE(err.find("param/wte"), std::string::npos) << err;
  EXPECT_NE(err.find("(320, 16)"), std::string::npos) << err;
  EXPECT_NE(err.find("(320, 32)"), std::string::npos) << err;
  // A model with a position table the checkpoint lacks.
  ModelConfig learned = small_model(16);
  learned.position = "learned";
  GPT<float> with_wpe(learned, AttentionSpec{}, *be);
  EXPECT_NE(error_of([&] { restore_checkpoint(c, path, with_wpe, nullptr); }).find("no tensor param/wpe"),
            std::string::npos);
  fs::remove_all(dir);
}

// Writes a file in the checkpoint layout (checkpoint.h) with a hand-made JSON
// header and a correct checksum, so that only the header's content is wrong.
void write_raw_checkpoint(const std::string& path, const std::string& json, size_t payload_bytes) {
  std::string bytes = std::string("GPTCKPT", 8);
  const uint32_t version = kCheckpointVersion, reserved = 0;
  const uint64_t len = json.size();
  bytes.append(reinterpret_cast<const char*>(&version), 4);
  bytes.append(reinterpret_cast<const char*>(&reserved), 4);
  bytes.append(reinterpret_cast<const char*>(&len), 8);
  bytes += json;
  bytes.append((64 - bytes.size() % 64) % 64, '\0');
  bytes.append(payload_bytes, '\x01');
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64, as the format specifies
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  bytes.append(reinterpret_cast<const char*>(&h), 8);
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(Checkpoint, CraftedTensorTablesAreRejectedCleanly) {
  const fs::path dir = temp_dir("crafted");
  const std::string path = (dir / "c.bin").string();
  auto load_error = [&](const std::string& json) {
    write_raw_checkpoint(path, json, 64);
    return error_of([&] { load_checkpoint(path); });
  };
  // An offset that would wrap around 2^64 when added to the payload start.
  EXPECT_NE(
      load_error(R"({"tensors":[{"name":"a","dtype":"f32","shape":[1],"offset":18446744073709551552,"bytes":4}]})")
          .find("does not fit"),
      std::string::npos);
  // A shape whose element count overflows, zero or negative dimensions.
  EXPECT_NE(load_error(R"({"tensors":[{"name":"a","dtype":"f32","shape":[4611686018427387905],"offset":0,"bytes":4}]})")
                .find("invalid shape"),
            std::string::npos);
  EXPECT_NE(
      load_error(R"({"tensors":[{"name":"a","dtype":"f32","shape":[-1],"offset":0,"bytes":4}]})").find("invalid shape"),
      std::string::npos);
  // Wrong JSON types in the table.
  EXPECT_NE(load_error(R"({"tensors":[{"name":"a","dtype":"f32","shape":"big","offset":0,"bytes":4}]})")
                .find("malformed tensor table"),
            std::string::npos);
  EXPECT_NE(load_error(R"({"tensors":[7]})").find("malformed tensor table"), std::string::npos);
  EXPECT_NE(load_error(R"({"no_tensors":1})").find("no tensor table"), std::string::npos);
  // A well-formed tensor still loads from the same kind of file.
  write_raw_checkpoint(path, R"({"tensors":[{"name":"a","dtype":"f32","shape":[2],"offset":0,"bytes":8}]})", 64);
  EXPECT_EQ(load_checkpoint(path).tensor("a").data.size(), 2u);
  fs::remove_all(dir);
}

TEST(Checkpoint, MalformedStateAndOversizedConfigsAreRejected) {
  const fs::path dir = temp_dir("state");
  Config cfg;
  cfg.model = small_model(16);
  auto be = make_cpu_backend<float>();
  GPT<float> model(cfg.model, AttentionSpec{}, *be);
  model.init(1);
  Checkpoint c = make_checkpoint(model, nullptr, cfg, TrainProgress{});
  // A step that is not a number.
  c.meta["step"] = "abc";
  save_checkpoint((dir / "step.bin").string(), c);
  const std::string step_err = error_of([&] { load_model((dir / "step.bin").string()); });
  EXPECT_NE(step_err.find("malformed \"step\""), std::string::npos) << step_err;
  // A step past train.steps' int range is refused, not narrowed (2^32 + 3 was read as 3).
  c.meta["step"] = (uint64_t{1} << 32) + 3;
  save_checkpoint((dir / "wide.bin").string(), c);
  const std::string wide_err = error_of([&] { load_model((dir / "wide.bin").string()); });
  EXPECT_NE(wide_err.find("\"step\" = 4294967299, outside 0..2147483647"), std::string::npos) << wide_err;
  // A config that describes a far larger model than the tensors hold is
  // refused before the model is allocated.
  c.meta["step"] = 0;
  c.meta["config"]["model"]["n_embd"] = 65536;
  c.meta["config"]["model"]["n_head"] = 1;
  save_checkpoint((dir / "big.bin").string(), c);
  const std::string big_err = error_of([&] { load_model((dir / "big.bin").string()); });
  EXPECT_NE(big_err.find("(320, 65536)"), std::string::npos) << big_err;
  fs::remove_all(dir);
}

TEST(Checkpoint, ResolveRejectsNonRunDirectories) {
  const fs::path dir = temp_dir("resolve");
  EXPECT_NE(error_of([&] { resolve_checkpoint(dir.string()); }).find("not a run directory"), std::string::npos);
  EXPECT_NE(error_of([&] { resolve_checkpoint((dir / "missing").string()); }).find("no such checkpoint"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpt
