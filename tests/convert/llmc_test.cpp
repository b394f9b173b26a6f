// llm.c checkpoint import/export: a model written in llm.c's layout (by the
// test, from docs/formats.md) gives llm.c's logits once imported and the same
// logits as the same weights loaded natively; export then import is bit-exact;
// bfloat16 rounds to nearest even and expands exactly; bad files are refused.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "convert/llmc.h"
#include "core/check.h"
#include "model/gpt.h"
#include "train/model_io.h"
#include "util/llmc_model.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

const char* const kNames[16] = {"wte",  "wpe",  "ln1w", "ln1b", "qkvw",    "qkvb",    "attprojw", "attprojb",
                                "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw", "fcprojb", "lnfw",     "lnfb"};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<int32_t> some_tokens(int n, int vocab, uint64_t seed) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>((seed + i * 37 + i * i * 11) % vocab);
  return t;
}

class Llmc : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gpt_llmc_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Imports an llm.c file and loads it the way eval and sample do.
  LoadedModel import_and_load(const std::string& file, const LlmcImportOptions& opt = {}) {
    const std::string out = path("imported_" + std::to_string(n_++) + ".ckpt");
    save_checkpoint(out, import_llmc(file, opt));
    return load_model(out);
  }

  fs::path dir_;
  int n_ = 0;
};

TEST(Bf16, RoundsToNearestEvenAndExpandsExactly) {
  auto bits = [](float f) { return std::bit_cast<uint32_t>(f); };
  auto from = [](uint32_t u) { return std::bit_cast<float>(u); };
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  // Exactly half way: ties go to the even neighbour.
  EXPECT_EQ(float_to_bf16(from(0x3f808000)), 0x3f80);  // 1 + 2^-8 -> 1
  EXPECT_EQ(float_to_bf16(from(0x3f818000)), 0x3f82);  // 1 + 3·2^-8 -> 1 + 2^-6
  EXPECT_EQ(float_to_bf16(from(0x3f808001)), 0x3f81);  // just above half: up
  EXPECT_EQ(float_to_bf16(from(0x3f807fff)), 0x3f80);  // just below half: down
  EXPECT_EQ(float_to_bf16(FLT_MAX), 0x7f80);           // rounds up to infinity
  EXPECT_EQ(float_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(float_to_bf16(-INFINITY), 0xff80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from(0x7f800001)))));  // a NaN whose top bits look like inf
  // Every bfloat16 survives expansion and rounding unchanged (NaNs stay NaN).
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_float(static_cast<uint16_t>(b));
    EXPECT_EQ(bits(f), b << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_bf16(f), b);
    }
  }
  // Random floats: the result is the nearer neighbour, the even one on a tie.
  uint64_t x = 12345;
  for (int i = 0; i < 200000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const float f = from(static_cast<uint32_t>(x >> 32) & 0xbfffffffu);  // finite (exponent below 0xff)
    const uint16_t lo = static_cast<uint16_t>(bits(f) >> 16), hi = static_cast<uint16_t>(lo + 1);
    const double dlo = std::fabs(double(f) - bf16_to_float(lo)), dhi = std::fabs(double(f) - bf16_to_float(hi));
    const uint16_t want = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
    ASSERT_EQ(float_to_bf16(f), want) << std::hex << bits(f);
  }
}

TEST_F(Llmc, ImportedModelComputesLlmcsLogits) {
  test::LlmcModel m;
  m.randomize(1);
  m.write(path("m.bin"), 3);
  LoadedModel lm = import_and_load(path("m.bin"));
  const ModelConfig& mc = lm.config.model;
  EXPECT_EQ(mc.position, "learned");
  EXPECT_EQ(mc.max_position, m.T);
  EXPECT_EQ(mc.context, m.T);
  EXPECT_EQ(mc.vocab_size, m.V);
  EXPECT_EQ(mc.padded_vocab(), m.Vp);
  EXPECT_EQ(mc.n_layer, m.L);
  EXPECT_EQ(mc.n_head, m.H);
  EXPECT_EQ(mc.n_embd, m.C);
  EXPECT_EQ(lm.config.attention.preset, "softmax");
  // Full context and a shorter prefix, against the reference forward of llm.c's math.
  for (int n : {m.T, 3}) {
    const auto tokens = some_tokens(n, m.V, n);
    const auto want = m.logits(tokens);
    const auto got = lm.model->next_token_logits(tokens.data(), n);
    ASSERT_EQ(got.size(), static_cast<size_t>(m.V));
    for (int v = 0; v < m.V; ++v) EXPECT_NEAR(got[v], want[static_cast<size_t>(n - 1) * m.V + v], 2e-5) << v;
  }
}

TEST_F(Llmc, ImportedModelMatchesTheSameWeightsLoadedNatively) {
  test::LlmcModel m;
  m.randomize(2);
  m.write(path("m.bin"), 3);
  LoadedModel lm = import_and_load(path("m.bin"));
  // The same weights, placed by name into a natively built model.
  auto be = make_cpu_backend<float>();
  AttentionSpec spec;
  spec.trained_context = m.T;
  GPT<float> native(lm.config.model, spec, *be);
  std::vector<float> flat(native.num_params());
  for (int k = 0; k < 16; ++k) {
    const ParamSpec& s = native.layout().find(kNames[k]);
    ASSERT_EQ(s.numel(), m.t[k].size()) << kNames[k];
    std::copy(m.t[k].begin(), m.t[k].end(), flat.begin() + s.offset);
  }
  native.set_params(flat);
  EXPECT_EQ(lm.model->get_params(), flat);
  const auto in = some_tokens(2 * m.T, m.V, 5), tg = some_tokens(2 * m.T, m.V, 9);
  std::vector<float> a, b;
  lm.model->forward_losses(in.data(), tg.data(), 2, m.T, a);
  native.forward_losses(in.data(), tg.data(), 2, m.T, b);
  EXPECT_EQ(a, b);
}

TEST_F(Llmc, Bf16FileExpandsExactly) {
  test::LlmcModel m;
  m.randomize(3, /*bf16_exact=*/true);
  m.write(path("m5.bin"), 5);
  m.write(path("m3.bin"), 3);
  const Checkpoint c5 = import_llmc(path("m5.bin")), c3 = import_llmc(path("m3.bin"));
  ASSERT_EQ(c5.tensors.size(), 16u);
  for (int k = 0; k < 16; ++k) {
    EXPECT_EQ(c5.tensors[k].name, std::string("param/") + kNames[k]);
    EXPECT_EQ(std::memcmp(c5.tensors[k].data.data(), m.t[k].data(), m.t[k].size() * 4), 0) << kNames[k];
    EXPECT_EQ(std::memcmp(c3.tensors[k].data.data(), m.t[k].data(), m.t[k].size() * 4), 0) << kNames[k];
  }
  EXPECT_EQ(c5.meta["converted_from"]["version"], 5);
  // Exporting it back as bfloat16 rewrites the very file.
  save_checkpoint(path("c5.ckpt"), c5);
  export_llmc(load_checkpoint(path("c5.ckpt")), path("c5.ckpt"), path("again5.bin"), kLlmcVersionBF16);
  EXPECT_EQ(read_bytes(path("again5.bin")), read_bytes(path("m5.bin")));
}

TEST_F(Llmc, ExportThenImportIsBitExact) {
  // One of our models (learned positions, padded to 128), trained-looking weights.
  Config cfg;
  cfg.model.n_layer = 2, cfg.model.n_head = 2, cfg.model.n_embd = 16, cfg.model.vocab_size = 300;
  cfg.model.vocab_pad_multiple = 128, cfg.model.context = 12, cfg.model.position = "learned";
  cfg.model.max_position = 20;
  auto be = make_cpu_backend<float>();
  AttentionSpec spec;
  spec.trained_context = cfg.model.context;
  GPT<float> model(cfg.model, spec, *be);
  model.init(7);
  const Checkpoint ours = make_checkpoint(model, nullptr, cfg, {});
  save_checkpoint(path("ours.ckpt"), ours);

  export_llmc(ours, path("ours.ckpt"), path("f32.bin"), kLlmcVersionF32);
  const LlmcHeader h = read_llmc_header(path("f32.bin"));
  EXPECT_EQ(h.version, 3);
  EXPECT_EQ(h.max_seq_len, 20);
  EXPECT_EQ(h.vocab_size, 300);
  EXPECT_EQ(h.padded_vocab, 384);
  EXPECT_EQ(fs::file_size(path("f32.bin")), 1024 + 4 * llmc_param_count(h));
  const Checkpoint back = import_llmc(path("f32.bin"));
  ASSERT_EQ(back.tensors.size(), ours.tensors.size());
  for (size_t k = 0; k < ours.tensors.size(); ++k) {
    EXPECT_EQ(back.tensors[k].name, ours.tensors[k].name);
    EXPECT_EQ(back.tensors[k].shape, ours.tensors[k].shape);
    EXPECT_EQ(std::memcmp(back.tensors[k].data.data(), ours.tensors[k].data.data(), ours.tensors[k].data.size() * 4), 0)
        << ours.tensors[k].name;
  }
  // And the round trip through our format again writes the same llm.c bytes.
  save_checkpoint(path("back.ckpt"), back);
  export_llmc(load_checkpoint(path("back.ckpt")), path("back.ckpt"), path("f32_again.bin"), kLlmcVersionF32);
  EXPECT_EQ(read_bytes(path("f32_again.bin")), read_bytes(path("f32.bin")));

  // bfloat16: every value rounded to nearest even, then expanded exactly.
  export_llmc(ours, path("ours.ckpt"), path("bf16.bin"), kLlmcVersionBF16);
  EXPECT_EQ(fs::file_size(path("bf16.bin")), 1024 + 2 * llmc_param_count(h));
  const Checkpoint back16 = import_llmc(path("bf16.bin"));
  for (size_t k = 0; k < ours.tensors.size(); ++k)
    for (size_t i = 0; i < ours.tensors[k].data.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(back16.tensors[k].data[i]),
                std::bit_cast<uint32_t>(bf16_to_float(float_to_bf16(ours.tensors[k].data[i]))));
}

TEST_F(Llmc, ExportRepadsAVocabularyPaddedTo64) {
  // The byte model: V = 257, Vp = 320 with padding 64; llm.c's Vp is 384.
  Config cfg;
  cfg.model.n_layer = 1, cfg.model.n_head = 2, cfg.model.n_embd = 8, cfg.model.context = 6;
  cfg.model.position = "learned";
  ASSERT_EQ(cfg.model.padded_vocab(), 320);
  auto be = make_cpu_backend<float>();
  AttentionSpec spec;
  spec.trained_context = 6;
  GPT<float> model(cfg.model, spec, *be);
  model.init(3);
  const Checkpoint ours = make_checkpoint(model, nullptr, cfg, {});
  save_checkpoint(path("ours.ckpt"), ours);
  export_llmc(ours, path("ours.ckpt"), path("m.bin"), kLlmcVersionF32);
  EXPECT_EQ(read_llmc_header(path("m.bin")).padded_vocab, 384);
  LoadedModel lm = import_and_load(path("m.bin"));
  EXPECT_EQ(lm.config.model.vocab_pad_multiple, 128);
  const std::vector<float>& wte = ours.tensor("param/wte").data;
  const std::vector<float> params = lm.model->get_params();
  const ParamSpec& s = lm.model->layout().find("wte");
  for (size_t i = 0; i < s.numel(); ++i) ASSERT_EQ(params[s.offset + i], i < wte.size() ? wte[i] : 0.0f) << i;
  const auto in = some_tokens(6, 257, 1), tg = some_tokens(6, 257, 4);
  std::vector<float> a, b;
  model.forward_losses(in.data(), tg.data(), 1, 6, a);
  lm.model->forward_losses(in.data(), tg.data(), 1, 6, b);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(a[i], b[i], 1e-6);
}

TEST_F(Llmc, ContextOptionAndOptimizerState) {
  test::LlmcModel m;
  m.randomize(4);
  m.write(path("m.bin"), 3);
  LlmcImportOptions opt;
  opt.context = 5;
  opt.with_optimizer = true;
  const Checkpoint c = import_llmc(path("m.bin"), opt);
  EXPECT_EQ(c.meta["config"]["model"]["context"], 5);
  EXPECT_EQ(c.meta["config"]["model"]["max_position"], m.T);
  EXPECT_EQ(c.tensors.size(), 48u);
  EXPECT_TRUE(c.has("adam_m/qkvw") && c.has("adam_v/lnfb"));
  for (float v : c.tensor("adam_v/wte").data) ASSERT_EQ(v, 0.0f);
  opt.context = m.T + 1;
  EXPECT_NE(error_of([&] { import_llmc(path("m.bin"), opt); }).find("--context 9"), std::string::npos);
}

TEST_F(Llmc, RefusesBadFilesNamingTheProblem) {
  test::LlmcModel m;
  m.randomize(5);
  m.write(path("good.bin"), 3);
  const std::string good = read_bytes(path("good.bin"));
  auto variant = [&](const std::string& name, const std::function<void(std::string&)>& edit) {
    std::string bytes = good;
    edit(bytes);
    std::ofstream(path(name), std::ios::binary) << bytes;
    return error_of([&] { import_llmc(path(name)); });
  };
  auto set_slot = [](std::string& b, int slot, int32_t v) { std::memcpy(&b[slot * 4], &v, 4); };
  auto expect_has = [](const std::string& msg, const std::vector<std::string>& needles) {
    EXPECT_FALSE(msg.empty());
    for (const auto& s : needles) EXPECT_NE(msg.find(s), std::string::npos) << "missing \"" << s << "\" in: " << msg;
  };

  expect_has(variant("magic.bin", [&](std::string& b) { set_slot(b, 0, 1234); }),
             {"magic.bin", "magic 1234", "20240326"});
  expect_has(variant("shard.bin", [&](std::string& b) { set_slot(b, 0, 20240520); }), {"shard.bin", "token shard"});
  expect_has(variant("version.bin", [&](std::string& b) { set_slot(b, 1, 4); }),
             {"version.bin", "version 4", "3 for float32", "5 for bfloat16"});
  // Version 5 with float32-sized data: the size no longer matches.
  expect_has(variant("v5size.bin", [&](std::string& b) { set_slot(b, 1, 5); }),
             {"v5size.bin", "bytes", "trailing data"});
  expect_has(variant("short.bin", [&](std::string& b) { b.resize(b.size() - 4); }), {"short.bin", "truncated"});
  expect_has(variant("long.bin", [&](std::string& b) { b.push_back('x'); }), {"long.bin", "trailing data"});
  expect_has(variant("header.bin", [&](std::string& b) { b.resize(100); }), {"header.bin", "shorter than the 1024"});
  expect_has(variant("vp.bin", [&](std::string& b) { set_slot(b, 7, 100); }), {"vp.bin", "padded vocabulary Vp = 100"});
  expect_has(variant("heads.bin", [&](std::string& b) { set_slot(b, 5, 3); }), {"heads.bin", "n_head"});
  expect_has(variant("zero.bin", [&](std::string& b) { set_slot(b, 4, 0); }), {"zero.bin", "layers L", "> 0"});
  expect_has(error_of([&] { import_llmc(path("missing.bin")); }), {"missing.bin", "no such file"});
}

TEST_F(Llmc, ExportRefusesModelsTheFormatCannotHold) {
  Config cfg;
  cfg.model.n_layer = 1, cfg.model.n_head = 2, cfg.model.n_embd = 8, cfg.model.context = 6;
  for (const char* position : {"rope", "none"}) {
    cfg.model.position = position;
    auto be = make_cpu_backend<float>();
    AttentionSpec spec;
    spec.trained_context = 6;
    GPT<float> model(cfg.model, spec, *be);
    model.init(1);
    const std::string msg = error_of(
        [&] { export_llmc(make_checkpoint(model, nullptr, cfg, {}), "x.ckpt", path("out.bin"), kLlmcVersionF32); });
    EXPECT_NE(msg.find("x.ckpt"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("model.position \"") + position), std::string::npos) << msg;
    EXPECT_NE(msg.find("learned"), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(path("out.bin")));
  }
  // A block other than GPT-2's (docs/blocks.md), named in the error.
  cfg.model.position = "learned";
  for (const char* what : {"rmsnorm", "swiglu", "none", "untied", "parallel"}) {
    Config c = cfg;
    const std::string w = what;
    if (w == "rmsnorm") c.model.norm = w;
    if (w == "swiglu") c.model.mlp = w;
    if (w == "none") c.model.bias = w;
    if (w == "untied") c.model.head = w;
    if (w == "parallel") c.model.residual = w;
    auto be = make_cpu_backend<float>();
    AttentionSpec spec;
    spec.trained_context = 6;
    GPT<float> model(c.model, spec, *be);
    model.init(1);
    const std::string msg = error_of(
        [&] { export_llmc(make_checkpoint(model, nullptr, c, {}), "x.ckpt", path("out.bin"), kLlmcVersionF32); });
    EXPECT_NE(msg.find("GPT-2's block"), std::string::npos) << msg;
    EXPECT_NE(msg.find(w), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(path("out.bin")));
  }
}

}  // namespace
}  // namespace gpt
