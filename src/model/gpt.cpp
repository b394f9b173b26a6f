#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <new>

#include "config/attention.h"
#include "core/check.h"

namespace gpt {

// Per-layer activations (storage type T): X(name, width per token). Widths
// use C, C3 = 3C and C4 = 4C.
#define GPT_LAYER_ACTS(X)                                                                                    \
  X(ln1, C) X(atty, C) X(res2, C) X(ln2, C) X(fch, C4) X(fch_gelu, C4) X(res3, C)
// Per-layer row statistics (float32 side, Acc): one value per token.
#define GPT_LAYER_STATS(X) X(ln1_mean) X(ln1_rstd) X(ln2_mean) X(ln2_rstd)
// Gradient scratch for the backward pass, shared by all layers.
#define GPT_GRAD_SCRATCH(X) X(dres, C) X(dln, C) X(dqkv, C3) X(datty, C) X(dfch, C4) X(dfch_gelu, C4)

template <typename T>
struct LayerActs {
  using Acc = accum_t<T>;
#define GPT_FIELD(name, width) Buffer<T> name;
#define GPT_STAT_FIELD(name) Buffer<Acc> name;
  GPT_LAYER_ACTS(GPT_FIELD)
  GPT_LAYER_STATS(GPT_STAT_FIELD)
  Buffer<T> qkv;          // attention's input: the qkv projection, rotated by RoPE with rope positions
  Buffer<T> qkvf;         // qkv rotated at the far positions of a distance remapping (remap::on only)
  Buffer<Acc> att_stats;  // (B, NH, Tn, stats_per_row), training only
  Buffer<T> fgate;        // the forget gate's logits g (B, Tn, NH) (forget only)
  Buffer<Acc> fcum;       // its c (B, NH, Tn), c_t = Σ_{l<=t} ln σ(g_l): attention's input
  Buffer<T> ogate;        // the output gate's logits x·W_gᵀ + b_g (N, C) (output_gate only)
  Buffer<T> attg;         // the gated attention output atty·σ(ogate), the output projection's input
  Buffer<T> atty2;        // differential: the kernel heads' outputs (N, 2C), which atty combines
  Buffer<Acc> diff_rstd;  // differential: 1/rms of each head's combination (N, NH)
};

template <typename T>
struct Activations {
  using Acc = accum_t<T>;
  int B = 0, Tn = 0;      // the pass running on them
  bool training = false;  // that pass: every layer's slot, attention statistics
  size_t scored = 0;      // that pass's targets other than kIgnoreTarget (the mean loss's count)
  int alloc_B = 0, alloc_Tn = 0;  // the shape they were allocated for
  size_t capacity() const { return static_cast<size_t>(alloc_B) * alloc_Tn; }  // tokens each buffer holds
  std::vector<LayerActs<T>> layers;  // n_layer slots when allocated for training, 1 for inference
  Buffer<T> encoded, lnf, logits;
  Buffer<Acc> lnf_mean, lnf_rstd, losses, dlosses;
  TokenBuffer tokens, targets;
  GPT_GRAD_SCRATCH(GPT_FIELD)
  Buffer<T> dqkvr, dqkvf;
  Buffer<T> dfgate;    // the forget gate's dL/dg (B, Tn, NH)
  Buffer<Acc> dfcum;   // and dL/dc (B, NH, Tn)
  Buffer<T> dattg, dogate;  // the output gate's dL/d(gated output), dL/d(logits)
  // FIRE's table b (NH, Tn, Tn) of the layer running (made again in the
  // backward) and its dL/db (B, NH, Tn, Tn); grown on first use (fire only).
  Buffer<Acc> fire_table, dfire;
  // Differential attention (attn::diff), shared by the layers: qkv split into
  // the kernel heads (N, 6C; the far copy's too), made again in the backward;
  // the forget gate's c and FIRE's table repeated over a head's kernel heads,
  // and the gradients of all of them (grown on first use where noted).
  Buffer<T> qkv2, qkvf2, datty2, dqkv2, dqkvf2;
  Buffer<Acc> fcum2, dfcum2, fire_table2, dfire2;
  // Forward scratch shared by the layers: values no backward reads. The two
  // output projections (the residual adds them) and, with rope positions,
  // the qkv projection before RoPE (RoPE's backward needs only its gradient).
  Buffer<T> attproj, fcproj, qkv_pre;
#undef GPT_FIELD
#undef GPT_STAT_FIELD
  LayerActs<T>& layer(int l) { return layers[training ? l : 0]; }
};

// The spec as the model runs it: the model config decides the position
// encoding's part (ALiBi, RoPE's base and rotated channels), whatever the
// caller passed.
AttentionSpec spec_for_model(AttentionSpec s, const ModelConfig& cfg) {
  if (cfg.position == "alibi") s.position_bias = PositionBias::Alibi;
  if (s.trained_context == 0) s.trained_context = cfg.context;
  s.rope.theta = cfg.rope_theta;
  s.rope.rot_dims = rope_rotated_dims(cfg);
  if (s.rope.trained_context == 0) s.rope.trained_context = cfg.context;
  return s;
}

// How a layer's attention runs in the kernels: C and NH of the qkv it
// reads (differential attention: 2C and attn::diff::kHeads·NH heads of D/2),
// and the heads RoPE rotates (differential: each half of q and k, 2·NH).
struct KernelHeads {
  int C, NH, rope_NH;
};
KernelHeads kernel_heads(const AttentionSpec& s, int C, int NH) {
  if (!s.differential) return {C, NH, NH};
  return {2 * C, attn::diff::kHeads * NH, 2 * NH};
}

// The layers as the model runs them: differential layers rotate each half
// of a head, so RoPE's rotated channels are those of a half.
std::vector<LayerAttention> model_layers(std::vector<LayerAttention> layers, const ModelConfig& cfg) {
  for (LayerAttention& la : layers)
    if (la.spec.differential) {
      ModelConfig half = cfg;
      half.n_head = 2 * cfg.n_head;
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
  grads_ = Buffer<Acc>(be_, layout_.total);
  if constexpr (kWorkingCopy) {
    working_ = Buffer<T>(be_, layout_.total);
    p_ = make_views(layout_, working_.get(), cfg_.n_layer);
  } else {
    p_ = make_views(layout_, params_.get(), cfg_.n_layer);
  }
  g_ = make_views(layout_, grads_.get(), cfg_.n_layer);
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
  GPT_CHECK(host.size() == layout_.total, "parameter count mismatch: got ", host.size(), ", model has ",
            layout_.total);
  be_.upload(params_.get(), host.data(), host.size());
}

template <typename T>
std::vector<accum_t<T>> GPT<T>::get_params() {
  std::vector<Acc> host(layout_.total);
  be_.download(host.data(), params_.get(), host.size());
  return host;
}

template <typename T>
void GPT<T>::zero_grad() {
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
      train_acts_ = allocate_activations(B, Tn, true);
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
      infer_acts_ = allocate_activations(B, Tn, false);
    }
    a = infer_acts_.get();
  }
  a->B = B;
  a->Tn = Tn;
  a->training = training;
  return *a;
}

template <typename T>
std::unique_ptr<Activations<T>> GPT<T>::allocate_activations(int B, int Tn, bool training) {
  auto a = std::make_unique<Activations<T>>();
  a->alloc_B = B;
  a->alloc_Tn = Tn;
  const size_t N = static_cast<size_t>(B) * Tn, C = cfg_.n_embd, C3 = 3 * C, C4 = 4 * C;
  const size_t Vp = cfg_.padded_vocab();
  a->layers.resize(training ? cfg_.n_layer : 1);
  // What a layer slot needs: its layer's, or any layer's for slot 0, which
  // inference passes share among all layers (also in training buffers:
  // activations()).
  bool any_rope = false, any_far = false, any_forget = false, any_gate = false, any_diff = false;
  bool diff_far = false, diff_forget = false;
  for (const LayerAttention& la : layers_) {
    any_rope |= la.rope;
    any_far |= remap::on(la.spec.rope);
    any_forget |= la.spec.forget();
    any_gate |= la.spec.output_gate;
    any_diff |= la.spec.differential;
    diff_far |= la.spec.differential && remap::on(la.spec.rope);
    diff_forget |= la.spec.differential && la.spec.forget();
  }
  for (size_t i = 0; i < a->layers.size(); ++i) {
    LayerActs<T>& l = a->layers[i];
    const AttentionSpec& ls = layers_[i].spec;
    const bool own = training && i > 0;
    const bool far = own ? remap::on(ls.rope) : any_far;
    const bool forget = own ? ls.forget() : any_forget;
    const bool gate = own ? ls.output_gate : any_gate;
    const bool diff = own ? ls.differential : any_diff;
    // The kernel heads' statistics: kHeads per head on differential layers.
    const size_t stat_heads = static_cast<size_t>(cfg_.n_head) * (diff ? attn::diff::kHeads : 1);
#define GPT_ALLOC(name, width) l.name = Buffer<T>(be_, N * (width));
#define GPT_ALLOC_STAT(name) l.name = Buffer<Acc>(be_, N);
    GPT_LAYER_ACTS(GPT_ALLOC)
    GPT_LAYER_STATS(GPT_ALLOC_STAT)
#undef GPT_ALLOC_STAT
    l.qkv = Buffer<T>(be_, N * C3);
    if (far) l.qkvf = Buffer<T>(be_, N * C3);
    if (training) l.att_stats = Buffer<Acc>(be_, N * stat_heads * ls.stats_per_row());
    if (diff) {
      l.atty2 = Buffer<T>(be_, N * 2 * C);
      l.diff_rstd = Buffer<Acc>(be_, N * cfg_.n_head);
    }
    if (forget) {
      l.fgate = Buffer<T>(be_, N * cfg_.n_head);
      l.fcum = Buffer<Acc>(be_, N * cfg_.n_head);
    }
    if (gate) {
      l.ogate = Buffer<T>(be_, N * C);
      l.attg = Buffer<T>(be_, N * C);
    }
  }
  a->attproj = Buffer<T>(be_, N * C);
  a->fcproj = Buffer<T>(be_, N * C);
  if (any_diff) {
    a->qkv2 = Buffer<T>(be_, N * 2 * C3);
    if (diff_far) a->qkvf2 = Buffer<T>(be_, N * 2 * C3);
    if (diff_forget) a->fcum2 = Buffer<Acc>(be_, N * cfg_.n_head * attn::diff::kHeads);
    if (training) {
      a->datty2 = Buffer<T>(be_, N * 2 * C);
      a->dqkv2 = Buffer<T>(be_, N * 2 * C3);
      if (diff_far) a->dqkvf2 = Buffer<T>(be_, N * 2 * C3);
      if (diff_forget) a->dfcum2 = Buffer<Acc>(be_, N * cfg_.n_head * attn::diff::kHeads);
    }
  }
  if (any_rope) a->qkv_pre = Buffer<T>(be_, N * C3);
  a->encoded = Buffer<T>(be_, N * C);
  a->lnf = Buffer<T>(be_, N * C);
  a->lnf_mean = Buffer<Acc>(be_, N);
  a->lnf_rstd = Buffer<Acc>(be_, N);
  a->logits = Buffer<T>(be_, N * Vp);
  a->losses = Buffer<Acc>(be_, N);
  a->tokens = TokenBuffer(be_, N);
  a->targets = TokenBuffer(be_, N);
  if (training) {
    a->dlosses = Buffer<Acc>(be_, N);
#define GPT_ALLOC_SCRATCH(name, width) a->name = Buffer<T>(be_, N * (width));
    GPT_GRAD_SCRATCH(GPT_ALLOC_SCRATCH)
#undef GPT_ALLOC_SCRATCH
    if (any_rope) a->dqkvr = Buffer<T>(be_, N * C3);
    if (any_far) a->dqkvf = Buffer<T>(be_, N * C3);
    if (any_forget) {
      a->dfgate = Buffer<T>(be_, N * cfg_.n_head);
      a->dfcum = Buffer<Acc>(be_, N * cfg_.n_head);
    }
    if (any_gate) {
      a->dattg = Buffer<T>(be_, N * C);
      a->dogate = Buffer<T>(be_, N * C);
    }
  }
#undef GPT_ALLOC
  return a;
}

template <typename T>
void GPT<T>::set_attention(const AttentionSpec& spec) {
  const AttentionSpec s = spec_for_model(spec, cfg_);
  std::vector<LayerAttention> layers = model_layers(layer_attention(cfg_, plan_, s), cfg_);
  bool far_changed = false;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const AttentionSpec &was = layers_[l].spec, &now = layers[l].spec;
    GPT_CHECK(now.learned_scale() == was.learned_scale() && now.learned_sink() == was.learned_sink() &&
                  now.kerple() == was.kerple() && (!now.kerple() || now.position_bias == was.position_bias) &&
                  now.forget() == was.forget() && now.fire() == was.fire() && now.output_gate == was.output_gate &&
                  now.differential == was.differential && now.score == was.score,
              "set_attention: the score type, the learned scales, sinks, KERPLE and FIRE biases, forget gate, "
              "output gate and differential attention must not change (they decide the parameters)",
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

// FIRE's bias table (NH, Tn, Tn) of one layer's block p, in a's shared buffer.
template <typename T>
const accum_t<T>* make_fire_table(Backend<T>& be, Activations<T>& a, const T* p, const AttentionSpec& spec, int NH,
                                  int Tn) {
  const size_t n = static_cast<size_t>(NH) * Tn * Tn;
  if (a.fire_table.size() < n) a.fire_table = Buffer<accum_t<T>>(be, n);
  be.fire_forward(a.fire_table.get(), p, Tn, NH, attn::fire::threshold0(spec.trained_context));
  return a.fire_table.get();
}

// Differential attention's kernel inputs (attn::diff): qkv (and the far copy
// of a distance remapping) split into the kernel heads, and the forget
// gate's c and FIRE's table repeated over each head's kernel heads.
template <typename T>
struct DiffInputs {
  const T* qkv = nullptr;
  const T* qkv_far = nullptr;
  const accum_t<T>* fcum = nullptr;
  const accum_t<T>* fire = nullptr;
};
template <typename T>
DiffInputs<T> split_for_kernels(Backend<T>& be, Activations<T>& a, const T* qkv, const T* qkv_far,
                                const accum_t<T>* fcum, const accum_t<T>* fire, int B, int Tn, int C, int NH) {
  const int N = B * Tn, g = attn::diff::kHeads;
  DiffInputs<T> d;
  be.diff_split_forward(a.qkv2.get(), qkv, N, C, NH);
  d.qkv = a.qkv2.get();
  if (qkv_far) {
    be.diff_split_forward(a.qkvf2.get(), qkv_far, N, C, NH);
    d.qkv_far = a.qkvf2.get();
  }
  if (fcum) {
    be.head_repeat(a.fcum2.get(), fcum, B, NH, Tn, g);
    d.fcum = a.fcum2.get();
  }
  if (fire) {
    const size_t TT = static_cast<size_t>(Tn) * Tn;
    if (a.fire_table2.size() < TT * NH * g) a.fire_table2 = Buffer<accum_t<T>>(be, TT * NH * g);
    be.head_repeat(a.fire_table2.get(), fire, 1, NH, TT, g);
    d.fire = a.fire_table2.get();
  }
  return d;
}

// Embedding, the blocks, the final LayerNorm and the logits, for the tokens
// already uploaded to a.tokens.
template <typename T>
void GPT<T>::forward_trunk(Activations<T>& a) {
  const int B = a.B, Tn = a.Tn, C = cfg_.n_embd, NH = cfg_.n_head, N = B * Tn, Vp = cfg_.padded_vocab();
  GPT_CHECK(cfg_.position != "learned" || Tn <= cfg_.position_rows(), "context ", Tn,
            " exceeds the learned position table (", cfg_.position_rows(),
            " rows); learned positions cannot be evaluated past their table");
  // The working copy follows the master parameters, whoever changed them.
  if constexpr (kWorkingCopy) be_.convert(working_.get(), params_.get(), layout_.total);
  be_.encoder_forward(a.encoded.get(), a.tokens.get(), p_.wte, p_.wpe, B, Tn, C, Vp);
  const T* res = a.encoded.get();  // (N,C) residual stream entering the block
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const LayerViews<T>& w = p_.layers[l];
    LayerActs<T>& x = a.layer(l);
    const bool rope = layers_[l].rope;
    const AttentionSpec spec = for_length(layers_[l].spec, Tn);  // YaRN's attention factor depends on the length
    const KernelHeads kh = kernel_heads(spec, C, NH);
    RopeSpec far_rope = spec.rope;
    far_rope.far_positions = true;
    be_.layernorm_forward(x.ln1.get(), x.ln1_mean.get(), x.ln1_rstd.get(), res, w.ln1w, w.ln1b, N, C);
    // With rope positions the projection goes to the shared scratch and RoPE
    // writes the layer's qkv.
    T* const proj = rope ? a.qkv_pre.get() : x.qkv.get();
    be_.matmul_forward(proj, x.ln1.get(), w.qkvw, w.qkvb, N, C, 3 * C);
    if (rope) be_.rope_forward(x.qkv.get(), proj, B, Tn, C, kh.rope_NH, spec.rope, 0);
    if (spec.forget()) {  // the forget gate: g = ln1·fgatewᵀ + fgateb, c = prefix sums of ln σ(g)
      be_.matmul_forward(x.fgate.get(), x.ln1.get(), w.fgatew, w.fgateb, N, C, NH);
      be_.forget_forward(x.fcum.get(), x.fgate.get(), B, Tn, NH);
    }
    const Acc* fire = spec.fire() ? make_fire_table(be_, a, w.attnfire, spec, NH, Tn) : nullptr;
    const T* qkv = x.qkv.get();
    const T* qkv_far = nullptr;
    if (remap::on(spec.rope)) {  // the second rotation of a distance remapping
      be_.rope_forward(x.qkvf.get(), proj, B, Tn, C, kh.rope_NH, far_rope, 0);
      qkv_far = x.qkvf.get();
    }
    double* diag = diag_ && !a.training ? diag_->data() + static_cast<size_t>(l) * NH * kAttentionDiagStats : nullptr;
    Acc* stats = a.training ? x.att_stats.get() : nullptr;
    const Acc* fcum = spec.forget() ? x.fcum.get() : nullptr;
    if (spec.differential) {  // the two maps as kernel heads, then their combination
      const DiffInputs<T> di = split_for_kernels(be_, a, qkv, qkv_far, fcum, fire, B, Tn, C, NH);
      std::vector<double> kdiag(diag ? static_cast<size_t>(kh.NH) * kAttentionDiagStats : 0, 0.0);
      be_.attention_forward(x.atty2.get(), stats, di.qkv, B, Tn, kh.C, kh.NH, spec,
                            HeadParams<T, Acc>(w.attnscale, w.attnsink, w.attnkerple, di.fcum, di.fire),
                            diag ? kdiag.data() : nullptr, di.qkv_far);
      // A head's diagnostics: the sums over its kernel heads, i.e. the mean of its two maps per row.
      for (size_t k = 0; k < kdiag.size(); ++k)
        diag[k / (attn::diff::kHeads * kAttentionDiagStats) * kAttentionDiagStats + k % kAttentionDiagStats] +=
            kdiag[k];
      be_.diff_combine_forward(x.atty.get(), x.diff_rstd.get(), x.atty2.get(), w.attnlambda, w.attnsubln, N, C, NH,
                               attn::diff::lambda_init(l));
    } else {
      be_.attention_forward(x.atty.get(), stats, qkv, B, Tn, C, NH, spec,
                            HeadParams<T, Acc>(w.attnscale, w.attnsink, w.attnkerple, fcum, fire), diag, qkv_far);
    }
    const T* att_out = x.atty.get();
    if (spec.output_gate) {  // gated attention: atty ⊙ σ(ln1·W_gᵀ + b_g)
      be_.matmul_forward(x.ogate.get(), x.ln1.get(), w.ogatew, w.ogateb, N, C, C);
      be_.sigmoid_gate_forward(x.attg.get(), x.atty.get(), x.ogate.get(), static_cast<size_t>(N) * C);
      att_out = x.attg.get();
    }
    be_.matmul_forward(a.attproj.get(), att_out, w.attprojw, w.attprojb, N, C, C);
    be_.residual_forward(x.res2.get(), res, a.attproj.get(), static_cast<size_t>(N) * C);
    be_.layernorm_forward(x.ln2.get(), x.ln2_mean.get(), x.ln2_rstd.get(), x.res2.get(), w.ln2w, w.ln2b, N, C);
    be_.matmul_forward(x.fch.get(), x.ln2.get(), w.fcw, w.fcb, N, C, 4 * C);
    be_.gelu_forward(x.fch_gelu.get(), x.fch.get(), static_cast<size_t>(N) * 4 * C);
    be_.matmul_forward(a.fcproj.get(), x.fch_gelu.get(), w.fcprojw, w.fcprojb, N, 4 * C, C);
    be_.residual_forward(x.res3.get(), x.res2.get(), a.fcproj.get(), static_cast<size_t>(N) * C);
    res = x.res3.get();
  }
  be_.layernorm_forward(a.lnf.get(), a.lnf_mean.get(), a.lnf_rstd.get(), res, p_.lnfw, p_.lnfb, N, C);
  // Tied LM head: logits = lnf · wteᵀ, no bias.
  be_.matmul_forward(a.logits.get(), a.lnf.get(), p_.wte, nullptr, N, C, Vp);
}

// Uploads the batch, runs the trunk and the classifier, and downloads the
// per-position losses (training keeps every layer's activations).
template <typename T>
void GPT<T>::losses_pass(const int32_t* tokens, const int32_t* targets, int B, int Tn, bool training,
                         std::vector<Acc>& losses) {
  const size_t N = static_cast<size_t>(B) * Tn;
  check_tokens(tokens, N, "input token");
  const size_t scored = check_tokens(targets, N, "target token", true);
  Activations<T>& a = activations(B, Tn, training);
  a.scored = scored;
  be_.upload_tokens(a.tokens.get(), tokens, N);
  be_.upload_tokens(a.targets.get(), targets, N);
  forward_trunk(a);
  be_.crossentropy_forward(a.losses.get(), a.logits.get(), a.targets.get(), static_cast<int>(N), cfg_.vocab_size,
                           cfg_.padded_vocab());
  losses.resize(N);
  be_.download(losses.data(), a.losses.get(), N);
}

template <typename T>
double GPT<T>::forward(const int32_t* tokens, const int32_t* targets, int B, int Tn) {
  std::vector<Acc> losses;
  losses_pass(tokens, targets, B, Tn, true, losses);
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
  Activations<T>& a = *train_acts_;
  const int B = a.B, Tn = a.Tn, C = cfg_.n_embd, NH = cfg_.n_head, N = B * Tn, Vp = cfg_.padded_vocab();
  const size_t NC = static_cast<size_t>(N) * C;

  // d(loss_scale · mean loss)/d loss_n over the scored positions (the
  // cross-entropy backward gives the others a zero row whatever dl says).
  const double scored = static_cast<double>(std::max<size_t>(a.scored, 1));
  std::vector<Acc> dl(N, static_cast<Acc>(loss_scale / scored));
  be_.upload(a.dlosses.get(), dl.data(), N);
  // Classifier: dlogits overwrite the logits in place.
  be_.crossentropy_backward(a.logits.get(), a.logits.get(), a.targets.get(), a.dlosses.get(), N, cfg_.vocab_size,
                            Vp);
  be_.zero(a.dln.get(), NC);
  be_.matmul_backward(a.dln.get(), g_.wte, nullptr, a.logits.get(), a.lnf.get(), p_.wte, N, C, Vp);
  const T* res_top = a.layer(cfg_.n_layer - 1).res3.get();
  be_.zero(a.dres.get(), NC);
  be_.layernorm_backward(a.dres.get(), g_.lnfw, g_.lnfb, a.dln.get(), res_top, p_.lnfw, a.lnf_mean.get(),
                         a.lnf_rstd.get(), N, C);

  // dres holds dL/d(residual leaving block l); each block adds its branches.
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    const LayerViews<T>& w = p_.layers[l];
    const LayerViews<Acc>& g = g_.layers[l];
    LayerActs<T>& x = a.layer(l);
    const bool rope = layers_[l].rope;
    const AttentionSpec spec = for_length(layers_[l].spec, Tn);
    const KernelHeads kh = kernel_heads(spec, C, NH);
    const bool far = remap::on(spec.rope);
    RopeSpec far_rope = spec.rope;
    far_rope.far_positions = true;
    const T* res_in = l == 0 ? a.encoded.get() : a.layer(l - 1).res3.get();
    // MLP branch: res3 = res2 + fcproj(gelu(fc(ln2(res2))))
    be_.zero(a.dfch_gelu.get(), NC * 4);
    be_.matmul_backward(a.dfch_gelu.get(), g.fcprojw, g.fcprojb, a.dres.get(), x.fch_gelu.get(), w.fcprojw, N,
                        4 * C, C);
    be_.zero(a.dfch.get(), NC * 4);
    be_.gelu_backward(a.dfch.get(), x.fch.get(), a.dfch_gelu.get(), NC * 4);
    be_.zero(a.dln.get(), NC);
    be_.matmul_backward(a.dln.get(), g.fcw, g.fcb, a.dfch.get(), x.ln2.get(), w.fcw, N, C, 4 * C);
    be_.layernorm_backward(a.dres.get(), g.ln2w, g.ln2b, a.dln.get(), x.res2.get(), w.ln2w, x.ln2_mean.get(),
                           x.ln2_rstd.get(), N, C);
    // Attention branch: res2 = res_in + attproj(attention(qkv(ln1(res_in))))
    be_.zero(a.datty.get(), NC);
    const bool gate = spec.output_gate;
    if (gate) {  // through the output projection to the gated output, then the gate
      be_.zero(a.dattg.get(), NC);
      be_.matmul_backward(a.dattg.get(), g.attprojw, g.attprojb, a.dres.get(), x.attg.get(), w.attprojw, N, C, C);
      be_.zero(a.dogate.get(), NC);
      be_.sigmoid_gate_backward(a.datty.get(), a.dogate.get(), a.dattg.get(), x.atty.get(), x.ogate.get(), NC);
    } else {
      be_.matmul_backward(a.datty.get(), g.attprojw, g.attprojb, a.dres.get(), x.atty.get(), w.attprojw, N, C, C);
    }
    be_.zero(a.dqkv.get(), NC * 3);
    const bool forget = spec.forget();
    if (forget) be_.zero(a.dfcum.get(), static_cast<size_t>(N) * NH);
    const bool fire = spec.fire();
    const Acc* fire_tab = fire ? make_fire_table(be_, a, w.attnfire, spec, NH, Tn) : nullptr;
    Acc* dfire = nullptr;
    if (fire) {
      const size_t n = static_cast<size_t>(B) * NH * Tn * Tn;
      if (a.dfire.size() < n) a.dfire = Buffer<Acc>(be_, n);
      dfire = a.dfire.get();
      be_.zero(dfire, n);
    }
    const HeadGrads<Acc> dhead(g.attnscale, g.attnsink, g.attnkerple, forget ? a.dfcum.get() : nullptr, dfire);
    const HeadParams<T, Acc> head(w.attnscale, w.attnsink, w.attnkerple, forget ? x.fcum.get() : nullptr,
                                  fire_tab);
    // dL/d(qkv as attention read it): rotated (rope) or as projected; the
    // far copy's (a distance remapping, rope only) separately.
    T* const dq_att = rope ? a.dqkvr.get() : a.dqkv.get();
    if (rope) be_.zero(a.dqkvr.get(), NC * 3);
    if (far) be_.zero(a.dqkvf.get(), NC * 3);
    if (spec.differential) {  // through the combination to the kernel heads, then back through the split
      const int g4 = attn::diff::kHeads;
      be_.diff_combine_backward(a.datty2.get(), g.attnlambda, g.attnsubln, a.datty.get(), x.atty2.get(),
                                x.diff_rstd.get(), w.attnlambda, w.attnsubln, N, C, NH, attn::diff::lambda_init(l));
      const DiffInputs<T> di = split_for_kernels(be_, a, x.qkv.get(), far ? x.qkvf.get() : nullptr,
                                                 forget ? x.fcum.get() : nullptr, fire_tab, B, Tn, C, NH);
      be_.zero(a.dqkv2.get(), NC * 6);
      if (far) be_.zero(a.dqkvf2.get(), NC * 6);
      Acc* dfcum2 = nullptr;
      if (forget) {
        dfcum2 = a.dfcum2.get();
        be_.zero(dfcum2, static_cast<size_t>(N) * kh.NH);
      }
      Acc* dfire2 = nullptr;
      if (fire) {
        const size_t n = static_cast<size_t>(B) * kh.NH * Tn * Tn;
        if (a.dfire2.size() < n) a.dfire2 = Buffer<Acc>(be_, n);
        dfire2 = a.dfire2.get();
        be_.zero(dfire2, n);
      }
      be_.attention_backward(a.dqkv2.get(), HeadGrads<Acc>(g.attnscale, g.attnsink, g.attnkerple, dfcum2, dfire2),
                             a.datty2.get(), x.atty2.get(), x.att_stats.get(), di.qkv, B, Tn, kh.C, kh.NH, spec,
                             HeadParams<T, Acc>(w.attnscale, w.attnsink, w.attnkerple, di.fcum, di.fire),
                             far ? a.dqkvf2.get() : nullptr, di.qkv_far);
      be_.diff_split_backward(dq_att, a.dqkv2.get(), N, C, NH);
      if (far) be_.diff_split_backward(a.dqkvf.get(), a.dqkvf2.get(), N, C, NH);
      if (forget) be_.head_reduce(a.dfcum.get(), dfcum2, B, NH, Tn, g4);
      if (fire) be_.head_reduce(dfire, dfire2, B, NH, static_cast<size_t>(Tn) * Tn, g4);
    } else {
      be_.attention_backward(dq_att, dhead, a.datty.get(), x.atty.get(), x.att_stats.get(), x.qkv.get(), B, Tn, C,
                             NH, spec, head, far ? a.dqkvf.get() : nullptr, far ? x.qkvf.get() : nullptr);
    }
    if (rope) {
      be_.rope_backward(a.dqkv.get(), a.dqkvr.get(), B, Tn, C, kh.rope_NH, spec.rope, 0);
      if (far) be_.rope_backward(a.dqkv.get(), a.dqkvf.get(), B, Tn, C, kh.rope_NH, far_rope, 0);
    }
    be_.zero(a.dln.get(), NC);
    be_.matmul_backward(a.dln.get(), g.qkvw, g.qkvb, a.dqkv.get(), x.ln1.get(), w.qkvw, N, C, 3 * C);
    if (gate) be_.matmul_backward(a.dln.get(), g.ogatew, g.ogateb, a.dogate.get(), x.ln1.get(), w.ogatew, N, C, C);
    if (fire)  // through FIRE's table to its MLP, c and m
      be_.fire_backward(g.attnfire, dfire, w.attnfire, B, Tn, NH, attn::fire::threshold0(spec.trained_context));
    if (forget) {  // through c's prefix sums and ln σ(g) to the gate's projection and ln1
      be_.zero(a.dfgate.get(), static_cast<size_t>(N) * NH);
      be_.forget_backward(a.dfgate.get(), a.dfcum.get(), x.fgate.get(), B, Tn, NH);
      be_.matmul_backward(a.dln.get(), g.fgatew, g.fgateb, a.dfgate.get(), x.ln1.get(), w.fgatew, N, C, NH);
    }
    be_.layernorm_backward(a.dres.get(), g.ln1w, g.ln1b, a.dln.get(), res_in, w.ln1w, x.ln1_mean.get(),
                           x.ln1_rstd.get(), N, C);
    if (grads_ready) grads_ready(l);
  }
  be_.encoder_backward(g_.wte, g_.wpe, a.dres.get(), a.tokens.get(), B, Tn, C);
  if (grads_ready) grads_ready(-1);
}

template <typename T>
void GPT<T>::forward_losses(const int32_t* tokens, const int32_t* targets, int B, int Tn,
                            std::vector<Acc>& losses) {
  losses_pass(tokens, targets, B, Tn, false, losses);
}

template <typename T>
void GPT<T>::forward_argmax(const int32_t* tokens, int B, int Tn, std::vector<int32_t>& argmax) {
  const size_t N = static_cast<size_t>(B) * Tn;
  check_tokens(tokens, N, "input token");
  Activations<T>& a = activations(B, Tn, false);
  be_.upload_tokens(a.tokens.get(), tokens, N);
  forward_trunk(a);
  const size_t Vp = cfg_.padded_vocab();
  // Rows come down in chunks so host memory stays small at large vocabularies.
  constexpr size_t kChunk = 256;
  std::vector<Acc> logits(std::min(N, kChunk) * Vp);
  argmax.resize(N);
  for (size_t n0 = 0; n0 < N; n0 += kChunk) {
    const size_t rows = std::min(kChunk, N - n0);
    download_as_acc(logits.data(), a.logits.get() + n0 * Vp, rows * Vp);
    for (size_t n = 0; n < rows; ++n) {
      const Acc* row = logits.data() + n * Vp;
      argmax[n0 + n] = static_cast<int32_t>(std::max_element(row, row + cfg_.vocab_size) - row);
    }
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
