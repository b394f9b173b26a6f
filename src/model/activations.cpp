#include "model/activations.h"

namespace gpt {

template <typename T>
std::unique_ptr<Activations<T>> allocate_activations(Backend<T>& be, const ModelConfig& cfg,
                                                     const std::vector<LayerAttention>& layers, int B, int Tn,
                                                     bool training) {
  using Acc = accum_t<T>;
  auto a = std::make_unique<Activations<T>>();
  a->alloc_B = B;
  a->alloc_Tn = Tn;
  // C: the residual width; A: the attention's (q, its output), A3 = 3A: qkv with its key/value heads repeated.
  const size_t N = static_cast<size_t>(B) * Tn, C = cfg.n_embd, A = cfg.attn_width(), A3 = 3 * A;
  // PoPE: every layer's attention runs on heads of 2D channels (the shared
  // qkv2 and its gradient) with outputs of 2D (atty2, kept per layer).
  bool pope = false;
  for (const LayerAttention& la : layers) pope |= la.pope;
  const size_t F = cfg.mlp_width(), FI = cfg.mlp_in_width();
  const size_t Vp = cfg.padded_vocab();
  a->layers.resize(training ? cfg.n_layer : 1);
  // What a layer slot needs: its layer's, or any layer's for slot 0, which
  // inference passes share among all layers (also in training buffers:
  // activations()).
  bool any_rope = false, any_far = false, any_forget = false, any_gate = false, any_diff = false;
  bool diff_far = false, diff_forget = false;
  for (const LayerAttention& la : layers) {
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
    const AttentionSpec& ls = layers[i].spec;
    const bool own = training && i > 0;
    const bool far = own ? remap::on(ls.rope) : any_far;
    const bool forget = own ? ls.forget() : any_forget;
    const bool gate = own ? ls.output_gate : any_gate;
    const bool diff = own ? ls.differential : any_diff;
    // The kernel heads' statistics: kHeads per head on differential layers.
    const size_t stat_heads = static_cast<size_t>(cfg.n_head) * (diff ? attn::diff::kHeads : 1);
#define GPT_ALLOC(name, width) l.name = Buffer<T>(be, N * (width));
#define GPT_ALLOC_STAT(name) l.name = Buffer<Acc>(be, N);
    GPT_LAYER_ACTS(GPT_ALLOC)
    GPT_LAYER_STATS(GPT_ALLOC_STAT)
#undef GPT_ALLOC_STAT
    l.qkv = Buffer<T>(be, N * A3);
    if (far) l.qkvf = Buffer<T>(be, N * A3);
    if (training) l.att_stats = Buffer<Acc>(be, N * stat_heads * ls.stats_per_row());
    if (diff || pope) l.atty2 = Buffer<T>(be, N * 2 * A);
    if (diff) l.diff_rstd = Buffer<Acc>(be, N * cfg.n_head);
    if (cfg.qk_norm != "none") {
      l.qkv_raw = Buffer<T>(be, N * A3);
      l.qk_rstd = Buffer<Acc>(be, N * 2 * cfg.n_head);
    }
    if (forget) {
      l.fgate = Buffer<T>(be, N * cfg.n_head);
      l.fcum = Buffer<Acc>(be, N * cfg.n_head);
    }
    if (gate) {
      l.ogate = Buffer<T>(be, N * A);
      l.attg = Buffer<T>(be, N * A);
    }
  }
  a->attproj = Buffer<T>(be, N * C);
  a->fcproj = Buffer<T>(be, N * C);
  if (any_diff || pope) {
    a->qkv2 = Buffer<T>(be, N * 2 * A3);
    if (diff_far) a->qkvf2 = Buffer<T>(be, N * 2 * A3);
    if (diff_forget) a->fcum2 = Buffer<Acc>(be, N * cfg.n_head * attn::diff::kHeads);
    if (training) {
      a->datty2 = Buffer<T>(be, N * 2 * A);
      a->dqkv2 = Buffer<T>(be, N * 2 * A3);
      if (diff_far) a->dqkvf2 = Buffer<T>(be, N * 2 * A3);
      if (diff_forget) a->dfcum2 = Buffer<Acc>(be, N * cfg.n_head * attn::diff::kHeads);
    }
  }
  if (any_rope) a->qkv_pre = Buffer<T>(be, N * A3);
  const bool gqa = cfg.kv_heads() < cfg.n_head;
  if (gqa) a->qkv_grouped = Buffer<T>(be, N * cfg.qkv_width());
  a->encoded = Buffer<T>(be, N * C);
  a->lnf = Buffer<T>(be, N * C);
  a->lnf_mean = Buffer<Acc>(be, N);
  a->lnf_rstd = Buffer<Acc>(be, N);
  a->logits = Buffer<T>(be, N * Vp);
  a->losses = Buffer<Acc>(be, N);
  a->tokens = TokenBuffer(be, N);
  a->targets = TokenBuffer(be, N);
  if (training) {
    a->pos_ids = TokenBuffer(be, N);
    a->doc_ids = TokenBuffer(be, N);
  }
  if (training) {
    a->dlosses = Buffer<Acc>(be, N);
#define GPT_ALLOC_SCRATCH(name, width) a->name = Buffer<T>(be, N * (width));
    GPT_GRAD_SCRATCH(GPT_ALLOC_SCRATCH)
#undef GPT_ALLOC_SCRATCH
    if (any_rope) a->dqkvr = Buffer<T>(be, N * A3);
    if (cfg.residual == "parallel") a->dln2 = Buffer<T>(be, N * C);
    if (gqa) a->dqkv_grouped = Buffer<T>(be, N * cfg.qkv_width());
    if (cfg.qk_norm != "none") a->dqkv_raw = Buffer<T>(be, N * A3);
    if (any_far) a->dqkvf = Buffer<T>(be, N * A3);
    if (any_forget) {
      a->dfgate = Buffer<T>(be, N * cfg.n_head);
      a->dfcum = Buffer<Acc>(be, N * cfg.n_head);
    }
    if (any_gate) {
      a->dattg = Buffer<T>(be, N * A);
      a->dogate = Buffer<T>(be, N * A);
    }
  }
#undef GPT_ALLOC
  return a;
}

#define GPT_INSTANTIATE(T)                                                                       \
  template std::unique_ptr<Activations<T>> allocate_activations(Backend<T>&, const ModelConfig&, \
                                                                const std::vector<LayerAttention>&, int, int, bool);
GPT_INSTANTIATE(float)
GPT_INSTANTIATE(double)
GPT_INSTANTIATE(bf16)
#undef GPT_INSTANTIATE

}  // namespace gpt
