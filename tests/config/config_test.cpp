// The config module: defaults, round trip, every class of error message,
// overrides and file loading.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <set>
#include <string>

#include "backend/backend.h"
#include "config/attention.h"
#include "config/config.h"
#include "config/schema.h"
#include "core/check.h"

namespace {

using nlohmann::json;

// The message of the gpt::Error that f throws; a test failure if none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const gpt::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a gpt::Error";
  return "";
}

std::string parse_error(const char* text) {
  return error_of([&] { gpt::config_from_json(json::parse(text)); });
}

void expect_contains(const std::string& message, std::initializer_list<std::string> parts) {
  for (const auto& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << "missing [" << part << "] in: " << message;
}

gpt::Config parse(const char* text) { return gpt::config_from_json(json::parse(text)); }

// A file under the temp dir, removed when the test ends.
struct TempFile {
  std::filesystem::path path;
  TempFile(const std::string& name, const std::string& contents) {
    path = std::filesystem::temp_directory_path() / ("gpt_config_test_" + std::to_string(getpid()) + "_" + name);
    std::ofstream(path) << contents;
  }
  ~TempFile() { std::filesystem::remove(path); }
};

const std::string kModelKeys =
    "n_layer, n_head, n_embd, head_dim, vocab_size, vocab_pad_multiple, context, position, rope_theta, rope_pairing, "
    "rope_fraction, p_rope, "
    "max_position, init_std";
const std::string kSections = "model, data, train, eval, attention, context, run";

// ---- defaults and round trip ---------------------------------------------------------

TEST(Config, EmptyObjectGivesTheStructDefaults) {
  gpt::Config c = parse("{}");
  EXPECT_EQ(c.model.n_layer, 4);
  EXPECT_EQ(c.model.position, "rope");
  EXPECT_EQ(c.model.padded_vocab(), 320);
  EXPECT_EQ(c.train.seed, 1337u);
  EXPECT_EQ(c.eval.multiples, (std::vector<int>{1, 2, 4, 8, 16}));
  EXPECT_EQ(c.eval.tokens, 131072);
  EXPECT_EQ(c.attention.preset, "softmax");
  EXPECT_EQ(gpt::config_to_json(c), gpt::config_to_json(gpt::Config{}));
  EXPECT_NO_THROW(gpt::validate_config(gpt::Config{}));
}

TEST(Config, MissingKeysKeepDefaultsBesideGivenOnes) {
  gpt::Config c = parse(R"({"model": {"n_layer": 2}, "train": {}})");
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.n_head, gpt::Config{}.model.n_head);
  EXPECT_EQ(c.train.lr, gpt::Config{}.train.lr);
}

TEST(Config, ToJsonHasExactlyTheSchemaKeys) {
  json j = gpt::config_to_json(gpt::Config{});
  std::set<std::string> from_json, from_schema;
  for (const auto& [section, body] : j.items())
    for (const auto& [name, value] : body.items()) from_json.insert(section + "." + name);
  for (const auto& k : gpt::config_schema::keys()) from_schema.insert(k.path());
  EXPECT_EQ(from_json, from_schema);
  EXPECT_EQ(from_schema.size(), 126u);
}

TEST(Config, RoundTripIsExact) {
  gpt::Config c;
  c.model.n_layer = 7;
  c.model.n_head = 6;
  c.model.n_embd = 96;
  c.model.position = "learned";
  c.model.max_position = 4096;
  c.model.rope_theta = 0.1 + 0.2;  // not a short decimal
  c.model.init_std = 1.0 / 3.0;
  c.data.order = "sequential";
  c.train.lr = 3e-4;
  c.train.lr_min = 1e-300;
  c.train.beta2 = 0.999;
  c.train.seed = std::numeric_limits<uint64_t>::max();
  c.eval.multiples = {1, 3, 7};
  c.eval.tokens = int64_t{1} << 40;
  c.run.device = "cuda";
  c.data.mix_task = "mqar";
  c.data.mix_fraction = 0.25;
  c.data.mix_options = {{"pairs", 4}, {"scale", "pairs"}};
  json j = gpt::config_to_json(c);
  gpt::Config back = gpt::config_from_json(json::parse(j.dump()));  // through text too
  EXPECT_EQ(gpt::config_to_json(back), j);
  EXPECT_EQ(back.model.rope_theta, c.model.rope_theta);
  EXPECT_EQ(back.model.init_std, c.model.init_std);
  EXPECT_EQ(back.train.lr_min, c.train.lr_min);
  EXPECT_EQ(back.train.seed, c.train.seed);
  EXPECT_EQ(back.eval.tokens, c.eval.tokens);
  EXPECT_EQ(back.eval.multiples, c.eval.multiples);
  EXPECT_EQ(back.model.position, "learned");
  EXPECT_EQ(back.data.mix_options, c.data.mix_options);
}

// ---- structure errors ----------------------------------------------------------------------

TEST(ConfigErrors, UnknownKeyListsTheSectionsKeys) {
  std::string m = parse_error(R"({"model": {"n_heads": 4}})");
  expect_contains(m, {"unknown key \"model.n_heads\"", "valid keys in \"model\": " + kModelKeys});
}

TEST(ConfigErrors, UnknownSectionListsSections) {
  expect_contains(parse_error(R"({"modle": {}})"), {"unknown section \"modle\"", "valid sections: " + kSections});
}

TEST(ConfigErrors, SectionAndTopLevelMustBeObjects) {
  expect_contains(parse_error(R"({"train": [1, 2]})"), {"section \"train\" must be an object", "array [1,2]"});
  expect_contains(parse_error(R"([{"model": {}}])"), {"top level must be a JSON object", "array"});
  expect_contains(parse_error("null"), {"top level must be a JSON object", "null"});
}

// ---- type errors ---------------------------------------------------------------------------

TEST(ConfigErrors, WrongTypeNamesKeyExpectedAndGot) {
  expect_contains(parse_error(R"({"train": {"lr": "abc"}})"), {"\"train.lr\" must be a number, got string \"abc\""});
  expect_contains(parse_error(R"({"train": {"steps": true}})"),
                  {"\"train.steps\" must be an integer, got boolean true"});
  expect_contains(parse_error(R"({"train": {"lr": false}})"), {"\"train.lr\" must be a number, got boolean false"});
  expect_contains(parse_error(R"({"model": {"position": 1}})"), {"\"model.position\" must be a string, got number 1"});
  expect_contains(parse_error(R"({"run": {"dir": null}})"), {"\"run.dir\" must be a string, got null"});
  expect_contains(parse_error(R"({"eval": {"multiples": 4}})"),
                  {"\"eval.multiples\" must be a list of integers, got number 4"});
  expect_contains(parse_error(R"({"eval": {"multiples": [1, "x"]}})"),
                  {"\"eval.multiples[1]\" must be an integer, got string \"x\""});
}

TEST(ConfigErrors, IntegerKeysRejectFractionsButTakeWholeFloats) {
  expect_contains(parse_error(R"({"model": {"n_layer": 3.5}})"),
                  {"\"model.n_layer\" must be an integer, got number 3.5"});
  expect_contains(parse_error(R"({"eval": {"multiples": [1, 2.5]}})"), {"\"eval.multiples[1]\" must be an integer"});
  gpt::Config c = parse(R"({"model": {"n_layer": 3.0}, "train": {"steps": 2e4}, "eval": {"tokens": 1e6}})");
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.train.steps, 20000);
  EXPECT_EQ(c.eval.tokens, 1000000);
}

// ---- range errors, one per kind of range --------------------------------------------------

TEST(ConfigErrors, ClosedIntegerRange) {
  expect_contains(parse_error(R"({"model": {"n_layer": 0}})"),
                  {"\"model.n_layer\" = 0 is out of range; allowed: 1..256"});
  expect_contains(parse_error(R"({"model": {"n_layer": 257}})"), {"\"model.n_layer\" = 257", "1..256"});
  expect_contains(parse_error(R"({"model": {"vocab_size": 16777217}})"), {"\"model.vocab_size\"", "2..16777216"});
  expect_contains(parse_error(R"({"eval": {"profile_buckets": 4097}})"), {"\"eval.profile_buckets\"", "1..4096"});
  expect_contains(parse_error(R"({"model": {"n_layer": 1e12}})"), {"\"model.n_layer\"", "out of range", "1..256"});
}

TEST(ConfigErrors, LowerBoundedIntegers) {
  expect_contains(parse_error(R"({"train": {"batch_size": 0}})"),
                  {"\"train.batch_size\" = 0 is out of range; allowed: >= 1"});
  expect_contains(parse_error(R"({"train": {"checkpoint_every": -1}})"),
                  {"\"train.checkpoint_every\" = -1", "allowed: >= 0"});
  expect_contains(parse_error(R"({"train": {"threads": 1025}})"), {"\"train.threads\" = 1025", "allowed: 0..1024"});
  expect_contains(parse_error(R"({"eval": {"tokens": 0}})"), {"\"eval.tokens\" = 0", ">= 1"});
  // Beyond the C++ type even though the declared bound is open.
  expect_contains(parse_error(R"({"train": {"checkpoint_every": 3000000000}})"),
                  {"\"train.checkpoint_every\" = 3000000000 is out of range", ">= 0", "at most 2147483647"});
}

TEST(ConfigErrors, FloatBounds) {
  expect_contains(parse_error(R"({"train": {"lr": 0}})"), {"\"train.lr\" = 0.0 is out of range; allowed: > 0"});
  expect_contains(parse_error(R"({"model": {"rope_theta": -1.5}})"), {"\"model.rope_theta\" = -1.5", "> 0"});
  expect_contains(parse_error(R"({"train": {"weight_decay": -0.1}})"), {"\"train.weight_decay\" = -0.1", ">= 0"});
  expect_contains(parse_error(R"({"train": {"beta2": 1.0}})"), {"\"train.beta2\" = 1.0", "allowed: >= 0 and < 1"});
  expect_contains(parse_error(R"({"train": {"beta1": -0.5}})"), {"\"train.beta1\"", ">= 0 and < 1"});
  EXPECT_EQ(parse(R"({"train": {"beta1": 0}})").train.beta1, 0.0);
}

TEST(ConfigErrors, Uint64Seed) {
  expect_contains(parse_error(R"({"train": {"seed": -1}})"),
                  {"\"train.seed\" = -1 is out of range; allowed: 0..2^64-1"});
  EXPECT_EQ(parse(R"({"train": {"seed": 18446744073709551615}})").train.seed, std::numeric_limits<uint64_t>::max());
}

TEST(ConfigErrors, EnumsListAllowedValues) {
  expect_contains(parse_error(R"({"model": {"position": "sinusoidal"}})"),
                  {"\"model.position\" = \"sinusoidal\" is not valid; allowed: learned, rope, none, alibi, pope"});
  expect_contains(parse_error(R"({"attention": {"preset": "flash"}})"), {"\"attention.preset\"", "allowed: softmax"});
  expect_contains(parse_error(R"({"run": {"device": "tpu"}})"), {"\"run.device\"", "allowed: cpu, cuda"});
  expect_contains(parse_error(R"({"data": {"order": "random"}})"), {"\"data.order\"", "sequential, shuffle"});
  expect_contains(parse_error(R"({"model": {"vocab_pad_multiple": 32}})"),
                  {"\"model.vocab_pad_multiple\" = 32 is not valid; allowed: 64, 128"});
  EXPECT_EQ(parse(R"({"model": {"vocab_pad_multiple": 128}})").model.padded_vocab(), 384);
}

TEST(ConfigErrors, EmptyStrings) {
  expect_contains(parse_error(R"({"data": {"train": ""}})"), {"\"data.train\"", "empty", "non-empty"});
  expect_contains(parse_error(R"({"run": {"dir": ""}})"), {"\"run.dir\"", "non-empty"});
}

TEST(ConfigErrors, MultiplesList) {
  expect_contains(parse_error(R"({"eval": {"multiples": []}})"), {"\"eval.multiples\" = [] is empty", "non-empty"});
  expect_contains(parse_error(R"({"eval": {"multiples": [1, 0]}})"),
                  {"\"eval.multiples[1]\" = 0 is out of range; allowed: >= 1"});
  expect_contains(parse_error(R"({"eval": {"multiples": [1, 4, 4]}})"),
                  {"\"eval.multiples\" = [1,4,4] is not strictly increasing"});
  expect_contains(parse_error(R"({"eval": {"multiples": [2, 1]}})"), {"not strictly increasing"});
  EXPECT_EQ(parse(R"({"eval": {"multiples": [3]}})").eval.multiples, std::vector<int>{3});
}

// ---- cross-field rules --------------------------------------------------------------------

// Training-time position ids reach RoPE, PoPE and the distance biases
// (train/position_ids.h, attn::position_table).
TEST(ConfigCrossField, PositionIdsNeedAnEncodingThatReadsThem) {
  const gpt::Config c = parse(R"({"train": {"positions": "pose", "pose_chunks": 3}})");
  EXPECT_EQ(c.train.positions, "pose");
  EXPECT_EQ(c.train.pose_chunks, 3);
  EXPECT_EQ(parse(R"({"model": {"position": "pope"}, "train": {"positions": "randomized"}})").train.positions,
            "randomized");
  for (const char* good : {R"({"model": {"position": "alibi"}, "train": {"positions": "pose"}})",
                           R"({"model": {"position": "none"}, "attention": {"position_bias": "kerple_log"},
                               "train": {"positions": "pose"}})",
                           R"({"model": {"position": "none"}, "attention": {"position_bias": "fire"},
                               "train": {"positions": "randomized"}})"})
    EXPECT_NE(parse(good).train.positions, "plain") << good;
  for (const char* bad : {R"({"model": {"position": "learned"}, "train": {"positions": "pose"}})",
                          R"({"model": {"position": "none"}, "train": {"positions": "randomized"}})",
                          R"({"model": {"position": "alibi"}, "attention": {"scale": "scale_invariant"},
                              "train": {"positions": "pose"}})",
                          R"({"attention": {"scale": "scale_invariant"}, "train": {"positions": "pose"}})",
                          R"({"model": {"context": 64}, "train": {"positions": "pose", "position_span": 32}})"})
    expect_contains(parse_error(bad),
                    {"\"train.positions\" pose and randomized give the position encoding its position ids"});
  expect_contains(parse_error(R"({"train": {"positions": "shifted"}})"),
                  {"\"train.positions\" = \"shifted\" is not valid; allowed: plain, pose, randomized"});
}

// The document mask: no sink keys (they reach across documents), no distance
// remapping; positions restart only under the mask, on a model ids reach.
TEST(ConfigCrossField, DocumentMaskRules) {
  const gpt::Config c =
      parse(R"({"train": {"document_mask": "on", "document_positions": "restart"}, "data": {"windows": "documents"}})");
  EXPECT_EQ(c.train.document_mask, "on");
  EXPECT_EQ(c.data.windows, "documents");
  expect_contains(parse_error(R"({"train": {"document_mask": "on"}, "context": {"mask": "sinks", "sinks": 2}})"),
                  {"\"train.document_mask\" = \"on\" masks keys of other documents"});
  expect_contains(parse_error(R"({"train": {"document_positions": "restart"}})"),
                  {"\"train.document_positions\" = \"restart\" counts positions from each document's start"});
  expect_contains(
      parse_error(
          R"({"model": {"position": "learned"}, "train": {"document_mask": "on", "document_positions": "restart"}})"),
      {"\"train.document_positions\" = \"restart\""});
  EXPECT_EQ(parse(R"({"model": {"position": "alibi"}, "train": {"document_mask": "on"}})").train.document_mask, "on");
  expect_contains(parse_error(R"({"data": {"windows": "aligned"}})"),
                  {"\"data.windows\" = \"aligned\" is not valid; allowed: stream, documents"});
}

// The window warm-up sets the training mask itself.
TEST(ConfigCrossField, WindowWarmupRules) {
  EXPECT_EQ(parse(R"({"train": {"window_start": 32, "window_steps": 100}})").train.window_start, 32);
  for (const char* bad : {R"({"train": {"window_start": 32}})",
                          R"({"model": {"context": 32}, "train": {"window_start": 32, "window_steps": 10}})",
                          R"({"train": {"window_start": 32, "window_steps": 10}, "context": {"mask": "window"}})",
                          R"({"train": {"window_start": 32, "window_steps": 10}, "model": {"layer_plan": "swan"}})"})
    expect_contains(parse_error(bad), {"\"train.window_start\" (the window warm-up) must be below"});
  // YaRN at each switch: RoPE and at most 17 stages; the spec carries the windows.
  const gpt::Config y = parse(R"({"train": {"window_start": 32, "window_steps": 10, "grow_yarn": "on"}})");
  const gpt::AttentionSpec s = gpt::resolve_attention(y);
  ASSERT_EQ(s.rope.grown, y.model.context / 32 - 1);
  EXPECT_EQ(s.rope.grow[0], 32);
  EXPECT_EQ(s.rope.grow[s.rope.grown], y.model.context);
  for (const char* bad : {R"({"train": {"grow_yarn": "on"}})",
                          R"({"train": {"window_start": 32, "window_steps": 10, "grow_yarn": "on"},
                              "model": {"position": "learned"}})",
                          R"({"train": {"window_start": 4, "window_steps": 10, "grow_yarn": "on"}})"})
    expect_contains(parse_error(bad), {"\"train.grow_yarn\" = \"on\" grows RoPE's frequencies"});
  // The length schedule: context / length_start a power of two, not with the window warm-up.
  const gpt::Config l = parse(R"({"train": {"length_start": 32, "length_steps": 10, "grow_yarn": "on"}})");
  EXPECT_EQ(gpt::resolve_attention(l).rope.grown, 2);  // 32 -> 64 -> 128
  for (const char* bad :
       {R"({"train": {"length_start": 48, "length_steps": 10}})", R"({"train": {"length_start": 32}})",
        R"({"train": {"length_start": 128, "length_steps": 10}})",
        R"({"train": {"length_start": 32, "length_steps": 10, "window_start": 32,
                                        "window_steps": 10}})"})
    expect_contains(parse_error(bad), {"\"train.length_start\" (the length schedule) must be below"});
}

TEST(ConfigCrossField, EmbdDivisibleByHeads) {
  expect_contains(parse_error(R"({"model": {"n_embd": 100, "n_head": 3}})"),
                  {"\"model.n_embd\" must be divisible by \"model.n_head\"", "model.n_embd = 100", "model.n_head = 3"});
  // model.head_dim sets the heads' width apart from the residual's.
  const gpt::Config c = parse(R"({"model": {"n_embd": 100, "n_head": 3, "head_dim": 16}})");
  EXPECT_EQ(c.model.head_size(), 16);
  EXPECT_EQ(c.model.attn_width(), 48);
  EXPECT_EQ(c.model.qkv_width(), 3 * 48);
  EXPECT_EQ(parse(R"({"model": {"n_embd": 64, "n_head": 4}})").model.head_size(), 16);
}

// The block's rules (docs/blocks.md): key/value heads divide the heads,
// norm_eps belongs to RMSNorm and QK-norm, QK-norm is refused with cosine
// scores.
TEST(ConfigCrossField, BlockOptions) {
  expect_contains(parse_error(R"({"model": {"n_head": 4, "n_kv_head": 3}})"),
                  {"\"model.n_kv_head\" must divide \"model.n_head\"", "model.n_kv_head = 3", "model.n_head = 4"});
  EXPECT_EQ(parse(R"({"model": {"n_head": 4, "n_kv_head": 2}})").model.kv_heads(), 2);
  EXPECT_EQ(parse(R"({"model": {"n_head": 4}})").model.kv_heads(), 4);
  expect_contains(parse_error(R"({"model": {"norm_eps": 1e-6}})"), {"model.norm_eps", "model.norm = \"layernorm\""});
  EXPECT_NO_THROW(parse(R"({"model": {"norm": "rmsnorm", "norm_eps": 1e-6}})"));
  EXPECT_NO_THROW(parse(R"({"model": {"qk_norm": "rms", "norm_eps": 1e-6}})"));
  expect_contains(parse_error(R"({"model": {"qk_norm": "l2"}, "attention": {"preset": "cosine"}})"),
                  {"model.qk_norm", "cosine"});
  expect_contains(parse_error(R"({"model": {"qk_norm_scale": "learned"}})"), {"model.qk_norm_scale", "model.qk_norm"});
  EXPECT_NO_THROW(parse(R"({"model": {"qk_norm": "l2", "qk_norm_scale": "learned"}})"));
  EXPECT_NO_THROW(parse(R"({"model": {"qk_norm": "rms_full"}})"));
  expect_contains(parse_error(R"({"model": {"qk_norm": "rms_full", "n_head": 4, "n_kv_head": 2}})"),
                  {"rms_full", "model.n_kv_head"});
  expect_contains(parse_error(R"({"model": {"qk_norm": "rms_full", "qk_norm_scale": "learned"}})"),
                  {"model.qk_norm_scale", "rms_full"});
  const gpt::ModelConfig m = parse(R"({"model": {"n_embd": 768, "mlp": "swiglu"}})").model;
  EXPECT_EQ(m.mlp_width(), 2048);  // Llama's rule: 8·768/3 = 2048, a multiple of 256
  EXPECT_EQ(m.mlp_in_width(), 4096);
  EXPECT_EQ(parse(R"({"model": {"n_embd": 64, "mlp": "swiglu"}})").model.mlp_width(), 256);  // 170 up to 256
  EXPECT_EQ(parse(R"({"model": {"n_embd": 64, "mlp": "swiglu", "mlp_hidden": 100}})").model.mlp_width(), 100);
  EXPECT_EQ(parse(R"({"model": {"n_embd": 64, "mlp": "relu2"}})").model.mlp_in_width(), 256);
}

// Muon's settings belong to train.optimizer = "muon" (docs/optimizers.md).
TEST(ConfigCrossField, MuonSettingsNeedMuon) {
  expect_contains(parse_error(R"({"train": {"muon_lr": 0.05}})"), {"train.muon_lr", "train.optimizer = \"adamw\""});
  expect_contains(parse_error(R"({"train": {"optimizer": "sgd"}})"), {"train.optimizer", "adamw", "muon"});
  const gpt::TrainConfig t =
      parse(R"({"train": {"optimizer": "muon", "muon_lr": 0.05, "muon_momentum": 0.9, "muon_weight_decay": 0.01}})")
          .train;
  EXPECT_EQ(t.optimizer, "muon");
  EXPECT_EQ(t.muon_lr, 0.05);
  EXPECT_EQ(t.muon_momentum, 0.9);
  EXPECT_EQ(t.muon_weight_decay, 0.01);
  expect_contains(parse_error(R"({"train": {"optimizer": "muon", "muon_momentum": 1}})"), {"train.muon_momentum"});
}

// Block presets fill the block keys a config leaves out, as the Hugging Face
// config classes' defaults; a key the config sets wins; unknown names are
// refused; the resolved config round-trips.
TEST(ConfigBlockPresets, FillWhatTheConfigLeavesOut) {
  const gpt::ModelConfig l = parse(R"({"model": {"block": "llama"}})").model;
  EXPECT_EQ(l.norm, "rmsnorm");
  EXPECT_EQ(l.norm_eps, 1e-6);
  EXPECT_EQ(l.mlp, "swiglu");
  EXPECT_EQ(l.bias, "none");
  EXPECT_EQ(l.head, "untied");
  EXPECT_EQ(l.position, "rope");
  const gpt::ModelConfig n = parse(R"({"model": {"block": "neox"}})").model;
  EXPECT_EQ(n.residual, "parallel");
  EXPECT_EQ(n.mlp, "gelu_erf");
  EXPECT_EQ(n.rope_fraction, 0.25);
  EXPECT_EQ(n.norm, "layernorm");
  EXPECT_EQ(parse(R"({"model": {"block": "qwen2"}})").model.bias, "qkv");
  EXPECT_EQ(parse(R"({"model": {"block": "qwen3"}})").model.qk_norm, "rms");
  const gpt::ModelConfig g = parse(R"({"model": {"block": "gpt2"}})").model;
  EXPECT_EQ(config_to_json(parse(R"({"model": {"block": "gpt2"}})"))["model"].dump(), [] {
    gpt::Config c;
    c.model.block = "gpt2";
    return config_to_json(c)["model"].dump();
  }()) << "gpt2 is the defaults";
  // The config's own keys win.
  const gpt::ModelConfig own = parse(R"({"model": {"block": "llama", "head": "tied", "norm_eps": 1e-5}})").model;
  EXPECT_EQ(own.head, "tied");
  EXPECT_EQ(own.norm_eps, 1e-5);
  EXPECT_EQ(own.mlp, "swiglu");
  expect_contains(parse_error(R"({"model": {"block": "mistral"}})"),
                  {"model.block", "mistral", "custom, gpt2, llama, neox, qwen2, qwen3"});
  const gpt::Config c = parse(R"({"model": {"block": "qwen3", "n_head": 4, "n_kv_head": 2}})");
  EXPECT_EQ(config_to_json(gpt::config_from_json(config_to_json(c))), config_to_json(c));
  (void)g;
}

TEST(ConfigCrossField, RopeNeedsEvenHeadSize) {
  expect_contains(parse_error(R"({"model": {"n_embd": 12, "n_head": 4, "position": "rope"}})"),
                  {"even head size", "model.n_embd = 12", "model.n_head = 4"});
  EXPECT_NO_THROW(parse(R"({"model": {"n_embd": 12, "n_head": 4, "position": "learned"}})"));
  expect_contains(parse_error(R"({"model": {"p_rope": 0.5, "position": "learned"}})"),
                  {"\"model.p_rope\" < 1", "model.position = \"learned\""});
  expect_contains(parse_error(R"({"model": {"p_rope": 0.01}})"), {"at least one turning pair"});
  expect_contains(parse_error(R"({"context": {"yarn_truncate": 0}})"),
                  {"\"context.yarn_truncate\" = 0", "\"context.rope_scaling\" = \"yarn\""});
  EXPECT_NO_THROW(parse(R"({"model": {"p_rope": 0.25}, "context": {"rope_scaling": "yarn", "yarn_truncate": 0}})"));
  // STRING: W < S, W only with string; it composes with every frequency rule.
  expect_contains(parse_error(R"({"context": {"remap": "string", "remap_window": 10, "remap_local": 10}})"),
                  {"\"context.remap_local\" is STRING's W", "context.remap_local = 10"});
  expect_contains(parse_error(R"({"context": {"remap": "rerope", "remap_local": 2}})"), {"STRING's W"});
  const gpt::Config st = parse(R"({"context": {"remap": "string", "rope_scaling": "llama3", "factor": 4}})");
  EXPECT_EQ(gpt::resolve_attention(st).rope.remap_window, 42);  // floor(0.33 · 128)
  EXPECT_EQ(gpt::resolve_attention(st).rope.remap_local, 1);
  // Dual chunk attention: ChunkLlama's defaults (s + w = 3N/4, w = N/16), w < s, s + w < N.
  const gpt::RopeSpec dc = gpt::resolve_attention(parse(R"({"context": {"remap": "dual_chunk"}})")).rope;
  EXPECT_EQ(dc.remap, gpt::RemapKind::DualChunk);
  EXPECT_EQ(dc.remap_window, 96);
  EXPECT_EQ(dc.remap_local, 8);
  expect_contains(parse_error(R"({"context": {"remap": "dual_chunk", "remap_window": 20, "remap_local": 10}})"),
                  {"dual chunk attention's local window w", "context.remap_local = 10"});
  expect_contains(parse_error(R"({"context": {"remap": "dual_chunk", "remap_window": 128}})"),
                  {"dual_chunk sees no distance beyond s + w", "context.remap_window = 128", "model.context = 128"});
  EXPECT_NO_THROW(parse(R"({"context": {"remap": "dual_chunk", "remap_window": 127, "remap_local": 60}})"));
  expect_contains(parse_error(R"({"model": {"n_embd": 16, "n_head": 4, "head_dim": 5, "position": "rope"}})"),
                  {"even head size", "model.head_dim = 5"});
  EXPECT_NO_THROW(parse(R"({"model": {"n_embd": 12, "n_head": 4, "head_dim": 4, "position": "rope"}})"));
}

TEST(ConfigCrossField, LearnedMaxPositionCoversContext) {
  expect_contains(parse_error(R"({"model": {"position": "learned", "max_position": 64, "context": 128}})"),
                  {"\"model.max_position\" must be 0 or >= \"model.context\"", "model.max_position = 64"});
  EXPECT_NO_THROW(parse(R"({"model": {"position": "learned", "max_position": 0}})"));
  EXPECT_NO_THROW(parse(R"({"model": {"position": "rope", "max_position": 64}})"));
  EXPECT_EQ(parse(R"({"model": {"position": "learned", "max_position": 2048}})").model.position_rows(), 2048);
}

TEST(ConfigCrossField, EvalTokensCoverOneSpanAndTheSpanTheLongestSequence) {
  // The default span is 16 * 128 = 2048 tokens, whichever multiples are asked.
  expect_contains(parse_error(R"({"model": {"context": 128}, "eval": {"tokens": 2047}})"),
                  {"\"eval.tokens\" must cover one scored window", "eval.tokens = 2047", "model.context = 128"});
  EXPECT_NO_THROW(parse(R"({"model": {"context": 128}, "eval": {"tokens": 2048}})"));
  expect_contains(parse_error(R"({"model": {"context": 128}, "eval": {"tokens": 512, "multiples": [1, 4]}})"),
                  {"\"eval.tokens\" must cover one scored window", "eval.span = 0"});
  EXPECT_NO_THROW(parse(R"({"model": {"context": 128}, "eval": {"tokens": 512, "span": 512, "multiples": [1, 4]}})"));
  expect_contains(parse_error(R"({"model": {"context": 128}, "eval": {"multiples": [1, 32]}})"),
                  {"must fit in one scored window", "eval.multiples = [1,32]"});
  EXPECT_NO_THROW(parse(R"({"model": {"context": 128}, "eval": {"multiples": [1, 32], "span": 4096}})"));
  expect_contains(parse_error(R"({"model": {"context": 128}, "eval": {"multiples": [2, 4], "stride": 257}})"),
                  {"\"eval.stride\" of the sliding protocol", "eval.stride = 257"});
  expect_contains(parse_error(R"({"eval": {"protocol": "windows"}})"),
                  {"eval.protocol", "chunks", "sliding", "documents"});
}

TEST(ConfigCrossField, LrMinAtMostLr) {
  expect_contains(parse_error(R"({"train": {"lr": 1e-3, "lr_min": 1e-2}})"),
                  {"\"train.lr_min\" must be <= \"train.lr\"", "train.lr_min = 0.01", "train.lr = 0.001"});
}

TEST(ConfigCrossField, WarmupAtMostSteps) {
  expect_contains(parse_error(R"({"train": {"steps": 10, "warmup_steps": 11}})"),
                  {"\"train.warmup_steps\" must be <= \"train.steps\"", "train.warmup_steps = 11"});
}

// data.mix_task, data.mix_fraction and data.mix_options come together; the
// options are a JSON object (what is in it is the task's to check).
TEST(ConfigCrossField, MixTaskFractionAndOptionsGoTogether) {
  expect_contains(parse_error(R"({"data": {"mix_task": "copy"}})"),
                  {"\"data.mix_task\" and \"data.mix_fraction\" > 0 go together", "data.mix_task = \"copy\"",
                   "data.mix_fraction = 0.0"});
  expect_contains(parse_error(R"({"data": {"mix_fraction": 0.5}})"), {"go together", "data.mix_task = \"none\""});
  expect_contains(parse_error(R"({"data": {"mix_options": {"pairs": 4}}})"),
                  {"\"data.mix_options\" belong to \"data.mix_task\""});
  expect_contains(parse_error(R"({"data": {"mix_task": "copy", "mix_fraction": 0.5, "mix_options": [4]}})"),
                  {"\"data.mix_options\" must be a JSON object", "array"});
  expect_contains(parse_error(R"({"data": {"mix_task": "sorting", "mix_fraction": 0.5}})"),
                  {"\"data.mix_task\"", "none, mqar, copy, induction, passkey, niah_multikey, variable_tracking"});
  const gpt::Config c = parse(R"({"data": {"mix_task": "mqar", "mix_fraction": 0.1, "mix_options": {"pairs": 4}}})");
  EXPECT_EQ(c.data.mix_options, json({{"pairs", 4}}));
}

// The contenders' stages (docs/contenders.md) refuse what they do not compose
// with, naming the keys; what they compose with parses.
TEST(ConfigCrossField, ContenderStagesRefuseWhatTheyDoNotComposeWith) {
  expect_contains(parse_error(R"({"attention": {"preset": "relu", "normalize": "softpick"}})"),
                  {"off_by_one, sink and softpick", "relu", "attention.normalize = \"softpick\""});
  expect_contains(parse_error(R"({"attention": {"preset": "sink", "p": 15}})"),
                  {"re-weighting", "attention.p = 15", "attention.preset = \"sink\""});
  expect_contains(parse_error(R"({"model": {"position": "alibi"}, "attention": {"position_bias": "kerple_log"}})"),
                  {"\"model.position\" = \"alibi\"", "attention.position_bias = \"kerple_log\""});
  expect_contains(parse_error(R"({"attention": {"position_bias": "t5"}})"),
                  {"attention.position_bias", "none, alibi, kerple_log, kerple_power, forget, fire"});
  const gpt::Config c = parse(R"({"model": {"position": "none"}, "attention": {"preset": "softpick",
                                  "positivity": "softplus", "position_bias": "kerple_power"}})");
  const gpt::AttentionSpec s = gpt::resolve_attention(c);
  EXPECT_EQ(s.position_bias, gpt::PositionBias::KerplePower);
  EXPECT_EQ(s.normalize, gpt::Normalize::Softpick);
  EXPECT_EQ(gpt::resolve_attention(parse(R"({"model": {"position": "alibi"}})")).position_bias,
            gpt::PositionBias::Alibi);
  // Stick-breaking takes its break fractions from sigmoid, and no re-weighting;
  // its sigmoid has no −ln N bias by default.
  expect_contains(parse_error(R"({"attention": {"preset": "stick_breaking", "positivity": "exp"}})"),
                  {"\"attention.normalize\" = \"stick_breaking\"", "\"attention.positivity\" = \"sigmoid\"",
                   "attention.positivity = \"exp\""});
  expect_contains(parse_error(R"({"attention": {"preset": "stick_breaking", "p": 15}})"),
                  {"re-weighting", "stick-breaking", "attention.p = 15"});
  const gpt::AttentionSpec sb = gpt::resolve_attention(parse(R"({"attention": {"preset": "stick_breaking"}})"));
  EXPECT_TRUE(gpt::attn::stick_breaking(sb));
  EXPECT_EQ(sb.bias, 0.0);
  // Differential attention splits each head's q and k: an even head size,
  // a multiple of 4 under RoPE (each half rotated).
  expect_contains(parse_error(R"({"model": {"n_embd": 72, "n_head": 4}, "attention": {"differential": "on"}})"),
                  {"\"attention.differential\" = \"on\"", "multiple of 4", "model.n_embd = 72"});
  expect_contains(parse_error(R"({"attention": {"differential": "yes"}})"), {"attention.differential", "none, on"});
  const gpt::AttentionSpec d = gpt::resolve_attention(
      parse(R"({"model": {"n_embd": 72, "n_head": 4, "position": "none"}, "attention": {"differential": "on"}})"));
  EXPECT_TRUE(d.differential);
  EXPECT_EQ(d.head_group, gpt::attn::diff::kHeads);
}

// The logit soft-cap: a number >= 0 (0 = none) that composes with every
// stage, resolved into the spec and reported in the results JSON and the
// run's summary line.
TEST(ConfigCrossField, LogitSoftcapParsesComposesAndIsReported) {
  const gpt::Config c = parse(R"({"attention": {"preset": "lssar", "softcap": 50}})");
  const gpt::AttentionSpec s = gpt::resolve_attention(c);
  EXPECT_EQ(s.softcap, 50.0);
  EXPECT_EQ(s.p, 15.0);
  EXPECT_EQ(gpt::attention_to_json(c.attention, s)["softcap"], 50.0);
  EXPECT_NE(gpt::attention_summary(c.attention, s).find("softcap 50"), std::string::npos);
  EXPECT_EQ(gpt::resolve_attention(parse("{}")).softcap, 0.0);
  EXPECT_FALSE(gpt::attention_to_json(parse("{}").attention, gpt::resolve_attention(parse("{}"))).contains("softcap"));
  for (const char* preset : {"softmax", "sink", "softpick", "stick_breaking", "sigmoid", "relu", "cosine"})
    EXPECT_EQ(gpt::resolve_attention(
                  parse((std::string(R"({"attention": {"softcap": 30, "preset": ")") + preset + "\"}}").c_str()))
                  .softcap,
              30.0)
        << preset;
  expect_contains(parse_error(R"({"attention": {"softcap": -1}})"), {"\"attention.softcap\" = -1", ">= 0"});
}

TEST(ConfigCrossField, ValidateConfigChecksCodeBuiltConfigs) {
  gpt::Config c;
  c.train.beta1 = 1.0;
  expect_contains(error_of([&] { gpt::validate_config(c); }), {"\"train.beta1\" = 1.0"});
  c = gpt::Config{};
  c.model.n_head = 3;
  expect_contains(error_of([&] { gpt::validate_config(c); }), {"divisible"});
}

// ---- overrides ------------------------------------------------------------------------------

gpt::Config with_overrides(std::initializer_list<std::string> overrides) {
  json j = json::object();
  for (const auto& o : overrides) gpt::apply_override(j, o);
  return gpt::config_from_json(j);
}

std::string override_error(const std::string& assignment) {
  return error_of([&] {
    json j = json::object();
    gpt::apply_override(j, assignment);
    gpt::config_from_json(j);
  });
}

TEST(ConfigOverrides, NumbersStringsAndLists) {
  gpt::Config c = with_overrides({"train.lr=3e-4", "model.n_layer=6", "model.position=learned",
                                  "eval.multiples=[1,2,4]", "train.seed=18446744073709551615"});
  EXPECT_EQ(c.train.lr, 3e-4);
  EXPECT_EQ(c.model.n_layer, 6);
  EXPECT_EQ(c.model.position, "learned");
  EXPECT_EQ(c.eval.multiples, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(c.train.seed, std::numeric_limits<uint64_t>::max());
}

TEST(ConfigOverrides, ObjectKeysTakeJsonObjects) {
  const gpt::Config c = with_overrides(
      {"data.mix_task=copy", "data.mix_fraction=0.5", R"(data.mix_options={"min_length": 2, "scale": "gap"})"});
  EXPECT_EQ(c.data.mix_options, json({{"min_length", 2}, {"scale", "gap"}}));
  expect_contains(override_error("data.mix_options=pairs"), {"\"data.mix_options\" must be a JSON object", "string"});
}

TEST(ConfigOverrides, StringKeysTakeTheTextAsWritten) {
  gpt::Config c = with_overrides({"run.dir=2024", "data.train=\"quoted\"", "data.val=a=b"});
  EXPECT_EQ(c.run.dir, "2024");
  EXPECT_EQ(c.data.train, "quoted");
  EXPECT_EQ(c.data.val, "a=b");  // only the first '=' separates
}

TEST(ConfigOverrides, ReplaceAFileValueAndKeepItsSiblings) {
  json j = json::parse(R"({"model": {"n_layer": 2, "n_head": 2}})");
  gpt::apply_override(j, "model.n_layer=8");
  EXPECT_EQ(j["model"]["n_layer"], 8);
  EXPECT_EQ(j["model"]["n_head"], 2);
}

TEST(ConfigOverrides, ValueOfTheWrongTypeIsATypeError) {
  expect_contains(override_error("train.lr=abc"), {"\"train.lr\" must be a number, got string \"abc\""});
  expect_contains(override_error("model.n_layer=0"), {"\"model.n_layer\" = 0 is out of range"});
}

TEST(ConfigOverrides, BadPaths) {
  expect_contains(override_error("model.n_heads=4"),
                  {"unknown key \"model.n_heads\"", "valid keys in \"model\": " + kModelKeys});
  expect_contains(override_error("model.n_head.x=4"), {"\"model.n_head.x\" is not section.key", kSections});
  expect_contains(override_error("n_head=4"), {"\"n_head\" is not section.key", kSections});
  expect_contains(override_error("modle.n_head=4"), {"unknown section \"modle\"", kSections});
  expect_contains(override_error("model.n_head"), {"\"model.n_head\" has no '='", "section.key=value"});
}

TEST(ConfigOverrides, SectionThatIsNotAnObject) {
  json j = json::parse(R"({"model": 5})");
  expect_contains(error_of([&] { gpt::apply_override(j, "model.n_layer=2"); }),
                  {"section \"model\" must be an object"});
}

// ---- files ----------------------------------------------------------------------------------

TEST(ConfigFiles, LoadsFileWithCommentsThenOverrides) {
  TempFile f("ok.json",
             "// a small model\n{\"model\": {\"n_layer\": 2, \"n_embd\": 64}, \"train\": {\"steps\": 5, "
             "\"warmup_steps\": 1}}\n");
  gpt::Config c = gpt::load_config(f.path.string(), {"model.n_layer=3"});
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.model.n_embd, 64);
  EXPECT_EQ(c.train.steps, 5);
}

// "extends": a file laid over another (relative to it), section by section
// and key by key, through a chain; overrides apply last; a chain that never
// ends and an "extends" that is not a path are refused, naming the file.
TEST(ConfigFiles, ExtendsLaysAFileOverItsBase) {
  TempFile base("base.json", R"({"model": {"n_layer": 2, "n_embd": 64}, "attention": {"preset": "lssar"},
                                 "train": {"steps": 5, "warmup_steps": 1}})");
  TempFile mid("mid.json", R"({"extends": ")" + base.path.filename().string() +
                               R"(", "attention": {"p": 3}, "model": {"n_embd": 32}})");
  TempFile top("top.json", R"({"extends": ")" + mid.path.filename().string() + R"(", "run": {"dir": "runs/x"}})");
  const gpt::Config c = gpt::load_config(top.path.string(), {"model.n_layer=3"});
  EXPECT_EQ(c.model.n_layer, 3);  // the override, last
  EXPECT_EQ(c.model.n_embd, 32);  // mid over base, key by key
  EXPECT_EQ(c.attention.preset, "lssar");
  EXPECT_EQ(c.attention.p, 3.0);
  EXPECT_EQ(c.train.steps, 5);
  EXPECT_EQ(c.run.dir, "runs/x");
  TempFile loop("loop.json", "");
  std::ofstream(loop.path) << R"({"extends": ")" << loop.path.filename().string() << R"("})";
  expect_contains(error_of([&] { gpt::load_config(loop.path.string()); }),
                  {"\"extends\"", loop.path.string(), "more than 8 files deep"});
  TempFile bad("bad_ext.json", R"({"extends": 3})");
  expect_contains(error_of([&] { gpt::load_config(bad.path.string()); }),
                  {"\"extends\"", bad.path.string(), "must name another config file", "got 3"});
  TempFile gone("gone.json", R"({"extends": "gpt_config_test_no_such_base.json"})");
  expect_contains(error_of([&] { gpt::load_config(gone.path.string()); }),
                  {"gpt_config_test_no_such_base.json", "does not exist"});
}

TEST(ConfigFiles, EmptyPathStartsFromDefaults) {
  gpt::Config c = gpt::load_config("", {"train.steps=7", "train.warmup_steps=0"});
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_EQ(c.model.n_layer, gpt::Config{}.model.n_layer);
}

TEST(ConfigFiles, MissingFileIsNamed) {
  std::string path = (std::filesystem::temp_directory_path() / "gpt_config_test_no_such_file.json").string();
  expect_contains(error_of([&] { gpt::load_config(path); }), {path, "does not exist"});
  expect_contains(error_of([&] { gpt::load_config(std::filesystem::temp_directory_path().string()); }),
                  {"is a directory"});
}

TEST(ConfigFiles, MalformedJsonGivesFileAndPosition) {
  TempFile f("bad.json", "{\n  \"model\": {\"n_layer\": 2,}\n}\n");
  std::string m = error_of([&] { gpt::load_config(f.path.string()); });
  expect_contains(m, {f.path.string(), "not valid JSON", "line 2"});
}

TEST(ConfigFiles, InvalidValueInFileNamesKeyAndFile) {
  TempFile f("range.json", R"({"model": {"n_layer": 0}})");
  std::string m = error_of([&] { gpt::load_config(f.path.string()); });
  expect_contains(m, {"\"model.n_layer\" = 0", "1..256", f.path.string()});
}

// ---- run.precision -------------------------------------------------------------------------

TEST(ConfigPrecision, ParsesTheThreeModesAndDefaultsToFp32) {
  EXPECT_EQ(gpt::Config{}.run.precision, "fp32");
  EXPECT_EQ(parse(R"({"run": {}})").run.precision, "fp32");
  for (const char* p : {"fp32", "tf32", "bf16"}) {
    const std::string text = std::string(R"({"run": {"device": "cuda", "precision": ")") + p + R"("}})";
    EXPECT_EQ(parse(text.c_str()).run.precision, p);
  }
  EXPECT_EQ(with_overrides({"run.precision=bf16"}).run.precision, "bf16");
  gpt::Config c;
  c.run.precision = "tf32";
  EXPECT_EQ(gpt::config_from_json(gpt::config_to_json(c)).run.precision, "tf32");  // round trip
}

TEST(ConfigPrecision, UnknownOrMistypedValuesAreRefused) {
  expect_contains(parse_error(R"({"run": {"precision": "fp16"}})"),
                  {"\"run.precision\" = \"fp16\" is not valid; allowed: fp32, tf32, bf16"});
  expect_contains(parse_error(R"({"run": {"precision": "BF16"}})"), {"\"run.precision\"", "allowed: fp32, tf32, bf16"});
  expect_contains(parse_error(R"({"run": {"precision": 16}})"), {"\"run.precision\" must be a string"});
  expect_contains(error_of([] { with_overrides({"run.precision=half"}); }), {"\"run.precision\"", "fp32, tf32, bf16"});
}

// The device/precision pair is checked where the backend is made (the config
// itself may name bf16 with cpu, e.g. a cuda run evaluated on the cpu).
TEST(ConfigPrecision, CpuWithReducedPrecisionIsAClearError) {
  EXPECT_EQ(gpt::make_backend("cpu", "fp32")->name(), "cpu");
  EXPECT_EQ(gpt::make_backend("cpu")->name(), "cpu");
  for (const char* p : {"bf16", "tf32"}) {
    const std::string m = error_of([&] { gpt::make_backend("cpu", p); });
    expect_contains(m, {std::string("run.precision \"") + p + "\"", "run.device \"cpu\"", "float32 only",
                        "valid: run.precision \"fp32\" on cpu", "run.device \"cuda\""});
  }
  expect_contains(error_of([] { gpt::make_backend("cpu", "fp16"); }),
                  {"run.precision \"fp16\" is not a precision; valid: fp32, tf32, bf16"});
  expect_contains(error_of([] { gpt::make_backend("cuda", "fp16"); }),
                  {"run.precision \"fp16\"", "valid: fp32, tf32, bf16"});
  expect_contains(error_of([] { gpt::make_backend("tpu", "bf16"); }), {"run.device \"tpu\"", "valid: cpu, cuda"});
}

// ---- reference ------------------------------------------------------------------------------

TEST(ConfigReference, MarkdownTableHasARowPerKey) {
  std::string md = gpt::config_reference_markdown();
  expect_contains(
      md, {"| key | type | default | allowed | description |", "| `model.n_layer` | int | `4` | 1..256 |",
           "| `model.position` | string | `\"rope\"` | learned, rope, none, alibi, pope |",
           "| `train.beta2` | float | `0.95` | >= 0 and < 1 |", "| `train.seed` | uint64 | `1337` | 0..2^64-1 |",
           "| `eval.multiples` | list of int | `[1,2,4,8,16]` | non-empty, strictly increasing, each >= 1 |",
           "must be divisible by"});
  size_t rows = 0;
  for (size_t pos = md.find("\n| `"); pos != std::string::npos; pos = md.find("\n| `", pos + 1)) ++rows;
  EXPECT_EQ(rows, gpt::config_schema::keys().size());
}

}  // namespace
