#include "train/model_io.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include <spdlog/spdlog.h>

#include "config/attention.h"
#include "convert/hf.h"
#include "core/check.h"
#include "core/files.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ")";
  return os.str();
}

}  // namespace

size_t first_nonfinite_index(const float* values, size_t n) {
  size_t i = 0;
  while (i < n && std::isfinite(values[i])) ++i;
  return i;
}

// values[0..n) are elements first.. of the tensor's `total`.
static void check_finite_piece(const float* values, size_t n, const std::string& path, const std::string& tensor,
                               uint64_t first, uint64_t total) {
  const size_t i = first_nonfinite_index(values, n);
  GPT_CHECK(i == n, "checkpoint ", path, ": tensor ", tensor, " holds a non-finite value (", values[i], " at index ",
            first + i, " of ", total, "); a model with NaN or infinite parameters cannot be trained or evaluated");
}

void check_finite(const std::vector<float>& values, const std::string& path, const std::string& tensor) {
  check_finite_piece(values.data(), values.size(), path, tensor, 0, values.size());
}

static nlohmann::json checkpoint_meta(Optimizer<float>* opt, const Config& cfg, const TrainProgress& progress) {
  return {{"format", "gpt-checkpoint"},
          {"config", config_to_json(cfg)},
          {"step", progress.step},
          // The data order is the only randomness after initialisation; it
          // is a function of (seed, epoch), so this is the RNG state.
          {"loader", {{"seed", cfg.train.seed}, {"epoch", progress.loader.epoch}, {"index", progress.loader.index}}},
          {"adam_steps", opt ? opt->steps_taken() : 0},
          // What the state tensors hold: AdamW's moments, or for Muon's
          // matrices its momentum (docs/optimizers.md).
          {"optimizer", opt ? opt->kind() : cfg.train.optimizer}};
}

// The optimizer state of a checkpoint means one optimizer's moments: resuming
// with the other would read Muon's momentum as AdamW's or the reverse.
// Checkpoints from before train.optimizer existed hold AdamW's.
static void check_optimizer(const nlohmann::json& meta, const std::string& path, const Optimizer<float>& opt) {
  const std::string saved = meta.contains("optimizer") && meta["optimizer"].is_string()
                                ? meta["optimizer"].get<std::string>()
                                : std::string("adamw");
  GPT_CHECK(saved == opt.kind(), "checkpoint ", path, " holds the state of train.optimizer \"", saved,
            "\", but this run's is \"", opt.kind(), "\"; resume with train.optimizer = \"", saved,
            "\", or start a new run from its parameters with train.init_from");
}

CheckpointState checkpoint_state(Model<float>& model, Optimizer<float>* opt, const Config& cfg,
                                 const TrainProgress& progress) {
  CheckpointState st;
  st.meta = checkpoint_meta(opt, cfg, progress);
  ParamBackend<float>& be = model.backend();
  if (opt && opt->sharded()) opt->download_moments(st.gathered_m, st.gathered_v);  // collective
  // Never a checkpoint that cannot be loaded back: a non-finite parameter
  // stops the save (the trainer checks after every update, so this only
  // fires on a path that skipped that check).
  for (const ParamSpec& s : model.layout().specs) {
    const float* src = model.params() + s.offset;
    const std::string name = s.name;
    st.tensors.push_back({"param/" + s.name, s.shape, [&be, src, name](uint64_t first, uint64_t n, float* out) {
                            be.download(out, src + first, n);
                            const size_t i = first_nonfinite_index(out, n);
                            GPT_CHECK(i == n, "refusing to save a checkpoint: parameter tensor ", name,
                                      " holds a non-finite value (", out[i], ")");
                          }});
  }
  if (opt) {
    for (const char* which : {"adam_m/", "adam_v/"}) {
      const bool first_moment = which[5] == 'm';
      const float* device = first_moment ? opt->m() : opt->v();
      const float* host = opt->sharded() ? (first_moment ? st.gathered_m.data() : st.gathered_v.data()) : nullptr;
      for (const ParamSpec& s : model.layout().specs) {
        const size_t off = s.offset;
        st.tensors.push_back(
            {which + s.name, s.shape, [&be, device, host, off](uint64_t first, uint64_t n, float* out) {
               if (host)
                 std::copy(host + off + first, host + off + first + n, out);
               else
                 be.download(out, device + off + first, n);
             }});
      }
    }
  }
  return st;
}

Checkpoint make_checkpoint(Model<float>& model, Optimizer<float>* opt, const Config& cfg, const TrainProgress& progress) {
  Checkpoint ckpt;
  ckpt.meta = checkpoint_meta(opt, cfg, progress);
  auto add = [&](const std::string& prefix, const std::vector<float>& host) {
    for (const ParamSpec& s : model.layout().specs)
      ckpt.tensors.push_back(
          {prefix + s.name, s.shape, std::vector<float>(host.begin() + s.offset, host.begin() + s.offset + s.numel())});
  };
  const std::vector<float> params = model.get_params();
  // Never a checkpoint that cannot be loaded back: a non-finite parameter
  // stops the save (the trainer checks after every update, so this only
  // fires on a path that skipped that check).
  for (const ParamSpec& s : model.layout().specs) {
    const size_t i = first_nonfinite_index(params.data() + s.offset, s.numel());
    GPT_CHECK(i == s.numel(), "refusing to save a checkpoint: parameter tensor ", s.name, " holds a non-finite value (",
              params[s.offset + i], ")");
  }
  add("param/", params);
  if (opt) {
    std::vector<float> m, v;
    opt->download_moments(m, v);  // gathers the shards under ZeRO-1
    add("adam_m/", m);
    add("adam_v/", v);
  }
  return ckpt;
}

void add_zero_moments(Checkpoint& ckpt) {
  const size_t n = ckpt.tensors.size();
  for (const char* prefix : {"adam_m/", "adam_v/"})
    for (size_t i = 0; i < n; ++i) {
      const CheckpointTensor& t = ckpt.tensors[i];
      if (t.name.rfind("param/", 0) != 0) continue;
      ckpt.tensors.push_back({prefix + t.name.substr(6), t.shape, std::vector<float>(t.data.size(), 0.0f)});
    }
}

Config checkpoint_config(const Checkpoint& ckpt, const std::string& path) { return checkpoint_config(ckpt.meta, path); }

Config checkpoint_config(const nlohmann::json& meta, const std::string& path) {
  GPT_CHECK(meta.contains("config") && meta["config"].is_object(), "checkpoint ", path, " has no config");
  try {
    return config_from_json(meta["config"]);
  } catch (const Error& e) {
    fail("checkpoint ", path, " holds a config this build does not accept: ", e.what());
  }
}

// meta[key] (absent: 0) as a non-negative integer at most `max`, read at
// full width: a step of 2^32 + 3 is refused, not narrowed to 3.
static int64_t meta_count(const nlohmann::json& meta, const char* key, const std::string& path, int64_t max) {
  if (!meta.contains(key)) return 0;
  const nlohmann::json& v = meta.at(key);
  GPT_CHECK(v.is_number_integer(), "checkpoint ", path, " has a malformed \"", key, "\": ", v.dump(),
            " (expected a non-negative integer)");
  const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(max)
                                           : v.get<int64_t>() >= 0 && v.get<int64_t>() <= max;
  GPT_CHECK(fits, "checkpoint ", path, " has \"", key, "\" = ", v.dump(), ", outside 0..", max,
            " (a corrupt or foreign checkpoint)");
  return v.get<int64_t>();
}

TrainProgress checkpoint_progress(const Checkpoint& ckpt, const std::string& path) {
  return checkpoint_progress(ckpt.meta, path);
}

TrainProgress checkpoint_progress(const nlohmann::json& meta, const std::string& path) {
  TrainProgress p;
  // train.steps is an int: a completed step count never exceeds INT_MAX.
  p.step = static_cast<int>(meta_count(meta, "step", path, std::numeric_limits<int>::max()));
  try {
    if (meta.contains("loader")) {
      p.loader.epoch = meta["loader"].value("epoch", uint64_t{0});
      p.loader.index = meta["loader"].value("index", uint64_t{0});
    }
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint ", path, " has a malformed training state: ", e.what());
  }
  return p;
}

// Checks every parameter tensor of the layout against the checkpoint before
// anything is allocated: a checkpoint whose config describes a huge model must
// also hold its tensors, so memory stays proportional to the file.
// shape_of(name): the tensor's shape, or null when the checkpoint lacks it.
static void check_tensor_shapes(const std::function<const std::vector<int64_t>*(const std::string&)>& shape_of,
                                const std::string& path, const ParamLayout& layout, const std::string& prefix,
                                const std::vector<std::string>& absent = {}) {
  for (const ParamSpec& s : layout.specs) {
    if (std::find(absent.begin(), absent.end(), s.name) != absent.end()) continue;
    const std::string name = prefix + s.name;
    const std::vector<int64_t>* shape = shape_of(name);
    GPT_CHECK(shape, "checkpoint ", path, " has no tensor ", name,
              " (it was saved from a model of a different shape or kind)");
    GPT_CHECK(*shape == s.shape, "checkpoint ", path, ": tensor ", name, " has shape ", shape_str(*shape),
              " but the model expects ", shape_str(s.shape), " (different model shape)");
  }
}

static void check_checkpoint_tensors(const Checkpoint& ckpt, const std::string& path, const ParamLayout& layout,
                                     const std::string& prefix) {
  check_tensor_shapes([&](const std::string& name) { return ckpt.has(name) ? &ckpt.tensor(name).shape : nullptr; },
                      path, layout, prefix);
}

void restore_checkpoint(const Checkpoint& ckpt, const std::string& path, Model<float>& model, Optimizer<float>* opt) {
  // Whole host copies in the flat layout, then one upload (each rank keeps
  // its shard of the moments under ZeRO-1).
  auto gather = [&](const std::string& prefix) {
    check_checkpoint_tensors(ckpt, path, model.layout(), prefix);
    std::vector<float> flat(model.num_params());
    for (const ParamSpec& s : model.layout().specs) {
      const std::vector<float>& d = ckpt.tensor(prefix + s.name).data;
      check_finite(d, path, prefix + s.name);
      std::copy(d.begin(), d.end(), flat.begin() + s.offset);
    }
    return flat;
  };
  model.set_params(gather("param/"));
  if (opt) {
    check_optimizer(ckpt.meta, path, *opt);
    const std::vector<float> m = gather("adam_m/"), v = gather("adam_v/");
    opt->upload_moments(m.data(), v.data());
    opt->set_steps_taken(meta_count(ckpt.meta, "adam_steps", path, std::numeric_limits<int64_t>::max()));
  }
}

void check_checkpoint_tensors(const CheckpointReader& r, const ParamLayout& layout, const std::string& prefix,
                              const std::vector<std::string>& absent) {
  check_tensor_shapes([&](const std::string& name) { return r.has(name) ? &r.entry(name).shape : nullptr; }, r.path(),
                      layout, prefix, absent);
}

// Tensor `name` of the reader, whose values sit at flat offsets offset ..
// offset + numel of the parameters' layout, into backend memory: the values
// at flat indices inside `keep` go to dst[index - keep.begin]. Piece by
// piece, each piece checked for non-finite values first.
static void upload_tensor(CheckpointReader& r, const std::string& name, ParamBackend<float>& be, float* dst,
                          size_t offset, dist::Shard keep) {
  const CheckpointReader::Entry& e = r.entry(name);
  r.for_each_piece(e, [&](uint64_t first, uint64_t n, const float* v) {
    check_finite_piece(v, n, r.path(), name, first, e.numel());
    const size_t lo = std::max<size_t>(offset + first, keep.begin);
    const size_t hi = std::min<size_t>(offset + first + n, keep.end);
    if (lo < hi) be.upload(dst + (lo - keep.begin), v + (lo - offset - first), hi - lo);
  });
}

void restore_checkpoint(CheckpointReader& r, Model<float>& model, Optimizer<float>* opt,
                        const std::vector<std::string>& absent) {
  GPT_CHECK(!opt || absent.empty(), "restore_checkpoint: tensors absent from ", r.path(), " have no optimizer state");
  check_checkpoint_tensors(r, model.layout(), "param/", absent);
  if (opt) {
    check_optimizer(r.meta(), r.path(), *opt);
    check_checkpoint_tensors(r, model.layout(), "adam_m/");
    check_checkpoint_tensors(r, model.layout(), "adam_v/");
  }
  const dist::Shard all{0, model.num_params()};
  for (const ParamSpec& s : model.layout().specs)
    if (std::find(absent.begin(), absent.end(), s.name) == absent.end())
      upload_tensor(r, "param/" + s.name, model.backend(), model.params(), s.offset, all);
  if (opt) {
    // Each rank keeps the part of each tensor inside its shard.
    for (const ParamSpec& s : model.layout().specs) {
      upload_tensor(r, "adam_m/" + s.name, model.backend(), opt->m(), s.offset, opt->shard());
      upload_tensor(r, "adam_v/" + s.name, model.backend(), opt->v(), s.offset, opt->shard());
    }
    opt->set_steps_taken(meta_count(r.meta(), "adam_steps", r.path(), std::numeric_limits<int64_t>::max()));
  }
}

// Whether `theirs` holds tensor s with its shape and its meaning: the same
// initialisation kind (ssmax's s_h and HeadScale's τ_h share attnscale, KERPLE's
// two variants attnkerple, with other values).
static bool same_tensor(const ParamLayout& theirs, const ParamSpec& s) {
  return theirs.has(s.name) && theirs.find(s.name).shape == s.shape && theirs.find(s.name).init == s.init;
}

InitFromSummary init_from_checkpoint(Model<float>& model, const std::string& path) {
  if (is_hf_model_dir(path)) {
    // A Hugging Face model directory: its tensors in the project's layout
    // (convert/hf.h), one layer slice at a time.
    const HfModel hf(path);
    const ParamLayout theirs(hf.config().model, resolve_attention(hf.config()));
    InitFromSummary sum;
    for (const ParamSpec& s : model.layout().specs) {
      if (!same_tensor(theirs, s)) {
        sum.kept.push_back(s.name);
        continue;
      }
      hf.upload_tensor(model, s);
      sum.copied.push_back(s.name);
    }
    GPT_CHECK(!sum.copied.empty(), "train.init_from: no parameter tensor of the Hugging Face model ", path,
              " matches this model's names and shapes; `gpt info --hf ", path,
              "` prints the model section that does");
    return sum;
  }
  const std::string file = resolve_checkpoint(path);
  CheckpointReader r(file);
  const Config theirs_cfg = checkpoint_config(r.meta(), file);
  const ParamLayout theirs(theirs_cfg.model, resolve_attention(theirs_cfg));
  InitFromSummary sum;
  for (const ParamSpec& s : model.layout().specs) {
    const std::string name = "param/" + s.name;
    if (r.has(name) && r.entry(name).shape == s.shape && same_tensor(theirs, s)) {
      upload_tensor(r, name, model.backend(), model.params(), s.offset, dist::Shard{0, model.num_params()});
      sum.copied.push_back(s.name);
    } else {
      sum.kept.push_back(s.name);
    }
  }
  GPT_CHECK(!sum.copied.empty(), "train.init_from: no parameter tensor of ", file,
            " matches this model's names and shapes (different model width, depth or vocabulary?)");
  return sum;
}

std::string checkpoint_path(const std::string& run_dir, int step) {
  char name[64];
  std::snprintf(name, sizeof name, "step_%08d.bin", step);
  return (fs::path(run_dir) / "checkpoints" / name).string();
}

// Points RUN_DIR/checkpoints/latest at the checkpoint just written.
static void point_latest(const std::string& run_dir, const std::string& path) {
  write_file_atomic((fs::path(run_dir) / "checkpoints" / "latest").string(), fs::path(path).filename().string() + "\n");
}

void save_run_checkpoint(const std::string& run_dir, int step, const Checkpoint& ckpt) {
  const std::string path = checkpoint_path(run_dir, step);
  save_checkpoint(path, ckpt);
  point_latest(run_dir, path);
}

void save_run_checkpoint(const std::string& run_dir, int step, const CheckpointState& state) {
  const std::string path = checkpoint_path(run_dir, step);
  write_checkpoint(path, state.meta, state.tensors);
  point_latest(run_dir, path);
}

std::string resolve_checkpoint(const std::string& p) {
  GPT_CHECK(fs::exists(p), "no such checkpoint file or run directory: ", p);
  if (!fs::is_directory(p)) return p;
  const fs::path latest = fs::path(p) / "checkpoints" / "latest";
  GPT_CHECK(fs::exists(latest), p, " is a directory but not a run directory with checkpoints (no ", latest.string(),
            ")");
  std::ifstream in(latest);
  std::string name;
  std::getline(in, name);
  const fs::path file = fs::path(p) / "checkpoints" / name;
  GPT_CHECK(!name.empty() && fs::exists(file), latest.string(), " names a checkpoint that does not exist: ", name);
  return file.string();
}

}  // namespace gpt

namespace gpt {

LoadedModel load_model(const std::string& path, const AttentionOverride& attention, const std::string& device,
                       const std::string& precision, const std::string& storage, int hf_context) {
  LoadedModel m;
  // A Hugging Face model directory (convert/hf.h) or one of our checkpoints.
  std::unique_ptr<HfModel> hf;
  std::unique_ptr<CheckpointReader> ckpt;
  if (is_hf_model_dir(path)) {
    hf = std::make_unique<HfModel>(path, HfOpenOptions{hf_context});
    m.path = path;
    m.config = hf->config();
  } else {
    GPT_CHECK(hf_context == 0, "--hf-context applies to Hugging Face model directories; '", path, "' is not one");
    m.path = resolve_checkpoint(path);
    ckpt = std::make_unique<CheckpointReader>(m.path);
    m.config = checkpoint_config(ckpt->meta(), m.path);
    m.progress = checkpoint_progress(ckpt->meta(), m.path);
  }
  AttentionSpec spec = resolve_attention(m.config);
  std::vector<std::string> added;  // tensors the override adds at their identity value (HeadScale's τ_h = 1)
  if (!attention.empty() || !attention.context_empty()) {
    nlohmann::json j = config_to_json(m.config);
    if (!attention.preset.empty()) {
      // Another preset's stages; the position bias, the output gate and
      // differential attention, which come with parameters of their own, stay
      // the checkpoint's.
      nlohmann::json a = {{"preset", attention.preset}};
      for (const char* key : {"position_bias", "output_gate", "differential"})
        if (j["attention"].contains(key)) a[key] = j["attention"][key];
      j["attention"] = a;
    }
    if (!attention.context_methods.empty()) j["context"] = context_methods_to_json(attention.context_methods);
    if (!attention.multiples.empty()) {
      // For the context rules only: a span and tokens that hold the longest
      // multiple (gpt eval checks its own --span and --tokens afterwards).
      j["eval"]["multiples"] = attention.multiples;
      const int max_m = *std::max_element(attention.multiples.begin(), attention.multiples.end());
      const int64_t span = std::max<int64_t>(eval_span(m.config.eval, m.config.model.context),
                                             static_cast<int64_t>(max_m) * m.config.model.context);
      j["eval"]["span"] = span;
      j["eval"]["tokens"] = std::max<int64_t>(m.config.eval.tokens, span);
    }
    Config wanted;
    try {
      for (const std::string& set : attention.sets) apply_override(j, "attention." + set);
      for (const std::string& set : attention.context_sets) apply_override(j, "context." + set);
      wanted = config_from_json(j);
    } catch (const Error& e) {
      fail(attention.context_empty() ? "attention override: " : "attention/context override: ", e.what());
    }
    wanted.eval = m.config.eval;  // the caller's multiples were for the check only
    const AttentionSpec wanted_spec = resolve_attention(wanted);
    check_attention_compatible(m.config.model, spec, wanted_spec, attention_summary(m.config.attention, spec),
                               attention_summary(wanted.attention, wanted_spec));
    added = identity_tensors_added(m.config.model, spec, wanted_spec);
    m.config = wanted;
    spec = wanted_spec;
  }
  if (ckpt) check_checkpoint_tensors(*ckpt, ParamLayout(m.config.model, spec), "param/", added);
  const std::string gemm_precision = !precision.empty() ? precision
                                     : device == "cuda" ? m.config.run.precision
                                                        : "fp32";
  m.config.run.device = device;
  m.config.run.precision = gemm_precision;
  m.config.run.storage = !storage.empty() ? storage : m.config.run.storage;
  m.model = make_model(m.config.model, spec, device, gemm_precision, m.config.run.storage);
  if (!added.empty()) {
    m.model->init(m.config.train.seed);  // the added tensors' initial values; the rest is overwritten
    std::vector<ParamSpec> specs;
    for (const std::string& n : added) specs.push_back(m.model->layout().find(n));
    spdlog::info("{}: not in the checkpoint; starts where the model runs as trained", describe_tensors(specs));
  }
  if (hf)
    hf->upload(*m.model, added);
  else
    restore_checkpoint(*ckpt, *m.model, nullptr, added);
  return m;
}

}  // namespace gpt
