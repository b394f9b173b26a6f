// The bf16-storage adapter (make_bf16_backend, backend/backend.h): every op
// of Backend<bf16> as "convert the bf16 operands to float32 scratch, run the
// float32 op, round the bf16 results", in bounded chunks.
//
// Chunks follow the ops' independent units: rows (LayerNorm, the linear
// layer, cross-entropy), sequences (embedding, RoPE, attention) or elements
// (GELU, residuals). Each chunk's operands are widened into scratch of at
// most chunk_ floats (or one unit when that is larger), the float32 op runs
// on them, and its bf16 results are rounded back in place; the chunks run in
// order. The float32 kernels sum across units (the gradients of LayerNorm's
// and the linear layer's parameters, of the embedding tables, the attention
// diagnostics) in unit order, one after the other, so on the CPU backend
// chunking changes no bit (tests/backend/bf16_backend_test.cpp). Where a
// kernel sums a whole call before adding it (ssmax's dhead_scale, in double,
// over the batch), that op runs whole.
//
// The linear layer and the embedding read their bf16 weights as they are
// where the float32 backend can (matmul_*_bf16, encoder_forward_bf16); only
// a backend without those widens a whole weight (CUDA for shapes its bf16
// GEMMs refuse). LayerNorm, GELU, the residual adds and the classifier go
// whole to the float32 backend's native bf16 form where it has one
// (GPT_BACKEND_NATIVE_BF16_OPS: CUDA), with no widening and no chunks.
#include <algorithm>
#include <array>
#include <utility>

#include "backend/backend.h"
#include "core/check.h"

namespace gpt {
namespace {

class Bf16Backend final : public Backend<bf16> {
 public:
  Bf16Backend(std::unique_ptr<Backend<float>> wide, size_t chunk_floats)
      : wide_(std::move(wide)), chunk_(chunk_floats) {
    GPT_CHECK(wide_, "make_bf16_backend: no float32 backend given");
  }
  std::string name() const override { return wide_->name() + ", bf16 storage"; }
  void synchronize() override { wide_->synchronize(); }

  void* alloc_bytes(size_t bytes) override { return wide_->alloc_bytes(bytes); }
  void release_bytes(void* p) override { wide_->release_bytes(p); }
  void upload_bytes(void* dst, const void* host, size_t bytes) override { wide_->upload_bytes(dst, host, bytes); }
  void download_bytes(void* host, const void* src, size_t bytes) override { wide_->download_bytes(host, src, bytes); }
  void zero_bytes(void* p, size_t bytes) override { wide_->zero_bytes(p, bytes); }
  void convert(float* dst, const bf16* src, size_t n) override { wide_->convert(dst, src, n); }
  void convert(bf16* dst, const float* src, size_t n) override { wide_->convert(dst, src, n); }

  // float32-side tensors: the wide backend's ops as they are.
  double sum_squares(const float* x, size_t n) override { return wide_->sum_squares(x, n); }
  void scale_inplace(float* x, float s, size_t n) override { wide_->scale_inplace(x, s, n); }
  void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, double lr, double beta1,
                    double beta2, double eps, double weight_decay, long t) override {
    wide_->adamw_update(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
  }
  void muon_momentum(float* grad, float* m, size_t n, double beta) override { wide_->muon_momentum(grad, m, n, beta); }
  void newton_schulz(float* x, int rows, int cols, int steps, float* work) override {
    wide_->newton_schulz(x, rows, cols, steps, work);
  }
  void muon_apply(float* param, const float* update, size_t n, double lr, double scale, double weight_decay) override {
    wide_->muon_apply(param, update, n, lr, scale, weight_decay);
  }

  // Sequences (units of Tn·C) in chunks; tables read as bf16, or widened
  // whole once when the wide backend cannot.
  void encoder_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B, int Tn, int C,
                       int V) override {
    const size_t TC = static_cast<size_t>(Tn) * C;
    bool native = true;
    const float *fwte = nullptr, *fwpe = nullptr;
    by_units(B, TC, [&](int b0, int nb) {
      float* o = scratch(0, nb * TC);
      const int32_t* tk = tokens + static_cast<size_t>(b0) * Tn;
      if (native && !wide_->encoder_forward_bf16(o, tk, wte, wpe, nb, Tn, C, V)) {
        native = false;
        // wpe may be absent (no learned positions): widen() keeps null; only its first Tn rows are read.
        fwte = widen(1, wte, static_cast<size_t>(V) * C);
        fwpe = widen(2, wpe, TC);
      }
      if (!native) wide_->encoder_forward(o, tk, fwte, fwpe, nb, Tn, C, V);
      narrow(out + b0 * TC, o, nb * TC);
    });
  }
  void encoder_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B, int Tn,
                        int C) override {
    const size_t TC = static_cast<size_t>(Tn) * C;
    by_units(B, TC, [&](int b0, int nb) {
      wide_->encoder_backward(dwte, dwpe, widen(0, dout + b0 * TC, nb * TC), tokens + static_cast<size_t>(b0) * Tn, nb,
                              Tn, C);
    });
  }
  void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b, int N,
                         int C) override {
    if (wide_->layernorm_forward_bf16(out, mean, rstd, inp, w, b, N, C)) return;
    const float* fw = widen(2, w, C);
    const float* fb = widen(3, b, C);
    by_units(N, C, [&](int r0, int nr) {
      const size_t off = static_cast<size_t>(r0) * C, n = static_cast<size_t>(nr) * C;
      float* o = scratch(0, n);
      wide_->layernorm_forward(o, at(mean, r0), at(rstd, r0), widen(1, inp + off, n), fw, fb, nr, C);
      narrow(out + off, o, n);
    });
  }
  void layernorm_backward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w,
                          const float* mean, const float* rstd, int N, int C) override {
    if (wide_->layernorm_backward_bf16(dinp, dw, db, dout, inp, w, mean, rstd, N, C)) return;
    const float* fw = widen(3, w, C);
    by_units(N, C, [&](int r0, int nr) {
      const size_t off = static_cast<size_t>(r0) * C, n = static_cast<size_t>(nr) * C;
      float* di = widen(0, dinp + off, n);
      wide_->layernorm_backward(di, dw, db, widen(1, dout + off, n), widen(2, inp + off, n), fw, mean + r0, rstd + r0,
                                nr, C);
      narrow(dinp + off, di, n);
    });
  }
  void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* w, int N, int C, double eps) override {
    const float* fw = widen(2, w, C);
    by_units(N, C, [&](int r0, int nr) {
      const size_t off = static_cast<size_t>(r0) * C, n = static_cast<size_t>(nr) * C;
      float* o = scratch(0, n);
      wide_->rmsnorm_forward(o, at(rstd, r0), widen(1, inp + off, n), fw, nr, C, eps);
      narrow(out + off, o, n);
    });
  }
  void rmsnorm_backward(bf16* dinp, float* dw, const bf16* dout, const bf16* inp, const bf16* w, const float* rstd,
                        int N, int C) override {
    const float* fw = widen(3, w, C);
    by_units(N, C, [&](int r0, int nr) {
      const size_t off = static_cast<size_t>(r0) * C, n = static_cast<size_t>(nr) * C;
      float* di = widen(0, dinp + off, n);
      wide_->rmsnorm_backward(di, dw, widen(1, dout + off, n), widen(2, inp + off, n), fw, rstd + r0, nr, C);
      narrow(dinp + off, di, n);
    });
  }
  // Rows of 3C; rstd has 2·NH values a row; the gains are summed in row order.
  void qknorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* wq, const bf16* wk, const bf16* sq, int N,
                      int NH, int D, double eps) override {
    const size_t W3 = 3 * static_cast<size_t>(NH) * D;
    const float *fq = widen(2, wq, D), *fk = widen(3, wk, D), *fs = widen(4, sq, NH);
    by_units(N, W3, [&](int r0, int nr) {
      float* o = scratch(0, nr * W3);
      wide_->qknorm_forward(o, rstd ? rstd + static_cast<size_t>(r0) * 2 * NH : nullptr,
                            widen(1, inp + r0 * W3, nr * W3), fq, fk, fs, nr, NH, D, eps);
      narrow(out + r0 * W3, o, nr * W3);
    });
  }
  void qknorm_backward(bf16* dinp, float* dwq, float* dwk, float* dsq, const bf16* dout, const bf16* inp,
                       const bf16* wq, const bf16* wk, const bf16* sq, const float* rstd, int N, int NH,
                       int D) override {
    const size_t W3 = 3 * static_cast<size_t>(NH) * D;
    const float *fq = widen(3, wq, D), *fk = widen(4, wk, D), *fs = widen(5, sq, NH);
    by_units(N, W3, [&](int r0, int nr) {
      float* di = widen(0, dinp + r0 * W3, nr * W3);
      wide_->qknorm_backward(di, dwq, dwk, dsq, widen(1, dout + r0 * W3, nr * W3), widen(2, inp + r0 * W3, nr * W3), fq,
                             fk, fs, rstd + static_cast<size_t>(r0) * 2 * NH, nr, NH, D);
      narrow(dinp + r0 * W3, di, nr * W3);
    });
  }
  // Rows: C + 2·NKV·D grouped values, 3C expanded.
  void gqa_expand(bf16* qkv, const bf16* grouped, int N, int NH, int NKV, int D) override {
    const size_t W3 = 3 * static_cast<size_t>(NH) * D, WG = (static_cast<size_t>(NH) + 2 * NKV) * D;
    by_units(N, W3, [&](int r0, int nr) {
      float* o = scratch(0, nr * W3);
      wide_->gqa_expand(o, widen(1, grouped + r0 * WG, nr * WG), nr, NH, NKV, D);
      narrow(qkv + r0 * W3, o, nr * W3);
    });
  }
  void gqa_reduce(bf16* dgrouped, const bf16* dqkv, int N, int NH, int NKV, int D) override {
    const size_t W3 = 3 * static_cast<size_t>(NH) * D, WG = (static_cast<size_t>(NH) + 2 * NKV) * D;
    by_units(N, W3, [&](int r0, int nr) {
      float* dg = widen(0, dgrouped + r0 * WG, nr * WG);
      wide_->gqa_reduce(dg, widen(1, dqkv + r0 * W3, nr * W3), nr, NH, NKV, D);
      narrow(dgrouped + r0 * WG, dg, nr * WG);
    });
  }
  // Rows of (2F) inputs and F outputs.
  void swiglu_forward(bf16* out, const bf16* inp, int N, int F) override {
    const size_t F2 = 2 * static_cast<size_t>(F);
    by_units(N, F2, [&](int r0, int nr) {
      float* o = scratch(0, static_cast<size_t>(nr) * F);
      wide_->swiglu_forward(o, widen(1, inp + r0 * F2, nr * F2), nr, F);
      narrow(out + static_cast<size_t>(r0) * F, o, static_cast<size_t>(nr) * F);
    });
  }
  void swiglu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int N, int F) override {
    const size_t F2 = 2 * static_cast<size_t>(F);
    by_units(N, F2, [&](int r0, int nr) {
      float* di = widen(0, dinp + r0 * F2, nr * F2);
      wide_->swiglu_backward(di, widen(1, inp + r0 * F2, nr * F2),
                             widen(2, dout + static_cast<size_t>(r0) * F, static_cast<size_t>(nr) * F), nr, F);
      narrow(dinp + r0 * F2, di, nr * F2);
    });
  }
  void gelu_erf_forward(bf16* out, const bf16* inp, size_t n) override {
    activation_forward(out, inp, n, [&](float* o, const float* x, size_t m) { wide_->gelu_erf_forward(o, x, m); });
  }
  void gelu_erf_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n) override {
    activation_backward(dinp, inp, dout, n, [&](float* di, const float* x, const float* dy, size_t m) {
      wide_->gelu_erf_backward(di, x, dy, m);
    });
  }
  void relu2_forward(bf16* out, const bf16* inp, size_t n) override {
    activation_forward(out, inp, n, [&](float* o, const float* x, size_t m) { wide_->relu2_forward(o, x, m); });
  }
  void relu2_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n) override {
    activation_backward(dinp, inp, dout, n, [&](float* di, const float* x, const float* dy, size_t m) {
      wide_->relu2_backward(di, x, dy, m);
    });
  }
  // Rows in chunks of the output's width (the logits' Vp for the LM head).
  void matmul_forward(bf16* out, const bf16* inp, const bf16* w, const bf16* bias, int N, int C, int OC) override {
    const float* fb = widen(3, bias, OC);
    bool native = true;
    const float* fw = nullptr;
    by_units(N, static_cast<size_t>(std::max(C, OC)), [&](int r0, int nr) {
      float* o = scratch(0, static_cast<size_t>(nr) * OC);
      const bf16* in = inp + static_cast<size_t>(r0) * C;
      if (native && !wide_->matmul_forward_bf16(o, in, w, fb, nr, C, OC)) {
        native = false;
        fw = widen(2, w, static_cast<size_t>(OC) * C);
      }
      if (!native) wide_->matmul_forward(o, widen(1, in, static_cast<size_t>(nr) * C), fw, fb, nr, C, OC);
      narrow(out + static_cast<size_t>(r0) * OC, o, static_cast<size_t>(nr) * OC);
    });
  }
  // dw and dbias in one call over all rows from the bf16 operands (no
  // scratch), then dinp row chunk by row chunk; without bf16 operands, the
  // whole weight widened and every product chunk by chunk.
  void matmul_backward(bf16* dinp, float* dw, float* dbias, const bf16* dout, const bf16* inp, const bf16* w, int N,
                       int C, int OC) override {
    if (wide_->matmul_backward_bf16(nullptr, dw, dbias, dout, inp, w, N, C, OC)) {
      if (!dinp) return;
      by_units(N, C, [&](int r0, int nr) {
        const size_t off = static_cast<size_t>(r0) * C, n = static_cast<size_t>(nr) * C;
        float* di = widen(0, dinp + off, n);
        wide_->matmul_backward_bf16(di, nullptr, nullptr, dout + static_cast<size_t>(r0) * OC, inp + off, w, nr, C, OC);
        narrow(dinp + off, di, n);
      });
      return;
    }
    const float* fw = widen(3, w, static_cast<size_t>(OC) * C);
    by_units(N, static_cast<size_t>(std::max(C, OC)), [&](int r0, int nr) {
      const size_t off = static_cast<size_t>(r0) * C, n = static_cast<size_t>(nr) * C;
      float* di = dinp ? widen(0, dinp + off, n) : nullptr;
      wide_->matmul_backward(di, dw, dbias, widen(1, dout + static_cast<size_t>(r0) * OC, static_cast<size_t>(nr) * OC),
                             widen(2, inp + off, n), fw, nr, C, OC);
      if (dinp) narrow(dinp + off, di, n);
    });
  }
  void gelu_forward(bf16* out, const bf16* inp, size_t n) override {
    if (wide_->gelu_forward_bf16(out, inp, n)) return;
    activation_forward(out, inp, n, [&](float* o, const float* x, size_t m) { wide_->gelu_forward(o, x, m); });
  }
  void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n) override {
    if (wide_->gelu_backward_bf16(dinp, inp, dout, n)) return;
    activation_backward(dinp, inp, dout, n, [&](float* di, const float* x, const float* dy, size_t m) {
      wide_->gelu_backward(di, x, dy, m);
    });
  }
  void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n) override {
    if (wide_->residual_forward_bf16(out, a, b, n)) return;
    by_elements(n, [&](size_t i, size_t m) {
      float* o = scratch(0, m);
      wide_->residual_forward(o, widen(1, a + i, m), widen(2, b + i, m), m);
      narrow(out + i, o, m);
    });
  }
  void add_inplace(bf16* dst, const bf16* src, size_t n) override {
    if (wide_->add_inplace_bf16(dst, src, n)) return;
    by_elements(n, [&](size_t i, size_t m) {
      float* d = widen(0, dst + i, m);
      wide_->add_inplace(d, widen(1, src + i, m), m);
      narrow(dst + i, d, m);
    });
  }
  // The position ids of the chunk that starts at sequence b0 (null: none).
  static const int32_t* ids_of(const int32_t* pos, int b0, int Tn) {
    return pos ? pos + static_cast<size_t>(b0) * Tn : nullptr;
  }
  void rope_forward(bf16* out, const bf16* inp, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0,
                    const int32_t* pos = nullptr) override {
    const size_t unit = static_cast<size_t>(Tn) * 3 * C;
    by_units(B, unit, [&](int b0, int nb) {
      const size_t off = b0 * unit, n = nb * unit;
      float* o = scratch(0, n);
      wide_->rope_forward(o, widen(1, inp + off, n), nb, Tn, C, NH, rs, pos0, ids_of(pos, b0, Tn));
      narrow(out + off, o, n);
    });
  }
  void rope_backward(bf16* dinp, const bf16* dout, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0,
                     const int32_t* pos = nullptr) override {
    const size_t unit = static_cast<size_t>(Tn) * 3 * C;
    by_units(B, unit, [&](int b0, int nb) {
      const size_t off = b0 * unit, n = nb * unit;
      float* di = widen(0, dinp + off, n);
      wide_->rope_backward(di, widen(1, dout + off, n), nb, Tn, C, NH, rs, pos0, ids_of(pos, b0, Tn));
      narrow(dinp + off, di, n);
    });
  }
  // PoPE: whole sequences in chunks (positions restart per sequence), the
  // phase biases widened whole; their gradient float32, added per chunk in order.
  void pope_forward(bf16* qkv2, const bf16* qkv, const bf16* delta, int B, int Tn, int C, int NH, double theta,
                    const int32_t* pos = nullptr) override {
    const size_t unit = static_cast<size_t>(Tn) * 3 * C;
    by_units(B, 2 * unit, [&](int b0, int nb) {
      const size_t off = b0 * unit, n = nb * unit;
      float* o = scratch(0, 2 * n);
      wide_->pope_forward(o, widen(1, qkv + off, n), widen(2, delta, C), nb, Tn, C, NH, theta, ids_of(pos, b0, Tn));
      narrow(qkv2 + 2 * off, o, 2 * n);
    });
  }
  void pope_backward(bf16* dqkv, float* ddelta, const bf16* dqkv2, const bf16* qkv, const bf16* delta, int B, int Tn,
                     int C, int NH, double theta, const int32_t* pos = nullptr) override {
    const size_t unit = static_cast<size_t>(Tn) * 3 * C;
    by_units(B, 2 * unit, [&](int b0, int nb) {
      const size_t off = b0 * unit, n = nb * unit;
      float* d = widen(0, dqkv + off, n);
      wide_->pope_backward(d, ddelta, widen(1, dqkv2 + 2 * off, 2 * n), widen(2, qkv + off, n), widen(3, delta, C), nb,
                           Tn, C, NH, theta, ids_of(pos, b0, Tn));
      narrow(dqkv + off, d, n);
    });
  }
  void pope_output_forward(bf16* y, const bf16* y2, int N, int C, int NH) override {
    by_units(N, 2 * static_cast<size_t>(C), [&](int r0, int nr) {
      const size_t off = static_cast<size_t>(r0) * C, n = static_cast<size_t>(nr) * C;
      float* o = scratch(0, n);
      wide_->pope_output_forward(o, widen(1, y2 + 2 * off, 2 * n), nr, C, NH);
      narrow(y + off, o, n);
    });
  }
  void pope_output_backward(bf16* dy2, const bf16* dy, int N, int C, int NH) override {
    by_units(N, 2 * static_cast<size_t>(C), [&](int r0, int nr) {
      const size_t off = static_cast<size_t>(r0) * C, n = static_cast<size_t>(nr) * C;
      float* o = scratch(0, 2 * n);
      wide_->pope_output_backward(o, widen(1, dy + off, n), nr, C, NH);
      narrow(dy2 + 2 * off, o, 2 * n);
    });
  }
  // Sequences in chunks of their qkv (Tn·3C); stats (B,NH,T,kStatsPerRow)
  // and the diagnostics (added to by every call) follow.
  void attention_forward(bf16* out, float* stats, const bf16* qkv, int B, int Tn, int C, int NH,
                         const AttentionSpec& spec, const HeadParams<bf16, float>& head, double* diag,
                         const bf16* qkv_far) override {
    const size_t TC = static_cast<size_t>(Tn) * C;
    const size_t stats_unit = static_cast<size_t>(NH) * Tn * AttentionSpec::kStatsPerRow;
    const size_t fc_unit = static_cast<size_t>(NH) * Tn;  // the forget gate's c (float32 already)
    const size_t fire_unit = static_cast<size_t>(NH) * Tn * Tn;  // a per-sequence bias table's
    HeadParams<float> hs(widen(2, head.scale, NH), widen(4, head.sink, NH), widen(5, head.kerple, 2 * NH));
    hs.fire_per_sequence = head.fire_per_sequence;
    by_units(B, 3 * TC, [&](int b0, int nb) {
      float* o = scratch(0, nb * TC);
      hs.fcum = at(head.fcum, b0 * fc_unit);
      hs.fire = head.fire_per_sequence ? at(head.fire, b0 * fire_unit) : head.fire;
      hs.doc = at(head.doc, static_cast<size_t>(b0) * Tn);
      wide_->attention_forward(o, at(stats, b0 * stats_unit), widen(1, qkv + 3 * b0 * TC, 3 * nb * TC), nb, Tn, C, NH,
                               spec, hs, diag, widen(3, at(qkv_far, 3 * b0 * TC), 3 * nb * TC));
      narrow(out + b0 * TC, o, nb * TC);
    });
  }
  void attention_backward(bf16* dqkv, const HeadGrads<float>& dhead_scale, const bf16* dout, const bf16* out,
                          const float* stats, const bf16* qkv, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                          const HeadParams<bf16, float>& head, bf16* dqkv_far, const bf16* qkv_far) override {
    const size_t TC = static_cast<size_t>(Tn) * C;
    const size_t stats_unit = static_cast<size_t>(NH) * Tn * AttentionSpec::kStatsPerRow;
    const size_t fc_unit = static_cast<size_t>(NH) * Tn;
    const size_t fire_unit = static_cast<size_t>(NH) * Tn * Tn;  // FIRE's dL/db per sequence
    HeadParams<float> hs(widen(4, head.scale, NH), widen(7, head.sink, NH), widen(8, head.kerple, 2 * NH));
    hs.fire_per_sequence = head.fire_per_sequence;
    // The learned head parameters' gradients (ssmax, sink, KERPLE) are summed over the whole batch before they
    // are added: one call.
    const size_t unit = spec.learned_scale() || spec.learned_sink() || spec.kerple() ? static_cast<size_t>(-1) : 3 * TC;
    by_units(B, unit, [&](int b0, int nb) {
      const size_t q0 = 3 * b0 * TC, qn = 3 * nb * TC, o0 = b0 * TC, on = nb * TC;
      float* dq = widen(0, dqkv + q0, qn);
      float* dqf = widen(5, at(dqkv_far, q0), qn);
      hs.fcum = at(head.fcum, b0 * fc_unit);
      HeadGrads<float> dh = dhead_scale;
      dh.fcum = at(dhead_scale.fcum, b0 * fc_unit);
      hs.fire = head.fire_per_sequence ? at(head.fire, b0 * fire_unit) : head.fire;
      hs.doc = at(head.doc, static_cast<size_t>(b0) * Tn);
      dh.fire = at(dhead_scale.fire, b0 * fire_unit);
      wide_->attention_backward(dq, dh, widen(1, dout + o0, on), widen(2, out + o0, on), at(stats, b0 * stats_unit),
                                widen(3, qkv + q0, qn), nb, Tn, C, NH, spec, hs, dqf, widen(6, at(qkv_far, q0), qn));
      narrow(dqkv + q0, dq, qn);
      if (dqkv_far) narrow(dqkv_far + q0, dqf, qn);
    });
  }
  void sigmoid_gate_forward(bf16* out, const bf16* y, const bf16* g, size_t n) override {
    by_elements(n, [&](size_t i, size_t m) {
      float* o = scratch(0, m);
      wide_->sigmoid_gate_forward(o, widen(1, y + i, m), widen(2, g + i, m), m);
      narrow(out + i, o, m);
    });
  }
  void sigmoid_gate_backward(bf16* dy, bf16* dg, const bf16* dout, const bf16* y, const bf16* g, size_t n) override {
    by_elements(n, [&](size_t i, size_t m) {
      float* a = widen(0, dy + i, m);
      float* b = widen(1, dg + i, m);
      wide_->sigmoid_gate_backward(a, b, widen(2, dout + i, m), widen(3, y + i, m), widen(4, g + i, m), m);
      narrow(dy + i, a, m);
      narrow(dg + i, b, m);
    });
  }
  // Differential attention: rows in chunks (the split's rows are 3C and 6C
  // wide, the combination's 2C and C), but the combination's backward whole;
  // λ's block and the gain are small (widened whole); rstd and the parameter
  // gradients are float32.
  void diff_split_forward(bf16* qkv2, const bf16* qkv, int N, int C, int NH) override {
    const size_t unit = 3 * static_cast<size_t>(C);
    by_units(N, 2 * unit, [&](int r0, int nr) {
      float* o = scratch(0, nr * 2 * unit);
      wide_->diff_split_forward(o, widen(1, qkv + r0 * unit, nr * unit), nr, C, NH);
      narrow(qkv2 + r0 * 2 * unit, o, nr * 2 * unit);
    });
  }
  void diff_split_backward(bf16* dqkv, const bf16* dqkv2, int N, int C, int NH) override {
    const size_t unit = 3 * static_cast<size_t>(C);
    by_units(N, 2 * unit, [&](int r0, int nr) {
      float* d = widen(0, dqkv + r0 * unit, nr * unit);
      wide_->diff_split_backward(d, widen(1, dqkv2 + r0 * 2 * unit, nr * 2 * unit), nr, C, NH);
      narrow(dqkv + r0 * unit, d, nr * unit);
    });
  }
  void diff_combine_forward(bf16* out, float* rstd, const bf16* y2, const bf16* lam, const bf16* gain, int N, int C,
                            int NH, double lambda_init) override {
    const int D = C / NH;
    const float* fl = widen(2, lam, 2 * static_cast<size_t>(D));
    const float* fg = widen(3, gain, D);
    const size_t unit = static_cast<size_t>(C);
    by_units(N, 2 * unit, [&](int r0, int nr) {
      float* o = scratch(0, nr * unit);
      wide_->diff_combine_forward(o, rstd + static_cast<size_t>(r0) * NH, widen(1, y2 + r0 * 2 * unit, nr * 2 * unit),
                                  fl, fg, nr, C, NH, lambda_init);
      narrow(out + r0 * unit, o, nr * unit);
    });
  }
  void diff_combine_backward(bf16* dy2, float* dlam, float* dgain, const bf16* dout, const bf16* y2, const float* rstd,
                             const bf16* lam, const bf16* gain, int N, int C, int NH, double lambda_init) override {
    const int D = C / NH;
    const float* fl = widen(3, lam, 2 * static_cast<size_t>(D));
    const float* fg = widen(4, gain, D);
    const size_t unit = static_cast<size_t>(C);
    // Whole: the float32 kernel sums dλ over the call (and the gain's
    // gradient per block of rows) before adding them.
    by_units(N, static_cast<size_t>(-1), [&](int r0, int nr) {
      float* d = scratch(0, nr * 2 * unit);
      wide_->diff_combine_backward(d, dlam, dgain, widen(1, dout + r0 * unit, nr * unit),
                                   widen(2, y2 + r0 * 2 * unit, nr * 2 * unit), rstd + static_cast<size_t>(r0) * NH, fl,
                                   fg, nr, C, NH, lambda_init);
      narrow(dy2 + r0 * 2 * unit, d, nr * 2 * unit);
    });
  }
  void head_repeat(float* dst, const float* src, size_t outer, int NH, size_t inner, int group) override {
    wide_->head_repeat(dst, src, outer, NH, inner, group);
  }
  void head_reduce(float* dst, const float* src, size_t outer, int NH, size_t inner, int group) override {
    wide_->head_reduce(dst, src, outer, NH, inner, group);
  }
  // FIRE: the parameter block is small (widened whole); tables are float32.
  void fire_forward(float* table, const bf16* p, int Tn, int NH, double L0) override {
    wide_->fire_forward(table, widen(0, p, attn::fire::count(NH)), Tn, NH, L0);
  }
  void fire_backward(float* dp, const float* dtable, const bf16* p, int B, int Tn, int NH, double L0) override {
    wide_->fire_backward(dp, dtable, widen(0, p, attn::fire::count(NH)), B, Tn, NH, L0);
  }
  void position_table_forward(float* table, const bf16* p, const int32_t* pos, int B, int Tn, int NH,
                              const AttentionSpec& s) override {
    wide_->position_table_forward(table, widen(0, p, attn::position_table::param_count(s, NH)), pos, B, Tn, NH, s);
  }
  void position_table_backward(float* dp, const float* dtable, const bf16* p, const int32_t* pos, int B, int Tn,
                               int NH, const AttentionSpec& s) override {
    wide_->position_table_backward(dp, dtable, widen(0, p, attn::position_table::param_count(s, NH)), pos, B, Tn, NH,
                                   s);
  }
  // Gate logits (B,T,NH) in chunks of sequences; c and dc are float32.
  void forget_forward(float* c, const bf16* g, int B, int Tn, int NH) override {
    const size_t unit = static_cast<size_t>(Tn) * NH;
    by_units(B, unit, [&](int b0, int nb) {
      wide_->forget_forward(c + b0 * unit, widen(0, g + b0 * unit, nb * unit), nb, Tn, NH);
    });
  }
  void forget_backward(bf16* dg, const float* dc, const bf16* g, int B, int Tn, int NH) override {
    const size_t unit = static_cast<size_t>(Tn) * NH;
    by_units(B, unit, [&](int b0, int nb) {
      float* d = widen(0, dg + b0 * unit, nb * unit);
      wide_->forget_backward(d, dc + b0 * unit, widen(1, g + b0 * unit, nb * unit), nb, Tn, NH);
      narrow(dg + b0 * unit, d, nb * unit);
    });
  }
  void crossentropy_forward(float* losses, const bf16* logits, const int32_t* targets, int N, int V, int Vp) override {
    if (wide_->crossentropy_forward_bf16(losses, logits, targets, N, V, Vp)) return;
    by_units(N, Vp, [&](int r0, int nr) {
      wide_->crossentropy_forward(losses + r0,
                                  widen(0, logits + static_cast<size_t>(r0) * Vp, static_cast<size_t>(nr) * Vp),
                                  targets + r0, nr, V, Vp);
    });
  }
  // The float op overwrites its input in place (it may alias), then one rounding.
  void crossentropy_backward(bf16* dlogits, const bf16* logits, const int32_t* targets, const float* dloss, int N,
                             int V, int Vp) override {
    if (wide_->crossentropy_backward_bf16(dlogits, logits, targets, dloss, N, V, Vp)) return;
    by_units(N, Vp, [&](int r0, int nr) {
      const size_t off = static_cast<size_t>(r0) * Vp, n = static_cast<size_t>(nr) * Vp;
      float* l = widen(0, logits + off, n);
      wide_->crossentropy_backward(l, l, targets + r0, dloss + r0, nr, V, Vp);
      narrow(dlogits + off, l, n);
    });
  }

 private:
  static constexpr int kSlots = 9;

  // p + offset, or null for an absent tensor.
  template <typename P>
  static P* at(P* p, size_t offset) {
    return p ? p + offset : nullptr;
  }

  // f(first, count) over `units` units of `width` floats each, in order, as
  // many per call as fit the chunk (at least one); all at once when
  // chunk_ is 0 (or width is size_t(-1)).
  template <class F>
  void by_units(int units, size_t width, F&& f) {
    if (units <= 0) return;
    int step = units;
    if (chunk_ != 0 && width != static_cast<size_t>(-1))
      step = static_cast<int>(std::clamp<size_t>(chunk_ / std::max<size_t>(width, 1), 1, units));
    for (int u0 = 0; u0 < units; u0 += step) f(u0, std::min(step, units - u0));
  }
  // f(first, count) over n elements in chunks.
  template <class F>
  void by_elements(size_t n, F&& f) {
    const size_t step = chunk_ == 0 ? n : chunk_;
    for (size_t i = 0; i < n; i += step) f(i, std::min(step, n - i));
  }

  // An element-wise activation, out = f(inp), and its backward, dinp +=
  // f'(inp)·dout, in element chunks: op(out, inp, m) and op(dinp, inp, dout, m)
  // run the wide backend's float32 op on one chunk.
  template <typename Op>
  void activation_forward(bf16* out, const bf16* inp, size_t n, Op&& op) {
    by_elements(n, [&](size_t i, size_t m) {
      float* o = scratch(0, m);
      op(o, widen(1, inp + i, m), m);
      narrow(out + i, o, m);
    });
  }
  template <typename Op>
  void activation_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n, Op&& op) {
    by_elements(n, [&](size_t i, size_t m) {
      float* di = widen(0, dinp + i, m);
      op(di, widen(1, inp + i, m), widen(2, dout + i, m), m);
      narrow(dinp + i, di, m);
    });
  }

  // Scratch slot `slot` with room for n floats (grown on demand). Ops run in
  // order on the wide backend, so each op may reuse every slot.
  float* scratch(int slot, size_t n) {
    Buffer<float>& b = slots_[slot];
    if (b.size() < n) {
      b.reset();  // free the old one first
      b = Buffer<float>(*wide_, n);
    }
    return b.get();
  }
  // src (n bf16 values) as float32 in scratch slot `slot`; null stays null.
  float* widen(int slot, const bf16* src, size_t n) {
    if (!src) return nullptr;
    float* dst = scratch(slot, n);
    wide_->convert(dst, src, n);
    return dst;
  }
  void narrow(bf16* dst, const float* src, size_t n) { wide_->convert(dst, src, n); }

  std::unique_ptr<Backend<float>> wide_;
  size_t chunk_;
  std::array<Buffer<float>, kSlots> slots_;
};

}  // namespace

std::unique_ptr<Backend<bf16>> make_bf16_backend(std::unique_ptr<Backend<float>> wide, size_t chunk_floats) {
  return std::make_unique<Bf16Backend>(std::move(wide), chunk_floats);
}

}  // namespace gpt
