#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <new>

#include "config/attention.h"
#include "core/check.h"
#include "model/activations.h"
#include "model/attention_block.h"
#include "model/block_parts.h"

namespace gpt {

// The spec as the model runs it: the model config decides the position
// encoding's part (ALiBi, RoPE's base, rotated channels and p-RoPE's kept
// frequencies), whatever the caller passed.
AttentionSpec spec_for_model(AttentionSpec s, const ModelConfig& cfg) {
  if (cfg.position == "alibi") s.position_bias = PositionBias::Alibi;
  if (s.trained_context == 0) s.trained_context = cfg.context;
  s.rope.theta = cfg.rope_theta;
  s.rope.interleaved = cfg.rope_pairing == "interleaved";
  s.rope.rot_dims = rope_rotated_dims(cfg);
  s.rope.keep = cfg.p_rope;
  if (s.rope.trained_context == 0) s.rope.trained_context = cfg.context;
  return s;
}

// The layers as the model runs them: differential layers rotate each half
// of a head, so RoPE's rotated channels are those of a half.
std::vector<LayerAttention> model_layers(std::vector<LayerAttention> layers, const ModelConfig& cfg) {
  for (LayerAttention& la : layers)
    if (la.spec.differential) {
      ModelConfig half = cfg;
      half.n_head = 2 * cfg.n_head;
      half.head_dim = cfg.head_size() / 2;
      la.spec.rope.rot_dims = rope_rotated_dims(half);
    }
  return layers;
}

template <typename T>
GPT<T>::GPT(const ModelConfig& cfg, const AttentionSpec& attn, Backend<T>& backend)
    : cfg_(cfg),
      attn_(spec_for_model(attn, cfg)),
      plan_(resolve_layer_plan(cfg)),
      layers_(model_layers(layer_attention(cfg, plan_, attn_), cfg)),
      be_(backend),
      layout_(cfg, attn) {
  params_ = Buffer<Acc>(be_, layout_.total);
  if constexpr (kWorkingCopy) {
    working_ = Buffer<T>(be_, layout_.total);
    p_ = make_views(layout_, working_.get(), cfg_.n_layer);
  } else {
    p_ = make_views(layout_, params_.get(), cfg_.n_layer);
  }
}

template <typename T>
GPT<T>::~GPT() = default;

template <typename T>
void GPT<T>::init(uint64_t seed) {
  // Through a bounded staging buffer (1M values), not a host copy of the model.
  init_params_in_pieces<Acc>(layout_, cfg_, seed, size_t{1} << 20,
                             [&](size_t offset, size_t n, const Acc* v) { be_.upload(params_.get() + offset, v, n); });
}

template <typename T>
void GPT<T>::set_params(const std::vector<Acc>& host) {
  GPT_CHECK(host.size() == layout_.total, "parameter count mismatch: got ", host.size(), ", model has ", layout_.total);
  be_.upload(params_.get(), host.data(), host.size());
}

template <typename T>
std::vector<accum_t<T>> GPT<T>::get_params() {
  std::vector<Acc> host(layout_.total);
  be_.download(host.data(), params_.get(), host.size());
  return host;
}

// The gradients are allocated at their first use, so that a model that only
// evaluates (gpt eval, gpt sample, a Hugging Face model) holds its
// parameters and activations and nothing more.
template <typename T>
void GPT<T>::ensure_grads() {
  if (grads_.get()) return;
  grads_ = Buffer<Acc>(be_, layout_.total);
  g_ = make_views(layout_, grads_.get(), cfg_.n_layer);
}

template <typename T>
void GPT<T>::zero_grad() {
  ensure_grads();
  be_.zero(grads_.get(), layout_.total);
}

// One set of activations at a time (issue 19): a training pass frees the
// inference buffers; an inference pass (evaluation during or after
// training) runs in the training buffers when they hold its tokens (layer
// slot 0 for every layer, as inference always does), and otherwise frees
// them before allocating its own. The training buffers it ran in are then
// stale: backward() refuses until the next training forward.
template <typename T>
Activations<T>& GPT<T>::activations(int B, int Tn, bool training) {
  const size_t N = static_cast<size_t>(B) * Tn;
  Activations<T>* a = nullptr;
  if (training) {
    infer_acts_.reset();
    if (!(train_acts_ && train_acts_->alloc_B == B && train_acts_->alloc_Tn == Tn)) {
      train_acts_.reset();  // free the old shape before allocating the new one
      train_acts_ = allocate_activations(be_, cfg_, layers_, B, Tn, true);
    }
    train_stale_ = false;
    a = train_acts_.get();
  } else if (train_acts_ && N <= train_acts_->capacity()) {
    train_stale_ = true;
    a = train_acts_.get();
  } else {
    train_acts_.reset();
    if (!(infer_acts_ && N <= infer_acts_->capacity())) {
      infer_acts_.reset();
      infer_acts_ = allocate_activations(be_, cfg_, layers_, B, Tn, false);
    }
    a = infer_acts_.get();
  }
  a->B = B;
  a->Tn = Tn;
  a->training = training;
  a->pos = nullptr;  // plain positions and no document mask unless the pass uploads them
  a->doc = nullptr;
  return *a;
}

template <typename T>
void GPT<T>::set_attention(const AttentionSpec& spec) {
  const AttentionSpec s = spec_for_model(spec, cfg_);
  std::vector<LayerAttention> layers = model_layers(layer_attention(cfg_, plan_, s), cfg_);
  bool far_changed = false;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const AttentionSpec &was = layers_[l].spec, &now = layers[l].spec;
    // The layer's learned tensors: the parameter table's presence flags.
    GPT_CHECK(now.score == was.score && learned_attention({layers[l]}) == learned_attention({layers_[l]}),
              "set_attention: the score type and the learned attention tensors (ssmax scales, sinks, KERPLE and "
              "FIRE biases, forget gate, output gate, differential attention) must not change: they decide the "
              "parameters",
              plan_.empty() ? "" : "; layer " + std::to_string(l) + " (kind " + layers_[l].kind + ") would change");
    far_changed |= remap::on(now.rope) != remap::on(was.rope);
  }
  // The buffers of the far copy exist only with a distance remapping.
  if (far_changed) {
    train_acts_.reset();
    infer_acts_.reset();
  }
  attn_ = s;
  layers_ = std::move(layers);
}

template <typename T>
size_t GPT<T>::check_tokens(const int32_t* tokens, size_t n, const char* what, bool targets) const {
  size_t ignored = 0;
  for (size_t i = 0; i < n; ++i) {
    if (targets && tokens[i] == kIgnoreTarget) {
      ++ignored;
      continue;
    }
    GPT_CHECK(tokens[i] >= 0 && tokens[i] < cfg_.vocab_size, what, " id ", tokens[i], " at position ", i,
              " is outside the vocabulary [0, ", cfg_.vocab_size, ")",
              targets ? " and is not -1 (a target a loss mask does not score)" : "");
  }
  return n - ignored;
}

// Where an inference pass adds layer l's attention diagnostics, or null.
template <typename T>
double* GPT<T>::layer_diagnostics(const Activations<T>& a, int l) const {
  if (!diag_ || a.training) return nullptr;
  return diag_->data() + static_cast<size_t>(l) * cfg_.n_head * kAttentionDiagStats;
}

// Embedding, the blocks, the final LayerNorm and the logits, for the tokens
// already uploaded to a.tokens.
template <typename T>
void GPT<T>::forward_trunk(Activations<T>& a, bool lm_head) {
  const int B = a.B, Tn = a.Tn, C = cfg_.n_embd, N = B * Tn, Vp = cfg_.padded_vocab();
  GPT_CHECK(cfg_.position != "learned" || Tn <= cfg_.position_rows(), "context ", Tn,
            " exceeds the learned position table (", cfg_.position_rows(),
            " rows); learned positions cannot be evaluated past their table");
  // The working copy follows the master parameters, whoever changed them.
  if constexpr (kWorkingCopy) be_.convert(working_.get(), params_.get(), layout_.total);
  be_.encoder_forward(a.encoded.get(), a.tokens.get(), p_.wte, p_.wpe, B, Tn, C, Vp);
  const size_t NC = static_cast<size_t>(N) * C;
  const T* res = a.encoded.get();  // (N,C) residual stream entering the block
  const bool parallel = cfg_.residual == "parallel";
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const LayerViews<T>& w = p_.layers[l];
    LayerActs<T>& x = a.layer(l);
    // res2 = res + attproj(attention(qkv(ln1(res))))
    norm_forward(be_, cfg_, x.ln1.get(), x.ln1_mean.get(), x.ln1_rstd.get(), res, w.ln1w, w.ln1b, N);
    attention_block_forward(be_, a, x, w, layers_[l], l, cfg_, layer_diagnostics(a, l));
    be_.residual_forward(x.res2.get(), res, a.attproj.get(), NC);
    // res3 = res2 + fcproj(act(fc(ln2(res2)))); parallel: ln2 reads res, not res2
    const T* mlp_in = parallel ? res : x.res2.get();
    norm_forward(be_, cfg_, x.ln2.get(), x.ln2_mean.get(), x.ln2_rstd.get(), mlp_in, w.ln2w, w.ln2b, N);
    mlp_forward(be_, cfg_, a, x, w, N);
    be_.residual_forward(x.res3.get(), x.res2.get(), a.fcproj.get(), NC);
    res = x.res3.get();
  }
  norm_forward(be_, cfg_, a.lnf.get(), a.lnf_mean.get(), a.lnf_rstd.get(), res, p_.lnfw, p_.lnfb, N);
  if (lm_head) {
    // LM head: logits = lnf · wteᵀ (tied) or lnf · lmheadᵀ, no bias.
    be_.matmul_forward(a.logits.get(), a.lnf.get(), head_weights(), nullptr, N, C, Vp);
  } else {
    // Regression head: lnf · regwᵀ + regb, N·R values (R <= Vp).
    be_.matmul_forward(a.logits.get(), a.lnf.get(), p_.regw, p_.regb, N, C, cfg_.regression_outputs);
  }
}

template <typename T>
void GPT<T>::regression_pass(const int32_t* tokens, int B, int Tn, bool training, std::vector<Acc>& out) {
  const int R = cfg_.regression_outputs;
  GPT_CHECK(R > 0, "the model has no regression head (model.regression_outputs is 0)");
  const size_t N = static_cast<size_t>(B) * Tn;
  check_tokens(tokens, N, "input token");
  Activations<T>& a = activations(B, Tn, training);
  a.scored = 0;
  be_.upload_tokens(a.tokens.get(), tokens, N);
  forward_trunk(a, false);
  out.resize(N * R);
  download_as_acc(out.data(), a.logits.get(), N * R);
}

template <typename T>
double GPT<T>::forward_regression(const int32_t* tokens, const Acc* targets, int B, int Tn) {
  std::vector<Acc> out;
  regression_pass(tokens, B, Tn, true, out);
  Activations<T>& a = *train_acts_;
  // Per sequence: the mean squared error over its labelled values; then the
  // mean over the sequences with labels. Its gradient goes to backward().
  const size_t per_seq = out.size() / static_cast<size_t>(B);
  a.reg_dout.assign(out.size(), Acc(0));
  double total = 0.0;
  int labelled_seqs = 0;
  std::vector<double> seq_grad(per_seq);
  for (int b = 0; b < B; ++b) {
    const size_t base = static_cast<size_t>(b) * per_seq;
    size_t count = 0;
    double sq = 0.0;
    for (size_t i = 0; i < per_seq; ++i) {
      const double y = static_cast<double>(targets[base + i]);
      if (std::isnan(y)) continue;
      const double e = static_cast<double>(out[base + i]) - y;
      GPT_CHECK(std::isfinite(y), "regression target ", base + i, " is infinite; NaN marks an unlabelled value");
      sq += e * e;
      seq_grad[i] = 2.0 * e;
      ++count;
    }
    if (!count) continue;
    ++labelled_seqs;
    total += sq / static_cast<double>(count);
    for (size_t i = 0; i < per_seq; ++i)
      if (!std::isnan(static_cast<double>(targets[base + i])))
        a.reg_dout[base + i] = static_cast<Acc>(seq_grad[i] / static_cast<double>(count));
  }
  if (labelled_seqs > 1)
    for (Acc& g : a.reg_dout) g = static_cast<Acc>(g / static_cast<Acc>(labelled_seqs));
  a.regression = true;
  return labelled_seqs ? total / labelled_seqs : 0.0;
}

template <typename T>
void GPT<T>::forward_regression_outputs(const int32_t* tokens, int B, int Tn, std::vector<Acc>& out) {
  regression_pass(tokens, B, Tn, false, out);
}

// Uploads the batch, runs the trunk and the classifier, and downloads the
// per-position losses (training keeps every layer's activations).
template <typename T>
void GPT<T>::losses_pass(const int32_t* tokens, const int32_t* targets, int B, int Tn, bool training,
                         std::vector<Acc>& losses, const TokenLayout& layout) {
  const size_t N = static_cast<size_t>(B) * Tn;
  check_tokens(tokens, N, "input token");
  const size_t scored = check_tokens(targets, N, "target token", true);
  if (layout.positions) {
    const std::string why = position_ids_refusal(cfg_, layers_);
    GPT_CHECK(why.empty(), "position ids: ", why);
    for (size_t i = 0; i < N; ++i)
      GPT_CHECK(layout.positions[i] >= 0, "position ids must be >= 0, got ", layout.positions[i], " at token ", i);
  }
  if (layout.doc_begin)
    for (size_t i = 0; i < N; ++i) {
      const int t = static_cast<int>(i % Tn), d = layout.doc_begin[i];
      const bool starts = d == t, continues = t > 0 && d == layout.doc_begin[i - 1];
      GPT_CHECK(d >= 0 && d <= t && (starts || continues), "document mask: token ", t, " of sequence ", i / Tn,
                " has document start ", d, "; each token's start must be its own index or its predecessor's");
    }
  Activations<T>& a = activations(B, Tn, training);
  a.scored = scored;
  a.regression = false;
  be_.upload_tokens(a.tokens.get(), tokens, N);
  be_.upload_tokens(a.targets.get(), targets, N);
  if (layout.positions) {
    be_.upload_tokens(a.pos_ids.get(), layout.positions, N);
    a.pos = a.pos_ids.get();
  }
  if (layout.doc_begin) {
    be_.upload_tokens(a.doc_ids.get(), layout.doc_begin, N);
    a.doc = a.doc_ids.get();
  }
  forward_trunk(a);
  be_.crossentropy_forward(a.losses.get(), a.logits.get(), a.targets.get(), static_cast<int>(N), cfg_.vocab_size,
                           cfg_.padded_vocab());
  losses.resize(N);
  be_.download(losses.data(), a.losses.get(), N);
}

template <typename T>
double GPT<T>::forward(const int32_t* tokens, const int32_t* targets, int B, int Tn, const TokenLayout& layout) {
  std::vector<Acc> losses;
  losses_pass(tokens, targets, B, Tn, true, losses, layout);
  // The mean over the scored positions (the others' losses are 0); 0 when a
  // loss mask scores none of them.
  double sum = 0.0;
  for (Acc v : losses) sum += v;
  const size_t scored = train_acts_->scored;
  return scored ? sum / static_cast<double>(scored) : 0.0;
}

template <typename T>
void GPT<T>::backward(double loss_scale, const std::function<void(int)>& grads_ready) {
  GPT_CHECK(train_acts_ && !train_stale_,
            "backward() needs the activations of a training forward(): there was none yet, or an inference pass "
            "has since run in them or freed them; run the training forward() again first");
  ensure_grads();
  Activations<T>& a = *train_acts_;
  const int B = a.B, Tn = a.Tn, C = cfg_.n_embd, N = B * Tn, Vp = cfg_.padded_vocab();
  const size_t NC = static_cast<size_t>(N) * C;

  be_.zero(a.dln.get(), NC);
  if (a.regression) {
    // Regression head: d(loss_scale · loss)/d(outputs) into the logits
    // buffer, then into the head's weights, bias and the final norm's output.
    const int R = cfg_.regression_outputs;
    std::vector<Acc> dout(a.reg_dout);
    for (Acc& g : dout) g = static_cast<Acc>(g * loss_scale);
    upload_from_acc(a.logits.get(), dout.data(), dout.size());
    be_.matmul_backward(a.dln.get(), g_.regw, g_.regb, a.logits.get(), a.lnf.get(), p_.regw, N, C, R);
  } else {
    // d(loss_scale · mean loss)/d loss_n over the scored positions (the
    // cross-entropy backward gives the others a zero row whatever dl says).
    const double scored = static_cast<double>(std::max<size_t>(a.scored, 1));
    std::vector<Acc> dl(N, static_cast<Acc>(loss_scale / scored));
    be_.upload(a.dlosses.get(), dl.data(), N);
    // Classifier: dlogits overwrite the logits in place.
    be_.crossentropy_backward(a.logits.get(), a.logits.get(), a.targets.get(), a.dlosses.get(), N, cfg_.vocab_size,
                              Vp);
    be_.matmul_backward(a.dln.get(), cfg_.head == "untied" ? g_.lmhead : g_.wte, nullptr, a.logits.get(),
                        a.lnf.get(), head_weights(), N, C, Vp);
  }
  const T* res_top = a.layer(cfg_.n_layer - 1).res3.get();
  be_.zero(a.dres.get(), NC);
  norm_backward(be_, cfg_, a.dres.get(), g_.lnfw, g_.lnfb, a.dln.get(), res_top, p_.lnfw, a.lnf_mean.get(),
                a.lnf_rstd.get(), N);

  // dres holds dL/d(residual leaving block l); each block adds its branches.
  const bool parallel = cfg_.residual == "parallel";
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    const LayerViews<T>& w = p_.layers[l];
    const LayerViews<Acc>& g = g_.layers[l];
    LayerActs<T>& x = a.layer(l);
    const T* res_in = l == 0 ? a.encoded.get() : a.layer(l - 1).res3.get();
    if (!parallel) {
      // MLP branch: res3 = res2 + fcproj(act(fc(ln2(res2)))), then the
      // attention branch from dL/d(res2) = dres.
      mlp_backward(be_, cfg_, a, x, w, g, a.dres.get(), a.dln.get(), N);
      norm_backward(be_, cfg_, a.dres.get(), g.ln2w, g.ln2b, a.dln.get(), x.res2.get(), w.ln2w, x.ln2_mean.get(),
                    x.ln2_rstd.get(), N);
      attention_block_backward(be_, a, x, w, g, layers_[l], l, cfg_);
      norm_backward(be_, cfg_, a.dres.get(), g.ln1w, g.ln1b, a.dln.get(), res_in, w.ln1w, x.ln1_mean.get(),
                    x.ln1_rstd.get(), N);
    } else {
      // Both branches read res_in: each from dL/d(res3) = dres before either
      // norm adds its part to it.
      mlp_backward(be_, cfg_, a, x, w, g, a.dres.get(), a.dln2.get(), N);
      attention_block_backward(be_, a, x, w, g, layers_[l], l, cfg_);
      norm_backward(be_, cfg_, a.dres.get(), g.ln1w, g.ln1b, a.dln.get(), res_in, w.ln1w, x.ln1_mean.get(),
                    x.ln1_rstd.get(), N);
      norm_backward(be_, cfg_, a.dres.get(), g.ln2w, g.ln2b, a.dln2.get(), res_in, w.ln2w, x.ln2_mean.get(),
                    x.ln2_rstd.get(), N);
    }
    if (grads_ready) grads_ready(l);
  }
  be_.encoder_backward(g_.wte, g_.wpe, a.dres.get(), a.tokens.get(), B, Tn, C);
  if (grads_ready) grads_ready(-1);
}

template <typename T>
void GPT<T>::forward_losses(const int32_t* tokens, const int32_t* targets, int B, int Tn, std::vector<Acc>& losses) {
  losses_pass(tokens, targets, B, Tn, false, losses);
}

template <typename T>
void GPT<T>::forward_argmax(const int32_t* tokens, int B, int Tn, std::vector<int32_t>& argmax) {
  const size_t V = cfg_.vocab_size;
  argmax.resize(static_cast<size_t>(B) * Tn);
  forward_logits(tokens, B, Tn, [&](size_t first, size_t rows, const Acc* logits) {
    for (size_t n = 0; n < rows; ++n) {
      const Acc* row = logits + n * V;
      argmax[first + n] = static_cast<int32_t>(std::max_element(row, row + V) - row);
    }
  });
}

template <typename T>
void GPT<T>::forward_logits(const int32_t* tokens, int B, int Tn, const typename Model<Acc>::LogitRows& visit) {
  const size_t N = static_cast<size_t>(B) * Tn;
  check_tokens(tokens, N, "input token");
  Activations<T>& a = activations(B, Tn, false);
  be_.upload_tokens(a.tokens.get(), tokens, N);
  forward_trunk(a);
  const size_t Vp = cfg_.padded_vocab(), V = cfg_.vocab_size;
  // Rows come down in chunks so host memory stays small at large vocabularies.
  constexpr size_t kChunk = 256;
  std::vector<Acc> padded(std::min(N, kChunk) * Vp), real(std::min(N, kChunk) * V);
  for (size_t n0 = 0; n0 < N; n0 += kChunk) {
    const size_t rows = std::min(kChunk, N - n0);
    download_as_acc(padded.data(), a.logits.get() + n0 * Vp, rows * Vp);
    for (size_t n = 0; n < rows; ++n) std::copy_n(padded.data() + n * Vp, V, real.data() + n * V);
    visit(n0, rows, real.data());
  }
}

template <typename T>
std::vector<accum_t<T>> GPT<T>::next_token_logits(const int32_t* tokens, int Tn) {
  check_tokens(tokens, Tn, "input token");
  Activations<T>& a = activations(1, Tn, false);
  be_.upload_tokens(a.tokens.get(), tokens, Tn);
  forward_trunk(a);
  const size_t Vp = cfg_.padded_vocab();
  std::vector<Acc> logits(cfg_.vocab_size);
  download_as_acc(logits.data(), a.logits.get() + (Tn - 1) * Vp, cfg_.vocab_size);
  return logits;
}

template <typename T>
void GPT<T>::download_as_acc(Acc* host, const T* src, size_t count) {
  if constexpr (kWorkingCopy) {
    std::vector<T> raw(count);
    be_.download(raw.data(), src, count);
    for (size_t i = 0; i < count; ++i) host[i] = bf16_bits_to_float(raw[i].bits);
  } else {
    be_.download(host, src, count);
  }
}

template <typename T>
void GPT<T>::upload_from_acc(T* dst, const Acc* host, size_t count) {
  if constexpr (kWorkingCopy) {
    std::vector<T> raw(count);
    for (size_t i = 0; i < count; ++i) raw[i].bits = round_to_bf16_bits(host[i]);
    be_.upload(dst, raw.data(), count);
  } else {
    be_.upload(dst, host, count);
  }
}

template <typename T>
void GPT<T>::collect_attention_diagnostics(std::vector<double>* acc) {
  diag_ = acc;
  if (acc) acc->assign(static_cast<size_t>(cfg_.n_layer) * cfg_.n_head * kAttentionDiagStats, 0.0);
}

template class GPT<float>;
template class GPT<double>;
template class GPT<bf16>;

namespace {

template <typename T>
struct BackendOwner {
  std::unique_ptr<Backend<T>> owned;
};

// A GPT that owns its backend: the base BackendOwner is made first and
// destroyed last, so the GPT's buffers go back to a live backend.
template <typename T>
class OwningModel final : private BackendOwner<T>, public GPT<T> {
 public:
  OwningModel(std::unique_ptr<Backend<T>> be, const ModelConfig& cfg, const AttentionSpec& attn)
      : BackendOwner<T>{std::move(be)}, GPT<T>(cfg, attn, *this->owned) {}
};

}  // namespace

std::unique_ptr<Model<float>> make_model(const ModelConfig& cfg, const AttentionSpec& attn, const std::string& device,
                                         const std::string& precision, const std::string& storage) {
  GPT_CHECK(storage == "fp32" || storage == "bf16", "run.storage \"", storage,
            "\" is not a storage type; valid: fp32, bf16");
  return make_model(cfg, attn, make_backend(device, precision), storage);
}

std::unique_ptr<Model<float>> make_model(const ModelConfig& cfg, const AttentionSpec& attn,
                                         std::unique_ptr<Backend<float>> wide, const std::string& storage,
                                         size_t bf16_chunk_floats) {
  GPT_CHECK(wide, "make_model: no backend given");
  GPT_CHECK(storage == "fp32" || storage == "bf16", "run.storage \"", storage,
            "\" is not a storage type; valid: fp32, bf16");
  try {
    if (storage == "fp32") return std::make_unique<OwningModel<float>>(std::move(wide), cfg, attn);
    return std::make_unique<OwningModel<bf16>>(make_bf16_backend(std::move(wide), bf16_chunk_floats), cfg, attn);
  } catch (const std::bad_alloc&) {
    // Parameters and gradients in float32 (bf16 storage adds a working copy).
    const uint64_t n = ParamLayout(cfg, attn).total;
    const uint64_t bytes = n * sizeof(float) * 2 + (storage == "fp32" ? 0 : n * 2);
    fail("out of memory: the model's ", n, " parameters (", cfg.n_layer, " layers, n_embd ", cfg.n_embd,
         ", vocab_size ", cfg.vocab_size, ") need ", bytes, " bytes (", bytes / 1e9,
         " GB) for parameters and gradients alone, and the allocation failed; training needs as much again for "
         "AdamW's moments, plus activations");
  }
}

}  // namespace gpt
