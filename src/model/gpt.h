// The GPT model, written once against Backend<T>: GPT-2 architecture with
// pre-LayerNorm blocks, a pluggable position encoding (learned, rope, none,
// alibi), attention through the backend's attention op (any variant of
// kernels/attention_spec.h), and a tied LM head.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "kernels/attention_spec.h"
#include "model/params.h"

namespace gpt {

// Activations of one forward pass, for B sequences of Tn tokens. Training
// keeps every layer's tensors for the backward pass; inference keeps a single
// layer slot that all layers reuse, and no attention statistics, so memory
// does not grow with depth (and never holds a Tn×Tn matrix in either mode).
template <typename T>
struct Activations;

template <typename T>
class GPT {
 public:
  GPT(const ModelConfig& cfg, const AttentionSpec& attn, Backend<T>& backend);
  ~GPT();
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  const AttentionSpec& attention() const { return attn_; }
  Backend<T>& backend() { return be_; }
  T* params() { return params_.get(); }
  T* grads() { return grads_.get(); }
  size_t num_params() const { return layout_.total; }

  void init(uint64_t seed);                       // GPT-2 initialisation
  void set_params(const std::vector<T>& host);    // host -> backend
  std::vector<T> get_params();                    // backend -> host
  void zero_grad();

  // Training forward: keeps activations for backward(). tokens and targets
  // are host arrays of B*Tn ids. Returns the mean loss.
  double forward(const int32_t* tokens, const int32_t* targets, int B, int Tn);
  // Adds d(loss_scale · mean loss)/dθ to the gradients (loss_scale lets
  // gradient accumulation average over micro-batches). grads_ready, when
  // given, is called with l once the ops that finish layer l's gradients
  // (layout().ranges_of_layer(l)) have been issued, for l = L-1 down to 0,
  // then with -1 for the global tensors: a data-parallel run starts reducing
  // a layer while the backend goes on with the layers below it.
  void backward(double loss_scale = 1.0, const std::function<void(int)>& grads_ready = {});

  // Inference: per-position losses (host, B*Tn) without keeping per-layer
  // activations. Used by evaluation at long contexts.
  void forward_losses(const int32_t* tokens, const int32_t* targets, int B, int Tn, std::vector<T>& losses);
  // Inference: the most likely next token at every position (B*Tn ids; ties
  // go to the lower id), over the real vocabulary.
  void forward_argmax(const int32_t* tokens, int B, int Tn, std::vector<int32_t>& argmax);
  // Inference: logits (first V entries) of the last position of one sequence.
  std::vector<T> next_token_logits(const int32_t* tokens, int Tn);

  // While set (non-null), inference passes add every layer's attention
  // diagnostics to *acc: (n_layer, n_head, kAttentionDiagStats) doubles,
  // resized and zeroed here. Null stops collecting.
  void collect_attention_diagnostics(std::vector<double>* acc);

 private:
  void check_tokens(const int32_t* tokens, size_t n, const char* what) const;
  Activations<T>& activations(int B, int Tn, bool training);
  void forward_trunk(Activations<T>& a);  // embedding, blocks, final LayerNorm, logits
  void losses_pass(const int32_t* tokens, const int32_t* targets, int B, int Tn, bool training,
                   std::vector<T>& losses);

  ModelConfig cfg_;
  AttentionSpec attn_;
  Backend<T>& be_;
  ParamLayout layout_;
  Buffer<T> params_, grads_;
  ParamViews<T> p_, g_;
  std::unique_ptr<Activations<T>> train_acts_, infer_acts_;
  std::vector<double>* diag_ = nullptr;
};

}  // namespace gpt
