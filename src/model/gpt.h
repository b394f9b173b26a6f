// The GPT model, written once against Backend<T>: GPT-2 architecture with
// pre-LayerNorm blocks, a pluggable position encoding (learned, rope, none,
// alibi), attention through the backend's attention op (any variant of
// kernels/attention_spec.h), and a tied LM head.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "config/layer_plan.h"
#include "kernels/attention_spec.h"
#include "model/params.h"

namespace gpt {

// Activations of one forward pass, for B sequences of Tn tokens. Training
// keeps every layer's tensors for the backward pass; inference keeps a single
// layer slot that all layers reuse, and no attention statistics, so memory
// does not grow with depth (and never holds a Tn×Tn matrix in either mode).
template <typename T>
struct Activations;

// What a training pass may give besides its tokens (host arrays of B*Tn,
// null: none; docs/training_for_length.md).
struct TokenLayout {
  // Position ids (>= 0) that RoPE and PoPE use instead of 0..Tn-1
  // (train.positions); refused for a model whose position encoding cannot
  // take them (position_ids_refusal).
  const int32_t* positions = nullptr;
  // The document mask (train.document_mask): per token, the index in its
  // sequence of its document's first token (0 <= doc_begin[t] <= t, each
  // either its predecessor's or t itself); keys before it are masked.
  const int32_t* doc_begin = nullptr;
};

// What training, evaluation and sampling see of a model, whatever its
// storage type: A is the float32 side (accum_t of the storage type), the
// type of the master parameters, their gradients and the losses. GPT<T>
// implements it; make_model picks T from run.storage.
template <typename A>
class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual const ParamLayout& layout() const = 0;
  virtual const AttentionSpec& attention() const = 0;
  // Runs the model with another attention spec from now on (evaluation-time
  // variants, calibration). The score type and the learned scales must stay
  // (they decide the parameters): throws otherwise.
  virtual void set_attention(const AttentionSpec& spec) = 0;
  // Every layer's attention as it runs: attention() with the layer's kind of
  // the per-layer plan (model.layer_plan ...) applied; attention() in every
  // layer without a plan.
  virtual const std::vector<LayerAttention>& per_layer_attention() const = 0;
  // The backend's memory and its ops on A tensors (norms, clipping, AdamW).
  virtual ParamBackend<A>& backend() = 0;
  // The master parameters and their gradients: flat buffers of num_params()
  // A values in backend memory, laid out by layout(). Writing the master
  // parameters is how the optimizer, checkpoints and set_params change the
  // model; a model that stores T != A rounds them into its working copy at
  // the start of every forward pass.
  virtual A* params() = 0;
  virtual A* grads() = 0;
  size_t num_params() const { return layout().total; }
  // Bytes per element of the activations and the working parameters.
  virtual size_t storage_bytes() const = 0;

  virtual void init(uint64_t seed) = 0;                     // GPT-2 initialisation
  virtual void set_params(const std::vector<A>& host) = 0;  // host -> backend
  virtual std::vector<A> get_params() = 0;                  // backend -> host
  virtual void zero_grad() = 0;

  // Training forward: keeps activations for backward(). tokens and targets
  // are host arrays of B*Tn ids. Returns the mean loss. layout: position
  // ids and a document mask (TokenLayout), which the backward pass uses too.
  virtual double forward(const int32_t* tokens, const int32_t* targets, int B, int Tn,
                         const TokenLayout& layout = {}) = 0;
  // Adds d(loss_scale · mean loss)/dθ to the gradients (loss_scale lets
  // gradient accumulation average over micro-batches). grads_ready, when
  // given, is called with l once the ops that finish layer l's gradients
  // (layout().ranges_of_layer(l)) have been issued, for l = L-1 down to 0,
  // then with -1 for the global tensors: a data-parallel run starts reducing
  // a layer while the backend goes on with the layers below it.
  virtual void backward(double loss_scale = 1.0, const std::function<void(int)>& grads_ready = {}) = 0;

  // The regression head (model.regression_outputs R > 0; docs/orbits.md,
  // "The force probe"): a training forward of the masked mean squared error,
  // keeping activations for backward(). targets: host B*Tn*R values, NaN
  // where a position has no label. The loss is that of Vafa et al.'s probe:
  // per sequence the mean squared error over its labelled values, then the
  // mean over the sequences that have any (0 when none has). Plain positions
  // 0..Tn-1, no document mask.
  virtual double forward_regression(const int32_t* tokens, const A* targets, int B, int Tn) = 0;
  // Inference: the head's outputs (host, B*Tn*R).
  virtual void forward_regression_outputs(const int32_t* tokens, int B, int Tn, std::vector<A>& out) = 0;

  // Inference: per-position losses (host, B*Tn) without keeping per-layer
  // activations. Used by evaluation at long contexts.
  virtual void forward_losses(const int32_t* tokens, const int32_t* targets, int B, int Tn, std::vector<A>& losses) = 0;
  // Inference: the most likely next token at every position (B*Tn ids; ties
  // go to the lower id), over the real vocabulary.
  virtual void forward_argmax(const int32_t* tokens, int B, int Tn, std::vector<int32_t>& argmax) = 0;
  // Inference: logits (first V entries) of the last position of one sequence.
  virtual std::vector<A> next_token_logits(const int32_t* tokens, int Tn) = 0;
  // Inference: the logits of every position (B*Tn rows of the real
  // vocabulary's V entries), handed to `visit` in order a block of rows at a
  // time (the first row's index, the block's row count, rows·V values), so
  // host memory holds one block whatever the vocabulary.
  using LogitRows = std::function<void(size_t first, size_t rows, const A* logits)>;
  virtual void forward_logits(const int32_t* tokens, int B, int Tn, const LogitRows& visit) = 0;

  // While set (non-null), inference passes add every layer's attention
  // diagnostics to *acc: (n_layer, n_head, kAttentionDiagStats) doubles,
  // resized and zeroed here. Null stops collecting.
  virtual void collect_attention_diagnostics(std::vector<double>* acc) = 0;
};

// The GPT over storage type T (float, double, or bf16): activations and the
// working parameters the ops read are T. For T = bf16 the master parameters
// and gradients are float32 (accum_t) and the working copy is their
// rounding; for float and double the master parameters are the working ones.
template <typename T>
class GPT : public Model<accum_t<T>> {
 public:
  using Acc = accum_t<T>;
  GPT(const ModelConfig& cfg, const AttentionSpec& attn, Backend<T>& backend);
  ~GPT() override;
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  const ModelConfig& config() const override { return cfg_; }
  const ParamLayout& layout() const override { return layout_; }
  const AttentionSpec& attention() const override { return attn_; }
  void set_attention(const AttentionSpec& spec) override;
  const std::vector<LayerAttention>& per_layer_attention() const override { return layers_; }
  Backend<T>& backend() override { return be_; }
  Acc* params() override { return params_.get(); }
  Acc* grads() override {
    ensure_grads();
    return grads_.get();
  }
  size_t storage_bytes() const override { return sizeof(T); }

  void init(uint64_t seed) override;
  void set_params(const std::vector<Acc>& host) override;
  std::vector<Acc> get_params() override;
  void zero_grad() override;
  double forward(const int32_t* tokens, const int32_t* targets, int B, int Tn,
                 const TokenLayout& layout = {}) override;
  void backward(double loss_scale = 1.0, const std::function<void(int)>& grads_ready = {}) override;
  double forward_regression(const int32_t* tokens, const Acc* targets, int B, int Tn) override;
  void forward_regression_outputs(const int32_t* tokens, int B, int Tn, std::vector<Acc>& out) override;
  void forward_losses(const int32_t* tokens, const int32_t* targets, int B, int Tn, std::vector<Acc>& losses) override;
  void forward_argmax(const int32_t* tokens, int B, int Tn, std::vector<int32_t>& argmax) override;
  std::vector<Acc> next_token_logits(const int32_t* tokens, int Tn) override;
  void forward_logits(const int32_t* tokens, int B, int Tn, const typename Model<Acc>::LogitRows& visit) override;
  void collect_attention_diagnostics(std::vector<double>* acc) override;

 private:
  static constexpr bool kWorkingCopy = !std::is_same_v<T, Acc>;
  // Throws on an id outside the vocabulary (targets: kIgnoreTarget is
  // allowed); returns the number of ids that are not kIgnoreTarget.
  size_t check_tokens(const int32_t* tokens, size_t n, const char* what, bool targets = false) const;
  Activations<T>& activations(int B, int Tn, bool training);
  double* layer_diagnostics(const Activations<T>& a, int l) const;
  // The LM head's (Vp, C) weights: the token embedding (model.head "tied") or its own.
  const T* head_weights() const { return cfg_.head == "untied" ? p_.lmhead : p_.wte; }
  // Embedding, blocks, final norm, then the LM head's logits (lm_head) or
  // the regression head's outputs (in the logits buffer).
  void forward_trunk(Activations<T>& a, bool lm_head = true);
  // Uploads the batch and runs the trunk and the regression head; out: its
  // B*Tn*R outputs.
  void regression_pass(const int32_t* tokens, int B, int Tn, bool training, std::vector<Acc>& out);
  void losses_pass(const int32_t* tokens, const int32_t* targets, int B, int Tn, bool training,
                   std::vector<Acc>& losses, const TokenLayout& layout = {});
  // count values of backend T memory to host Acc values.
  void download_as_acc(Acc* host, const T* src, size_t count);
  // count host Acc values into backend T memory (rounded once for bf16).
  void upload_from_acc(T* dst, const Acc* host, size_t count);

  ModelConfig cfg_;
  AttentionSpec attn_;
  LayerPlan plan_;
  std::vector<LayerAttention> layers_;  // attn_ with each layer's kind applied
  Backend<T>& be_;
  ParamLayout layout_;
  void ensure_grads();  // grads_ and g_ on first use (zero_grad, backward, grads)
  Buffer<Acc> params_, grads_;
  Buffer<T> working_;  // T != Acc only: the rounded master parameters
  ParamViews<T> p_;
  ParamViews<Acc> g_;
  std::unique_ptr<Activations<T>> train_acts_, infer_acts_;  // at most one of them held (activations())
  bool train_stale_ = false;  // an inference pass has run in train_acts_ since the training forward
  std::vector<double>* diag_ = nullptr;
};

// A model and the backend it runs on, from run.device, run.precision (the
// CUDA GEMMs) and run.storage ("fp32" or "bf16": make_bf16_backend over the
// device's float32 backend). Throws gpt::Error for an invalid choice, naming
// the key and the valid values.
std::unique_ptr<Model<float>> make_model(const ModelConfig& cfg, const AttentionSpec& attn, const std::string& device,
                                         const std::string& precision = "fp32", const std::string& storage = "fp32");
// The same over a float32 backend already made (make_backend); for bf16
// storage, bf16_chunk_floats is the adapter's chunk (make_bf16_backend; 0:
// whole tensors, as gpt bench --only phases compares).
std::unique_ptr<Model<float>> make_model(const ModelConfig& cfg, const AttentionSpec& attn,
                                         std::unique_ptr<Backend<float>> backend, const std::string& storage = "fp32",
                                         size_t bf16_chunk_floats = kBf16ChunkFloats);

}  // namespace gpt
