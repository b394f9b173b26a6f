// llm.c checkpoint import and export; the layout is in llmc.h and
// docs/formats.md. The tensor list is not repeated here as ours: the
// llm.c table below is checked, name by name and shape by shape, against the
// project's parameter table (model/params.h) of the converted config, so a
// change to either side is an error rather than a silently shifted tensor.
#include "convert/llmc.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include <spdlog/spdlog.h>

#include "config/attention.h"
#include "config/layer_plan.h"
#include "config/config.h"
#include "core/check.h"
#include "kernels/bf16_round.h"
#include "model/params.h"
#include "train/model_io.h"
#include "model/block_parts.h"

namespace fs = std::filesystem;

namespace gpt {

static_assert(std::endian::native == std::endian::little, "llm.c files are little-endian and read without swapping");

namespace {

constexpr int kHeaderInts = 256;
constexpr uint64_t kHeaderBytes = kHeaderInts * sizeof(int32_t);
// Other files a user might pass by mistake, to say what they are.
constexpr int32_t kShardMagic16 = 20240520, kShardMagic32 = 20240801;

struct LlmcTensor {
  const char* name;  // our parameter name
  Shape shape;
};

// llm.c's 16 tensors in file order, with the shapes of docs/formats.md.
std::vector<LlmcTensor> llmc_tensors(const LlmcHeader& h) {
  const int64_t Vp = h.padded_vocab, T = h.max_seq_len, L = h.n_layer, C = h.n_embd;
  return {{"wte", {Vp, C}},           {"wpe", {T, C}},      {"ln1w", {L, C}},        {"ln1b", {L, C}},
          {"qkvw", {L, 3 * C, C}},    {"qkvb", {L, 3 * C}}, {"attprojw", {L, C, C}}, {"attprojb", {L, C}},
          {"ln2w", {L, C}},           {"ln2b", {L, C}},     {"fcw", {L, 4 * C, C}},  {"fcb", {L, 4 * C}},
          {"fcprojw", {L, C, 4 * C}}, {"fcprojb", {L, C}},  {"lnfw", {C}},           {"lnfb", {C}}};
}

uint64_t numel(const Shape& s) {
  uint64_t n = 1;
  for (int64_t d : s) n *= static_cast<uint64_t>(d);
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ")";
  return os.str();
}

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// The project's model config for an llm.c header (learned positions, softmax).
Config config_for(const LlmcHeader& h, int context, const std::string& path) {
  Config cfg;
  ModelConfig& m = cfg.model;
  m.n_layer = h.n_layer;
  m.n_head = h.n_head;
  m.n_embd = h.n_embd;
  m.vocab_size = h.vocab_size;
  // Our Vp must equal the file's: 128 as llm.c pads, 64 for a file padded so.
  m.vocab_pad_multiple = h.padded_vocab == round_up(h.vocab_size, 128) ? 128 : 64;
  m.position = "learned";
  m.max_position = h.max_seq_len;
  m.context = context > 0 ? context : h.max_seq_len;
  cfg.attention.preset = "softmax";
  // Learned positions end at T, so the 1x-16x evaluation can only run at 1x.
  cfg.eval.multiples = {1};
  cfg.eval.tokens = std::max<int64_t>(cfg.eval.tokens, eval_span(cfg.eval, m.context));
  try {
    validate_config(cfg);
  } catch (const Error& e) {
    fail("llm.c checkpoint '", path, "': its header (T=", h.max_seq_len, " V=", h.vocab_size, " L=", h.n_layer,
         " H=", h.n_head, " C=", h.n_embd, " Vp=", h.padded_vocab, ", context ", m.context,
         ") describes a model this project cannot hold: ", e.what());
  }
  return cfg;
}

// Our parameter table for cfg must be llm.c's, tensor for tensor.
void check_same_table(const ParamLayout& layout, const std::vector<LlmcTensor>& llmc, const std::string& what) {
  for (size_t i = 0; i < std::max(layout.specs.size(), llmc.size()); ++i) {
    const std::string ours =
        i < layout.specs.size() ? layout.specs[i].name + " " + shape_str(layout.specs[i].shape) : "nothing";
    const std::string theirs = i < llmc.size() ? std::string(llmc[i].name) + " " + shape_str(llmc[i].shape) : "nothing";
    GPT_CHECK(ours == theirs, what, ": tensor ", i, " of the model is ", ours, " but llm.c's format has ", theirs,
              " there; llm.c's format holds exactly the 16 tensors of GPT-2 with learned positions");
  }
}

}  // namespace

uint16_t float_to_bf16(float x) { return round_to_bf16_bits(x); }  // kernels/bf16_round.h

float bf16_to_float(uint16_t b) { return bf16_bits_to_float(b); }

uint64_t llmc_param_count(const LlmcHeader& h) {
  uint64_t n = 0;
  for (const auto& t : llmc_tensors(h)) n += numel(t.shape);
  return n;
}

LlmcHeader read_llmc_header(const std::string& path) {
  std::error_code ec;
  GPT_CHECK(fs::exists(path, ec), "llm.c checkpoint '", path, "': no such file");
  GPT_CHECK(fs::is_regular_file(path, ec), "llm.c checkpoint '", path, "': not a regular file");
  const uint64_t size = fs::file_size(path, ec);
  GPT_CHECK(!ec, "llm.c checkpoint '", path, "': cannot read its size (", ec.message(), ")");
  GPT_CHECK(size >= kHeaderBytes, "llm.c checkpoint '", path, "': file is ", size, " bytes, shorter than the ",
            kHeaderBytes, "-byte header");
  std::ifstream in(path, std::ios::binary);
  GPT_CHECK(in, "llm.c checkpoint '", path, "': cannot open (", std::strerror(errno), ")");
  int32_t hdr[kHeaderInts];
  in.read(reinterpret_cast<char*>(hdr), sizeof hdr);
  GPT_CHECK(in, "llm.c checkpoint '", path, "': cannot read the header");

  const int32_t magic = hdr[0];
  if (magic != kLlmcMagic) {
    std::string hint;
    if (magic == kShardMagic16 || magic == kShardMagic32) hint = " (this is a token shard, not a model)";
    if (std::memcmp(hdr, "GPTCKPT", 8) == 0)
      hint = " (this is one of this project's checkpoints; use --to-llmc to export it)";
    fail("llm.c checkpoint '", path, "': magic ", magic, " is not an llm.c GPT-2 checkpoint (expected ", kLlmcMagic,
         ")", hint);
  }
  LlmcHeader h;
  h.version = hdr[1];
  GPT_CHECK(h.version == kLlmcVersionF32 || h.version == kLlmcVersionBF16, "llm.c checkpoint '", path, "': version ",
            h.version, " is not supported (expected ", kLlmcVersionF32, " for float32 or ", kLlmcVersionBF16,
            " for bfloat16 tensors)");
  h.max_seq_len = hdr[2], h.vocab_size = hdr[3], h.n_layer = hdr[4], h.n_head = hdr[5], h.n_embd = hdr[6];
  h.padded_vocab = hdr[7];
  const std::pair<const char*, int32_t> dims[] = {{"max sequence length T (slot 2)", h.max_seq_len},
                                                  {"vocabulary size V (slot 3)", h.vocab_size},
                                                  {"layers L (slot 4)", h.n_layer},
                                                  {"heads H (slot 5)", h.n_head},
                                                  {"channels C (slot 6)", h.n_embd},
                                                  {"padded vocabulary Vp (slot 7)", h.padded_vocab}};
  for (const auto& [name, v] : dims)
    GPT_CHECK(v > 0, "llm.c checkpoint '", path, "': header ", name, " is ", v, "; it must be > 0");
  GPT_CHECK(h.padded_vocab == round_up(h.vocab_size, 128) || h.padded_vocab == round_up(h.vocab_size, 64),
            "llm.c checkpoint '", path, "': padded vocabulary Vp = ", h.padded_vocab, " is not V = ", h.vocab_size,
            " rounded up to a multiple of 128 (", round_up(h.vocab_size, 128), ") or 64 (", round_up(h.vocab_size, 64),
            ")");
  // The config's limits bound every dimension, so the sizes below cannot overflow.
  config_for(h, 0, path);

  const uint64_t width = h.version == kLlmcVersionF32 ? 4 : 2;
  const uint64_t params = llmc_param_count(h);
  const uint64_t expected = kHeaderBytes + params * width;
  GPT_CHECK(size == expected, "llm.c checkpoint '", path, "': file is ", size, " bytes but its header (version ",
            h.version, ", T=", h.max_seq_len, " V=", h.vocab_size, " L=", h.n_layer, " H=", h.n_head, " C=", h.n_embd,
            " Vp=", h.padded_vocab, ") needs ", kHeaderBytes, " + ", params, " parameters x ", width,
            " bytes = ", expected, " bytes", size < expected ? " (truncated?)" : " (trailing data?)");
  return h;
}

Checkpoint import_llmc(const std::string& path, const LlmcImportOptions& opt) {
  const LlmcHeader h = read_llmc_header(path);
  GPT_CHECK(opt.context >= 0 && opt.context <= h.max_seq_len, "convert --context ", opt.context,
            " must be between 1 and the position table of '", path, "' (T = ", h.max_seq_len, ")");
  const Config cfg = config_for(h, opt.context, path);
  const ParamLayout layout(cfg.model);
  const std::vector<LlmcTensor> table = llmc_tensors(h);
  check_same_table(layout, table, "import of '" + path + "'");

  std::ifstream in(path, std::ios::binary);
  GPT_CHECK(in, "llm.c checkpoint '", path, "': cannot open (", std::strerror(errno), ")");
  in.seekg(static_cast<std::streamoff>(kHeaderBytes));
  Checkpoint ckpt;
  std::vector<uint16_t> half;
  for (const LlmcTensor& t : table) {
    CheckpointTensor ct{"param/" + std::string(t.name), t.shape, std::vector<float>(numel(t.shape))};
    if (h.version == kLlmcVersionF32) {
      in.read(reinterpret_cast<char*>(ct.data.data()), static_cast<std::streamsize>(ct.data.size() * 4));
    } else {
      half.resize(ct.data.size());
      in.read(reinterpret_cast<char*>(half.data()), static_cast<std::streamsize>(half.size() * 2));
      for (size_t i = 0; i < half.size(); ++i) ct.data[i] = bf16_to_float(half[i]);
    }
    GPT_CHECK(in, "llm.c checkpoint '", path, "': read of tensor ", t.name, " failed (file changed while reading?)");
    const size_t bad = first_nonfinite_index(ct.data.data(), ct.data.size());
    GPT_CHECK(bad == ct.data.size(), "llm.c checkpoint '", path, "': tensor ", t.name, " holds a non-finite value (",
              ct.data[bad], " at index ", bad, " of ", ct.data.size(),
              "); a model with NaN or infinite parameters cannot be imported");
    if (std::string_view(t.name) == "wte") {
      // Rows V..Vp-1 pad the table for the GEMM and are never a token: llm.c
      // writes them as zeros, so anything else hints at a mislabelled file.
      const size_t C = static_cast<size_t>(h.n_embd);
      size_t nonzero = 0;
      for (size_t i = static_cast<size_t>(h.vocab_size) * C; i < ct.data.size(); ++i) nonzero += ct.data[i] != 0.0f;
      if (nonzero > 0)
        spdlog::warn(
            "llm.c checkpoint '{}': {} values of wte's padding rows {}..{} are not zero (llm.c writes "
            "zeros there; is the vocabulary size V = {} right?)",
            path, nonzero, h.vocab_size, h.padded_vocab - 1, h.vocab_size);
    }
    ckpt.tensors.push_back(std::move(ct));
  }
  if (opt.with_optimizer) add_zero_moments(ckpt);

  // The fields make_checkpoint writes, for a model at step 0 that has not
  // been trained here, plus where it came from.
  ckpt.meta = {{"format", "gpt-checkpoint"},
               {"config", config_to_json(cfg)},
               {"step", 0},
               {"loader", {{"seed", cfg.train.seed}, {"epoch", 0}, {"index", 0}}},
               {"adam_steps", 0},
               {"converted_from", {{"format", "llm.c"}, {"path", path}, {"version", h.version}}}};
  return ckpt;
}

void export_llmc(const Checkpoint& ckpt, const std::string& ckpt_path, const std::string& out_path, int version) {
  GPT_CHECK(version == kLlmcVersionF32 || version == kLlmcVersionBF16, "export to llm.c: version ", version,
            " must be ", kLlmcVersionF32, " (float32) or ", kLlmcVersionBF16, " (bfloat16)");
  const Config cfg = checkpoint_config(ckpt, ckpt_path);
  const ModelConfig& m = cfg.model;
  GPT_CHECK(m.position == "learned", "export to llm.c: '", ckpt_path, "' has model.position \"", m.position,
            "\"; llm.c's format holds only learned absolute positions (a position table), so a \"", m.position,
            "\" model cannot be written in it");
  const ModelConfig gpt2_block;
  const bool gpt2 = m.norm == gpt2_block.norm && m.mlp == gpt2_block.mlp && m.mlp_width() == 4 * m.n_embd &&
                    m.bias == gpt2_block.bias && m.head == gpt2_block.head && m.residual == gpt2_block.residual &&
                    m.kv_heads() == m.n_head && m.attn_width() == m.n_embd && m.qk_norm == gpt2_block.qk_norm;
  GPT_CHECK(gpt2, "export to llm.c: '", ckpt_path, "' has the block ", block_summary(m),
            "; llm.c's format holds only GPT-2's block (a key/value head per query head of n_embd / n_head, no QK-norm, layernorm, gelu "
            "MLP of 4·n_embd, all biases, tied head, sequential residual)");
  GPT_CHECK(resolve_layer_plan(m).empty(), "export to llm.c: '", ckpt_path, "' has a per-layer plan (",
            layer_plan_summary(m), "); llm.c's format holds one plain softmax attention for every layer");
  const AttentionSpec attn = resolve_attention(cfg), softmax{};
  const bool plain_softmax = attn.score == softmax.score && attn.scale == softmax.scale &&
                             attn.positivity == softmax.positivity && attn.normalize == softmax.normalize &&
                             !attn.sharpened() && attn.bias == 0 && !attn::masked(attn) &&
                             attn.temperature == Temperature::None && !attn.head_temperature &&
                             attn.logit_scale == 1;
  GPT_CHECK(plain_softmax, "export to llm.c: '", ckpt_path, "' has attention ", attention_summary(cfg.attention, attn),
            "; llm.c's format holds only plain softmax attention");

  LlmcHeader h;
  h.version = version;
  h.max_seq_len = m.position_rows();
  h.vocab_size = m.vocab_size;
  h.n_layer = m.n_layer;
  h.n_head = m.n_head;
  h.n_embd = m.n_embd;
  h.padded_vocab = static_cast<int32_t>(round_up(m.vocab_size, 128));
  const ParamLayout layout(m, attn);
  const std::vector<LlmcTensor> table = llmc_tensors(h);
  // Ours may pad wte to 64 (fewer rows); the rows beyond are written as zeros.
  std::vector<LlmcTensor> ours = table;
  ours[0].shape[0] = m.padded_vocab();
  check_same_table(layout, ours, "export of '" + ckpt_path + "'");
  for (const LlmcTensor& t : ours) {
    const std::string name = "param/" + std::string(t.name);
    GPT_CHECK(ckpt.has(name), "export to llm.c: '", ckpt_path, "' has no tensor ", name);
    GPT_CHECK(ckpt.tensor(name).shape == t.shape, "export to llm.c: '", ckpt_path, "': tensor ", name, " has shape ",
              shape_str(ckpt.tensor(name).shape), " but its config says ", shape_str(t.shape));
  }

  const fs::path target(out_path);
  if (target.has_parent_path()) fs::create_directories(target.parent_path());
  const std::string tmp = out_path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  GPT_CHECK(f, "export to llm.c: cannot create '", tmp, "' (", std::strerror(errno), ")");
  bool ok = true;
  auto write = [&](const void* p, size_t n) { ok = ok && (n == 0 || std::fwrite(p, 1, n, f) == n); };
  int32_t hdr[kHeaderInts] = {};
  hdr[0] = kLlmcMagic, hdr[1] = h.version, hdr[2] = h.max_seq_len, hdr[3] = h.vocab_size, hdr[4] = h.n_layer;
  hdr[5] = h.n_head, hdr[6] = h.n_embd, hdr[7] = h.padded_vocab;
  write(hdr, sizeof hdr);
  std::vector<uint16_t> half;
  for (size_t k = 0; k < table.size(); ++k) {
    const std::vector<float>& src = ckpt.tensor("param/" + std::string(table[k].name)).data;
    std::vector<float> padded;
    const std::vector<float>* data = &src;
    if (numel(table[k].shape) != src.size()) {  // wte re-padded from 64 to 128: zero rows appended
      padded = src;
      padded.resize(numel(table[k].shape), 0.0f);
      data = &padded;
    }
    if (version == kLlmcVersionF32) {
      write(data->data(), data->size() * 4);
    } else {
      half.resize(data->size());
      for (size_t i = 0; i < half.size(); ++i) half[i] = float_to_bf16((*data)[i]);
      write(half.data(), half.size() * 2);
    }
  }
  const int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    fail("export to llm.c: writing '", tmp, "' failed (", std::strerror(err), ")");
  }
  if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    const int rename_err = errno;
    std::remove(tmp.c_str());
    fail("export to llm.c: cannot rename '", tmp, "' to '", out_path, "' (", std::strerror(rename_err), ")");
  }
}

}  // namespace gpt
