#include "model/block_parts.h"

#include <sstream>

namespace gpt {

nlohmann::json block_to_json(const ModelConfig& m) {
  nlohmann::json j = {{"block", m.block},
                      {"head_dim", m.head_size()},
                      {"n_kv_head", m.kv_heads()},
                      {"norm", m.norm},
                      {"mlp", m.mlp},
                      {"mlp_hidden", m.mlp_width()},
                      {"bias", m.bias},
                      {"head", m.head},
                      {"residual", m.residual},
                      {"qk_norm", m.qk_norm},
                      {"rope_pairing", m.rope_pairing}};
  if (m.norm == "rmsnorm" || m.qk_norm != "none") j["norm_eps"] = m.norm_eps;
  if (m.qk_norm != "none") j["qk_norm_scale"] = m.qk_norm_scale;
  return j;
}

std::string block_summary(const ModelConfig& m) {
  std::string s = m.attn_width() != m.n_embd ? "heads of " + std::to_string(m.head_size()) + " channels, " : "";
  if (m.kv_heads() < m.n_head) s += std::to_string(m.kv_heads()) + " key/value heads (grouped-query), ";
  s += m.norm;
  if (m.norm == "rmsnorm") {
    std::ostringstream eps;
    eps << m.norm_eps;
    s += " (eps " + eps.str() + ")";
  }
  return s + ", " + m.mlp + " MLP of " + std::to_string(m.mlp_width()) + ", biases " + m.bias + ", " + m.head +
          " head, " + m.residual + " residual" + (m.qk_norm == "none" ? "" : ", QK-norm " + m.qk_norm) +
         (m.qk_norm_scale == "learned" ? " with a learned logit scale per head" : "");
}

template <typename T>
void norm_forward(Backend<T>& be, const ModelConfig& m, T* out, accum_t<T>* mean, accum_t<T>* rstd, const T* inp,
                  const T* w, const T* b, int N) {
  if (m.norm == "rmsnorm")
    be.rmsnorm_forward(out, rstd, inp, w, N, m.n_embd, m.norm_eps);
  else
    be.layernorm_forward(out, mean, rstd, inp, w, b, N, m.n_embd);
}

template <typename T>
void norm_backward(Backend<T>& be, const ModelConfig& m, T* dinp, accum_t<T>* dw, accum_t<T>* db, const T* dout,
                   const T* inp, const T* w, const accum_t<T>* mean, const accum_t<T>* rstd, int N) {
  if (m.norm == "rmsnorm")
    be.rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, m.n_embd);
  else
    be.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, m.n_embd);
}

template <typename T>
void mlp_forward(Backend<T>& be, const ModelConfig& m, Activations<T>& a, LayerActs<T>& x, const LayerViews<T>& w,
                 int N) {
  const int C = m.n_embd, F = m.mlp_width(), FI = m.mlp_in_width();
  const size_t NF = static_cast<size_t>(N) * F;
  be.matmul_forward(x.fch.get(), x.ln2.get(), w.fcw, w.fcb, N, C, FI);
  if (m.mlp == "swiglu")
    be.swiglu_forward(x.fch_act.get(), x.fch.get(), N, F);
  else if (m.mlp == "relu2")
    be.relu2_forward(x.fch_act.get(), x.fch.get(), NF);
  else if (m.mlp == "gelu_erf")
    be.gelu_erf_forward(x.fch_act.get(), x.fch.get(), NF);
  else
    be.gelu_forward(x.fch_act.get(), x.fch.get(), NF);
  be.matmul_forward(a.fcproj.get(), x.fch_act.get(), w.fcprojw, w.fcprojb, N, F, C);
}

template <typename T>
void mlp_backward(Backend<T>& be, const ModelConfig& m, Activations<T>& a, LayerActs<T>& x, const LayerViews<T>& w,
                  const LayerViews<accum_t<T>>& g, const T* dout, T* dln, int N) {
  const int C = m.n_embd, F = m.mlp_width(), FI = m.mlp_in_width();
  const size_t NF = static_cast<size_t>(N) * F;
  be.zero(a.dfch_act.get(), NF);
  be.matmul_backward(a.dfch_act.get(), g.fcprojw, g.fcprojb, dout, x.fch_act.get(), w.fcprojw, N, F, C);
  be.zero(a.dfch.get(), static_cast<size_t>(N) * FI);
  if (m.mlp == "swiglu")
    be.swiglu_backward(a.dfch.get(), x.fch.get(), a.dfch_act.get(), N, F);
  else if (m.mlp == "relu2")
    be.relu2_backward(a.dfch.get(), x.fch.get(), a.dfch_act.get(), NF);
  else if (m.mlp == "gelu_erf")
    be.gelu_erf_backward(a.dfch.get(), x.fch.get(), a.dfch_act.get(), NF);
  else
    be.gelu_backward(a.dfch.get(), x.fch.get(), a.dfch_act.get(), NF);
  be.zero(dln, static_cast<size_t>(N) * C);
  be.matmul_backward(dln, g.fcw, g.fcb, a.dfch.get(), x.ln2.get(), w.fcw, N, C, FI);
}

#define GPT_INSTANTIATE(T)                                                                                          \
  template void norm_forward(Backend<T>&, const ModelConfig&, T*, accum_t<T>*, accum_t<T>*, const T*, const T*,     \
                             const T*, int);                                                                        \
  template void norm_backward(Backend<T>&, const ModelConfig&, T*, accum_t<T>*, accum_t<T>*, const T*, const T*,    \
                              const T*, const accum_t<T>*, const accum_t<T>*, int);                                 \
  template void mlp_forward(Backend<T>&, const ModelConfig&, Activations<T>&, LayerActs<T>&, const LayerViews<T>&,  \
                            int);                                                                                   \
  template void mlp_backward(Backend<T>&, const ModelConfig&, Activations<T>&, LayerActs<T>&, const LayerViews<T>&, \
                             const LayerViews<accum_t<T>>&, const T*, T*, int);
GPT_INSTANTIATE(float)
GPT_INSTANTIATE(double)
GPT_INSTANTIATE(bf16)
#undef GPT_INSTANTIATE

}  // namespace gpt
