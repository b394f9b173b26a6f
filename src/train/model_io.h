// Model and optimizer state <-> checkpoint files. The tensor list comes from
// the parameter table: "param/NAME", "adam_m/NAME", "adam_v/NAME".
#pragma once
#include <string>

#include "config/config.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

namespace gpt {

struct TrainProgress {
  int step = 0;        // optimizer steps completed
  LoaderState loader;  // data position after those steps
};

// Snapshot of model (and optimizer, if given) at a point of training, as
// host copies (tests, llm.c export). Training saves through checkpoint_state.
Checkpoint make_checkpoint(Model<float>& model, Optimizer<float>* opt, const Config& cfg, const TrainProgress& progress);

// The same state for write_checkpoint, without host copies: each tensor is
// read from backend memory one buffer at a time as it is written (a
// non-finite parameter stops the save, naming the tensor). Only the moments
// of a ZeRO-1 optimizer are gathered into host copies here (collective:
// every rank calls it). The sources point into `model`, `opt` and this
// object: write it before either changes.
struct CheckpointState {
  nlohmann::json meta;
  std::vector<TensorSource> tensors;
  std::vector<float> gathered_m, gathered_v;  // sharded optimizer only
};
CheckpointState checkpoint_state(Model<float>& model, Optimizer<float>* opt, const Config& cfg,
                                 const TrainProgress& progress);

// Appends zero optimizer moments ("adam_m/NAME", "adam_v/NAME") for every
// "param/NAME" tensor of an imported checkpoint, so that `gpt train --resume`
// can fine-tune it (gpt convert --with-optimizer).
void add_zero_moments(Checkpoint& ckpt);

// The resolved config stored in a checkpoint (validated).
Config checkpoint_config(const nlohmann::json& meta, const std::string& path);
Config checkpoint_config(const Checkpoint& ckpt, const std::string& path);
TrainProgress checkpoint_progress(const nlohmann::json& meta, const std::string& path);
TrainProgress checkpoint_progress(const Checkpoint& ckpt, const std::string& path);

// Index of the first NaN or infinite value, or n if there is none.
size_t first_nonfinite_index(const float* values, size_t n);

// Throws naming the file and the tensor if a value is NaN or infinite (every
// tensor read from a checkpoint is checked before it is used).
void check_finite(const std::vector<float>& values, const std::string& path, const std::string& tensor);

// Loads parameters (and optimizer moments, if opt is given) into a model of
// the same shape. A tensor missing or of another shape is an error that
// names it and both shapes.
void restore_checkpoint(const Checkpoint& ckpt, const std::string& path, Model<float>& model, Optimizer<float>* opt);
// The same from a checkpoint file, tensor by tensor through the reader's
// buffer into backend memory (no host copy of the model).
// `absent`: parameter tensors the checkpoint need not hold (identity_tensors_added),
// which keep the model's values.
void restore_checkpoint(CheckpointReader& reader, Model<float>& model, Optimizer<float>* opt,
                        const std::vector<std::string>& absent = {});
// Throws, naming the tensor and both shapes, unless the reader holds every
// tensor of layout under prefix ("param/", "adam_m/", ...) with its shape,
// but those named in `absent`.
void check_checkpoint_tensors(const CheckpointReader& reader, const ParamLayout& layout, const std::string& prefix,
                              const std::vector<std::string>& absent = {});

// Copies into `model` every parameter tensor of the checkpoint (file, run
// directory, or Hugging Face model directory, convert/hf.h) that the model
// has with the same name and shape; the others keep
// their values (e.g. wpe when a learned-position model is fine-tuned with
// rope). Returns the names copied and the names left, for the log. Throws if
// no tensor matches.
struct InitFromSummary {
  std::vector<std::string> copied, kept;
};
InitFromSummary init_from_checkpoint(Model<float>& model, const std::string& path);

// RUN_DIR/checkpoints/step_NNNNNNNN.bin
std::string checkpoint_path(const std::string& run_dir, int step);
// Writes the checkpoint, then points RUN_DIR/checkpoints/latest at it.
void save_run_checkpoint(const std::string& run_dir, int step, const Checkpoint& ckpt);
void save_run_checkpoint(const std::string& run_dir, int step, const CheckpointState& state);
// A checkpoint file, or a run directory (its latest checkpoint). Throws if neither.
std::string resolve_checkpoint(const std::string& path_or_run_dir);

}  // namespace gpt

namespace gpt {

// A trained model ready for inference: its config (from the checkpoint), the
// backend it runs on and its weights.
struct LoadedModel {
  std::string path;
  Config config;
  TrainProgress progress;
  std::unique_ptr<Model<float>> model;  // owns its backend
};
// An attention variant to run a trained model with instead of its own
// (training-free evaluation, e.g. InfoScale on a softmax model): `preset`
// replaces the checkpoint's attention block (empty: keep it), then each of
// `sets` ("key=value", keys of the attention section) overrides one key.
// context_methods (names of context_methods_to_json, e.g. {"yarn", "window"})
// likewise replaces the context-extension section, then context_sets
// ("key=value", keys of the context section) override single keys;
// multiples, when given, are the evaluated multiples the result is checked
// against (a mask must hide keys at the longest of them).
struct AttentionOverride {
  std::string preset;
  std::vector<std::string> sets;
  std::vector<std::string> context_methods;
  std::vector<std::string> context_sets;
  std::vector<int> multiples;
  bool empty() const { return preset.empty() && sets.empty(); }
  bool context_empty() const { return context_methods.empty() && context_sets.empty(); }
};

// path: a checkpoint file or a run directory. A non-empty override that is
// incompatible with the trained variant is refused with the reason;
// config.attention holds the variant in use. device: "cpu" or "cuda"
// (make_backend; the checkpoint's own run.device is not used, so a model
// trained on a GPU evaluates anywhere); precision: run.precision of the
// backend ("fp32"; "tf32" and "bf16" need device "cuda"); empty: the
// checkpoint's run.precision on "cuda", "fp32" on "cpu"; storage:
// run.storage ("fp32" or "bf16"), empty: the checkpoint's. config.run.device,
// config.run.precision and config.run.storage are set to what is used.
// A Hugging Face model directory (config.json + safetensors, convert/hf.h)
// loads the same way, straight from its files; hf_context (> 0) replaces its
// 1x length (HfOpenOptions::context).
LoadedModel load_model(const std::string& path, const AttentionOverride& attention = {},
                       const std::string& device = "cpu", const std::string& precision = "",
                       const std::string& storage = "", int hf_context = 0);

}  // namespace gpt
