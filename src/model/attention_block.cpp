#include "model/attention_block.h"

#include <vector>

namespace gpt {
namespace {

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

// The stage-2 bias table the kernels read: FIRE's (NH, T, T), or under
// position ids the distance biases of ALiBi, KERPLE or FIRE per sequence
// (B, NH, T, T; attn::position_table).
template <typename A>
struct BiasTable {
  const A* table = nullptr;
  bool per_sequence = false;
};

// The learned per-head inputs of the attention op, from the layer's block
// (w: parameters, or g: their gradients) and the per-call tensors.
template <typename T>
HeadParams<T, accum_t<T>> head_params(const LayerViews<T>& w, const int32_t* doc, const accum_t<T>* fcum,
                                      const BiasTable<accum_t<T>>& bias) {
  HeadParams<T, accum_t<T>> hp(w.attnscale, w.attnsink, w.attnkerple, fcum, bias.table);
  hp.fire_per_sequence = bias.per_sequence;
  hp.doc = doc;  // the pass's document mask (Activations::doc), null for none
  return hp;
}
template <typename A>
HeadGrads<A> head_grads(const LayerViews<A>& g, A* dfcum, A* dfire) {
  return HeadGrads<A>(g.attnscale, g.attnsink, g.attnkerple, dfcum, dfire);
}

// The learned values a position table reads (attn::position_table::param_count).
template <typename V>
V* position_table_params(const LayerViews<V>& w, const AttentionSpec& spec) {
  return spec.kerple() ? w.attnkerple : spec.fire() ? w.attnfire : nullptr;
}

// A buffer of at least n values, grown on first use.
template <typename V, typename T>
V* grown(Buffer<V>& buf, Backend<T>& be, size_t n) {
  if (buf.size() < n) buf = Buffer<V>(be, n);
  return buf.get();
}

// The layer's bias table in a's shared buffer (none where the kernels
// compute the bias themselves), and the spec the kernels run with it.
template <typename T>
BiasTable<accum_t<T>> make_bias_table(Backend<T>& be, Activations<T>& a, const LayerViews<T>& w,
                                      const AttentionSpec& spec, int NH, AttentionSpec* kernel_spec) {
  const int B = a.B, Tn = a.Tn;
  const size_t TT = static_cast<size_t>(Tn) * Tn;
  BiasTable<accum_t<T>> bt;
  *kernel_spec = spec;
  if (a.pos && attn::position_table::applies(spec)) {
    accum_t<T>* table = grown(a.fire_table, be, static_cast<size_t>(B) * NH * TT);
    be.position_table_forward(table, position_table_params(w, spec), a.pos, B, Tn, NH, spec);
    bt.table = table;
    bt.per_sequence = true;
    *kernel_spec = attn::position_table::kernel_spec(spec);
  } else if (spec.fire()) {
    accum_t<T>* table = grown(a.fire_table, be, NH * TT);
    be.fire_forward(table, w.attnfire, Tn, NH, attn::fire::threshold0(spec.trained_context));
    bt.table = table;
  }
  return bt;
}

// Differential attention's kernel inputs (attn::diff): qkv (and the far copy
// of a distance remapping) split into the kernel heads, and the forget
// gate's c and FIRE's table repeated over each head's kernel heads.
template <typename T>
struct DiffInputs {
  const T* qkv = nullptr;
  const T* qkv_far = nullptr;
  const accum_t<T>* fcum = nullptr;
  BiasTable<accum_t<T>> bias;
};
template <typename T>
DiffInputs<T> split_for_kernels(Backend<T>& be, Activations<T>& a, const T* qkv, const T* qkv_far,
                                const accum_t<T>* fcum, const BiasTable<accum_t<T>>& bias, int B, int Tn, int C,
                                int NH) {
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
  if (bias.table) {
    const size_t TT = static_cast<size_t>(Tn) * Tn, tables = bias.per_sequence ? B : 1;
    accum_t<T>* rep = grown(a.fire_table2, be, tables * TT * NH * g);
    be.head_repeat(rep, bias.table, tables, NH, TT, g);
    d.bias = {rep, bias.per_sequence};
  }
  return d;
}

// The attention op on qkv (N,3C) -> x.atty (N,C); differential attention
// runs its two maps as kernel heads and combines them into x.atty; PoPE
// (attn::pope) runs heads of 2D channels in polar coordinates (a.qkv2 ->
// x.atty2) and keeps the first D output channels of each.
template <typename T>
void attention_op_forward(Backend<T>& be, Activations<T>& a, LayerActs<T>& x, const LayerViews<T>& w,
                          const AttentionSpec& spec, bool pope, int layer, int C, int NH, const T* qkv,
                          const T* qkv_far, const accum_t<T>* fcum, const BiasTable<accum_t<T>>& bias,
                          double* diag) {
  using Acc = accum_t<T>;
  const int B = a.B, Tn = a.Tn;
  Acc* stats = a.training ? x.att_stats.get() : nullptr;
  if (pope) {  // heads of 2D channels in polar coordinates; the output's first D of each head
    be.pope_forward(a.qkv2.get(), qkv, w.attnpope, B, Tn, C, NH, spec.rope.theta, a.pos);
    be.attention_forward(x.atty2.get(), stats, a.qkv2.get(), B, Tn, 2 * C, NH, spec, head_params(w, a.doc, fcum, bias),
                         diag, nullptr);
    be.pope_output_forward(x.atty.get(), x.atty2.get(), B * Tn, C, NH);
    return;
  }
  if (!spec.differential) {
    be.attention_forward(x.atty.get(), stats, qkv, B, Tn, C, NH, spec, head_params(w, a.doc, fcum, bias), diag,
                         qkv_far);
    return;
  }
  const KernelHeads kh = kernel_heads(spec, C, NH);
  const DiffInputs<T> di = split_for_kernels(be, a, qkv, qkv_far, fcum, bias, B, Tn, C, NH);
  std::vector<double> kdiag(diag ? static_cast<size_t>(kh.NH) * kAttentionDiagStats : 0, 0.0);
  be.attention_forward(x.atty2.get(), stats, di.qkv, B, Tn, kh.C, kh.NH, spec, head_params(w, a.doc, di.fcum, di.bias),
                       diag ? kdiag.data() : nullptr, di.qkv_far);
  // A head's diagnostics: the sums over its kernel heads, i.e. the mean of its two maps per row (the
  // largest score of either).
  for (int k = 0; k < (diag ? kh.NH : 0); ++k)
    add_attention_diag(diag + k / attn::diff::kHeads * kAttentionDiagStats, kdiag.data() + k * kAttentionDiagStats);
  be.diff_combine_forward(x.atty.get(), x.diff_rstd.get(), x.atty2.get(), w.attnlambda, w.attnsubln, B * Tn, C, NH,
                          attn::diff::lambda_init(layer));
}

// The attention op's backward: dL/d x.atty in a.datty -> dq_att (dL/d the qkv
// attention read), dqkv_far (the far copy's), dfcum and dfire (dL/d the
// bias table, per sequence; both zeroed by the caller), and the learned
// per-head parameters' gradients in g.
template <typename T>
void attention_op_backward(Backend<T>& be, Activations<T>& a, LayerActs<T>& x, const LayerViews<T>& w,
                           const LayerViews<accum_t<T>>& g, const AttentionSpec& spec, bool pope, int layer, int C,
                           int NH, T* dq_att, T* dqkv_far, const accum_t<T>* fcum, accum_t<T>* dfcum,
                           const BiasTable<accum_t<T>>& bias, accum_t<T>* dfire) {
  using Acc = accum_t<T>;
  const int B = a.B, Tn = a.Tn, N = B * Tn;
  const size_t NC = static_cast<size_t>(N) * C;
  const T* qkv_far = dqkv_far ? x.qkvf.get() : nullptr;
  if (pope) {  // through the output's slice, the attention on the recomputed 2D heads, and the transform
    be.pope_output_backward(a.datty2.get(), a.datty.get(), N, C, NH);
    be.pope_forward(a.qkv2.get(), x.qkv.get(), w.attnpope, B, Tn, C, NH, spec.rope.theta, a.pos);
    be.zero(a.dqkv2.get(), NC * 6);
    be.attention_backward(a.dqkv2.get(), head_grads(g, dfcum, dfire), a.datty2.get(), x.atty2.get(), x.att_stats.get(),
                          a.qkv2.get(), B, Tn, 2 * C, NH, spec, head_params(w, a.doc, fcum, bias), nullptr, nullptr);
    be.pope_backward(dq_att, g.attnpope, a.dqkv2.get(), x.qkv.get(), w.attnpope, B, Tn, C, NH, spec.rope.theta, a.pos);
    return;
  }
  if (!spec.differential) {
    be.attention_backward(dq_att, head_grads(g, dfcum, dfire), a.datty.get(), x.atty.get(), x.att_stats.get(),
                          x.qkv.get(), B, Tn, C, NH, spec, head_params(w, a.doc, fcum, bias), dqkv_far, qkv_far);
    return;
  }
  // Through the combination to the kernel heads, then back through the split.
  const KernelHeads kh = kernel_heads(spec, C, NH);
  const int g4 = attn::diff::kHeads;
  be.diff_combine_backward(a.datty2.get(), g.attnlambda, g.attnsubln, a.datty.get(), x.atty2.get(), x.diff_rstd.get(),
                           w.attnlambda, w.attnsubln, N, C, NH, attn::diff::lambda_init(layer));
  const DiffInputs<T> di = split_for_kernels(be, a, x.qkv.get(), qkv_far, fcum, bias, B, Tn, C, NH);
  be.zero(a.dqkv2.get(), NC * 6);
  if (dqkv_far) be.zero(a.dqkvf2.get(), NC * 6);
  Acc* dfcum2 = nullptr;
  if (dfcum) {
    dfcum2 = a.dfcum2.get();
    be.zero(dfcum2, static_cast<size_t>(N) * kh.NH);
  }
  Acc* dfire2 = nullptr;
  if (dfire) {
    const size_t n = static_cast<size_t>(B) * kh.NH * Tn * Tn;
    dfire2 = grown(a.dfire2, be, n);
    be.zero(dfire2, n);
  }
  be.attention_backward(a.dqkv2.get(), head_grads(g, dfcum2, dfire2), a.datty2.get(), x.atty2.get(), x.att_stats.get(),
                        di.qkv, B, Tn, kh.C, kh.NH, spec, head_params(w, a.doc, di.fcum, di.bias),
                        dqkv_far ? a.dqkvf2.get() : nullptr, di.qkv_far);
  be.diff_split_backward(dq_att, a.dqkv2.get(), N, C, NH);
  if (dqkv_far) be.diff_split_backward(dqkv_far, a.dqkvf2.get(), N, C, NH);
  if (dfcum) be.head_reduce(dfcum, dfcum2, B, NH, Tn, g4);
  if (dfire) be.head_reduce(dfire, dfire2, B, NH, static_cast<size_t>(Tn) * Tn, g4);
}

}  // namespace

template <typename T>
void attention_block_forward(Backend<T>& be, Activations<T>& a, LayerActs<T>& x, const LayerViews<T>& w,
                             const LayerAttention& la, int layer, const ModelConfig& m, double* diag) {
  // C: the residual width, the projections' input; A = NH·D: the attention's width (C unless model.head_dim).
  const int B = a.B, Tn = a.Tn, N = B * Tn, C = m.n_embd, NH = m.n_head, NKV = m.kv_heads();
  const int A = m.attn_width(), D = m.head_size();
  const AttentionSpec spec = for_length(la.spec, Tn);  // YaRN's attention factor depends on the length
  const KernelHeads kh = kernel_heads(spec, A, NH);
  // qkv = ln1·qkvwᵀ + qkvb; with rope positions into the shared scratch, and
  // RoPE writes the layer's qkv (and the far copy of a distance remapping).
  // Grouped-query attention projects NKV key/value heads and repeats each
  // over its group of query heads; QK-norm then normalises each head's q and
  // k (the projection before it kept for the backward).
  T* const proj = la.rope ? a.qkv_pre.get() : x.qkv.get();
  const bool qk_norm = m.qk_norm != "none";
  T* const raw = qk_norm ? x.qkv_raw.get() : proj;
  if (NKV < NH) {
    be.matmul_forward(a.qkv_grouped.get(), x.ln1.get(), w.qkvw, w.qkvb, N, C, m.qkv_width());
    be.gqa_expand(raw, a.qkv_grouped.get(), N, NH, NKV, D);
  } else {
    be.matmul_forward(raw, x.ln1.get(), w.qkvw, w.qkvb, N, C, 3 * A);
  }
  if (qk_norm)
    be.qknorm_forward(proj, x.qk_rstd.get(), raw, w.qnormw, w.knormw, w.qkscale, N, m.qk_norm_heads(),
                      A / m.qk_norm_heads(), m.norm_eps);
  if (la.rope) be.rope_forward(x.qkv.get(), proj, B, Tn, A, kh.rope_NH, spec.rope, 0, a.pos);
  if (spec.forget()) {  // the forget gate: g = ln1·fgatewᵀ + fgateb, c = prefix sums of ln σ(g)
    be.matmul_forward(x.fgate.get(), x.ln1.get(), w.fgatew, w.fgateb, N, C, NH);
    be.forget_forward(x.fcum.get(), x.fgate.get(), B, Tn, NH);
  }
  AttentionSpec kspec;  // the spec the attention kernels run (with a table: its bias read from it)
  const BiasTable<accum_t<T>> bias = make_bias_table(be, a, w, spec, NH, &kspec);
  const T* qkv_far = nullptr;
  if (remap::on(spec.rope)) {
    RopeSpec far_rope = spec.rope;
    far_rope.far_positions = true;
    be.rope_forward(x.qkvf.get(), proj, B, Tn, A, kh.rope_NH, far_rope, 0);
    qkv_far = x.qkvf.get();
  }
  attention_op_forward(be, a, x, w, kspec, la.pope, layer, A, NH, x.qkv.get(), qkv_far,
                       spec.forget() ? x.fcum.get() : nullptr, bias, diag);
  const T* att_out = x.atty.get();
  if (spec.output_gate) {  // gated attention: atty ⊙ σ(ln1·W_gᵀ + b_g)
    be.matmul_forward(x.ogate.get(), x.ln1.get(), w.ogatew, w.ogateb, N, C, A);
    be.sigmoid_gate_forward(x.attg.get(), x.atty.get(), x.ogate.get(), static_cast<size_t>(N) * A);
    att_out = x.attg.get();
  }
  be.matmul_forward(a.attproj.get(), att_out, w.attprojw, w.attprojb, N, A, C);
}

template <typename T>
void attention_block_backward(Backend<T>& be, Activations<T>& a, LayerActs<T>& x, const LayerViews<T>& w,
                              const LayerViews<accum_t<T>>& g, const LayerAttention& la, int layer,
                              const ModelConfig& m) {
  using Acc = accum_t<T>;
  const int B = a.B, Tn = a.Tn, N = B * Tn, C = m.n_embd, NH = m.n_head, NKV = m.kv_heads();
  const int A = m.attn_width(), D = m.head_size();
  const size_t NC = static_cast<size_t>(N) * C, NA = static_cast<size_t>(N) * A;
  const AttentionSpec spec = for_length(la.spec, Tn);
  const KernelHeads kh = kernel_heads(spec, A, NH);
  const bool far = remap::on(spec.rope), gate = spec.output_gate, forget = spec.forget();
  // Through the output projection (and the output gate) to dL/d atty.
  be.zero(a.datty.get(), NA);
  if (gate) {
    be.zero(a.dattg.get(), NA);
    be.matmul_backward(a.dattg.get(), g.attprojw, g.attprojb, a.dres.get(), x.attg.get(), w.attprojw, N, A, C);
    be.zero(a.dogate.get(), NA);
    be.sigmoid_gate_backward(a.datty.get(), a.dogate.get(), a.dattg.get(), x.atty.get(), x.ogate.get(), NA);
  } else {
    be.matmul_backward(a.datty.get(), g.attprojw, g.attprojb, a.dres.get(), x.atty.get(), w.attprojw, N, A, C);
  }
  // Through the attention op to dL/d(qkv as attention read it): rotated
  // (rope) or as projected; the far copy's separately.
  be.zero(a.dqkv.get(), NA * 3);
  if (forget) be.zero(a.dfcum.get(), static_cast<size_t>(N) * NH);
  AttentionSpec kspec;
  const BiasTable<Acc> bias = make_bias_table(be, a, w, spec, NH, &kspec);
  Acc* dfire = nullptr;
  if (bias.table) {
    const size_t n = static_cast<size_t>(B) * NH * Tn * Tn;
    dfire = grown(a.dfire, be, n);
    be.zero(dfire, n);
  }
  T* const dq_att = la.rope ? a.dqkvr.get() : a.dqkv.get();
  if (la.rope) be.zero(a.dqkvr.get(), NA * 3);
  if (far) be.zero(a.dqkvf.get(), NA * 3);
  attention_op_backward(be, a, x, w, g, kspec, la.pope, layer, A, NH, dq_att, far ? a.dqkvf.get() : nullptr,
                        forget ? x.fcum.get() : nullptr, forget ? a.dfcum.get() : nullptr, bias, dfire);
  if (la.rope) {
    be.rope_backward(a.dqkv.get(), a.dqkvr.get(), B, Tn, A, kh.rope_NH, spec.rope, 0, a.pos);
    if (far) {
      RopeSpec far_rope = spec.rope;
      far_rope.far_positions = true;
      be.rope_backward(a.dqkv.get(), a.dqkvf.get(), B, Tn, A, kh.rope_NH, far_rope, 0);
    }
  }
  // Through the projections that read ln1: qkv, the output gate, the forget gate.
  be.zero(a.dln.get(), NC);
  const T* dproj = a.dqkv.get();  // dL/d(the projection, key/value heads repeated)
  if (m.qk_norm != "none") {      // through QK-norm
    be.zero(a.dqkv_raw.get(), NA * 3);
    be.qknorm_backward(a.dqkv_raw.get(), g.qnormw, g.knormw, g.qkscale, a.dqkv.get(), x.qkv_raw.get(), w.qnormw,
                       w.knormw, w.qkscale, x.qk_rstd.get(), N, m.qk_norm_heads(), A / m.qk_norm_heads());
    dproj = a.dqkv_raw.get();
  }
  if (NKV < NH) {  // the repeated key/value heads' gradients summed over each group
    be.zero(a.dqkv_grouped.get(), static_cast<size_t>(N) * m.qkv_width());
    be.gqa_reduce(a.dqkv_grouped.get(), dproj, N, NH, NKV, D);
    be.matmul_backward(a.dln.get(), g.qkvw, g.qkvb, a.dqkv_grouped.get(), x.ln1.get(), w.qkvw, N, C, m.qkv_width());
  } else {
    be.matmul_backward(a.dln.get(), g.qkvw, g.qkvb, dproj, x.ln1.get(), w.qkvw, N, C, 3 * A);
  }
  if (gate) be.matmul_backward(a.dln.get(), g.ogatew, g.ogateb, a.dogate.get(), x.ln1.get(), w.ogatew, N, C, A);
  if (bias.per_sequence)  // through the table of the position ids to KERPLE's r or FIRE's MLP, c and m
    be.position_table_backward(position_table_params(g, spec), dfire, position_table_params(w, spec), a.pos, B, Tn,
                               NH, spec);
  else if (bias.table)  // through FIRE's table to its MLP, c and m
    be.fire_backward(g.attnfire, dfire, w.attnfire, B, Tn, NH, attn::fire::threshold0(spec.trained_context));
  if (forget) {  // through c's prefix sums and ln σ(g) to the gate's projection
    be.zero(a.dfgate.get(), static_cast<size_t>(N) * NH);
    be.forget_backward(a.dfgate.get(), a.dfcum.get(), x.fgate.get(), B, Tn, NH);
    be.matmul_backward(a.dln.get(), g.fgatew, g.fgateb, a.dfgate.get(), x.ln1.get(), w.fgatew, N, C, NH);
  }
}

#define GPT_INSTANTIATE(T)                                                                                  \
  template void attention_block_forward(Backend<T>&, Activations<T>&, LayerActs<T>&, const LayerViews<T>&,  \
                                        const LayerAttention&, int, const ModelConfig&, double*);           \
  template void attention_block_backward(Backend<T>&, Activations<T>&, LayerActs<T>&, const LayerViews<T>&, \
                                         const LayerViews<accum_t<T>>&, const LayerAttention&, int,         \
                                         const ModelConfig&);
GPT_INSTANTIATE(float)
GPT_INSTANTIATE(double)
GPT_INSTANTIATE(bf16)
#undef GPT_INSTANTIATE

}  // namespace gpt
