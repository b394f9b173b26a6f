// Hugging Face model directories (config.json + safetensors weights) as the
// project's models, without a conversion step. docs/hf_models.md describes
// the families, the mapping of each config key and tensor, and the refusals.
//
// Families: gpt2, gpt_neox, llama, mistral, qwen2, qwen3. config.json is
// mapped onto the project's config (a block preset of docs/blocks.md plus the
// file's own values; RoPE scaling onto context.*), every key of it accounted
// for: mapped, checked against the one value the project implements, or on a
// list of keys that do not change the forward pass (dropout, token ids, ...).
// Any other key or value is refused by name. The weights are read tensor by
// tensor from the mapped files into the parameter table's layout, each
// family's layout rearranged on the way (GPT-2's Conv1D (in, out) matrices
// transposed, GPT-NeoX's per-head [q, k, v] rows regrouped, separate q/k/v and
// gate/up projections stacked); every tensor of the file must be used.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "convert/safetensors.h"
#include "model/gpt.h"
#include "model/params.h"
#include "train/checkpoint.h"

namespace gpt {

// A directory with config.json and model.safetensors (or its index).
bool is_hf_model_dir(const std::string& path);

struct HfOpenOptions {
  // model.context (the 1x length) instead of config.json's
  // max_position_embeddings; 0: the file's. Refused with RoPE scaling, whose
  // rules read the original length, and above a learned position table.
  int context = 0;
};

class HfModel {
 public:
  // Reads config.json and maps the weights (nothing is copied yet). Errors
  // name the directory and the key or tensor.
  explicit HfModel(const std::string& dir, const HfOpenOptions& opt = {});
  ~HfModel();

  const std::string& dir() const { return dir_; }
  const std::string& model_type() const { return model_type_; }
  // The project's config of the model (validated).
  const Config& config() const { return config_; }
  const SafetensorsModel& weights() const { return *weights_; }

  // Layer `layer`'s slice of parameter `spec` (the whole tensor for a global
  // one; layer is ignored then) in the project's layout, spec.numel() / L (or
  // spec.numel()) values into out.
  void fill(const ParamSpec& spec, int layer, float* out) const;
  // Every parameter of the layout into the model (but those in `skip`, which
  // keep their values), one layer slice at a time through a host buffer of
  // one slice; then checks that every tensor of the files was used.
  void upload(Model<float>& model, const std::vector<std::string>& skip = {}) const;
  // One parameter of the model (spec from model.layout()) the same way;
  // train.init_from calls it for the parameters both models have.
  void upload_tensor(Model<float>& model, const ParamSpec& spec) const;
  // The whole model as one of the project's checkpoints (gpt convert --from-hf).
  Checkpoint to_checkpoint() const;

 private:
  void check_all_used() const;

  std::string dir_, model_type_, prefix_;
  Config config_;
  std::unique_ptr<SafetensorsModel> weights_;
  mutable std::set<std::string> used_;  // the file tensors fill() has read
};

// Writes one of our checkpoints (ckpt_path names it in errors) as a Hugging
// Face model directory: config.json of its family, model.safetensors (F32, or
// BF16 rounded to nearest even) through the same tensor table the loader
// reads, and the run's tokenizer files where its tokenizer is hf:DIR.
// Refuses, saying why, what no family holds: attention other than plain
// softmax, per-layer plans, context methods without a config key, a block
// of no family (docs/hf_models.md §8).
struct HfExport {
  std::string model_type;
  size_t tensors = 0;
  bool tokenizer = false;  // tokenizer files written
};
HfExport export_hf(const Checkpoint& ckpt, const std::string& ckpt_path, const std::string& out_dir, bool bf16);

}  // namespace gpt
