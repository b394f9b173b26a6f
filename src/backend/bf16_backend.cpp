// The bf16-storage adapter (make_bf16_backend, backend/backend.h): every op
// of Backend<bf16> as "convert the bf16 operands to float32 scratch, run the
// float32 op, round the bf16 results".
#include <array>
#include <utility>

#include "backend/backend.h"
#include "core/check.h"

namespace gpt {
namespace {

class Bf16Backend final : public Backend<bf16> {
 public:
  explicit Bf16Backend(std::unique_ptr<Backend<float>> wide) : wide_(std::move(wide)) {
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

  void encoder_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B, int Tn, int C,
                       int V) override {
    const size_t N = static_cast<size_t>(B) * Tn;
    float* o = scratch(0, N * C);
    // wpe may be absent (no learned positions): widen() keeps null; only its first Tn rows are read.
    wide_->encoder_forward(o, tokens, widen(1, wte, static_cast<size_t>(V) * C),
                           widen(2, wpe, static_cast<size_t>(Tn) * C), B, Tn, C, V);
    narrow(out, o, N * C);
  }
  void encoder_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B, int Tn,
                        int C) override {
    wide_->encoder_backward(dwte, dwpe, widen(0, dout, static_cast<size_t>(B) * Tn * C), tokens, B, Tn, C);
  }
  void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b, int N,
                         int C) override {
    const size_t NC = static_cast<size_t>(N) * C;
    float* o = scratch(0, NC);
    wide_->layernorm_forward(o, mean, rstd, widen(1, inp, NC), widen(2, w, C), widen(3, b, C), N, C);
    narrow(out, o, NC);
  }
  void layernorm_backward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w,
                          const float* mean, const float* rstd, int N, int C) override {
    const size_t NC = static_cast<size_t>(N) * C;
    float* di = widen(0, dinp, NC);
    wide_->layernorm_backward(di, dw, db, widen(1, dout, NC), widen(2, inp, NC), widen(3, w, C), mean, rstd, N, C);
    narrow(dinp, di, NC);
  }
  void matmul_forward(bf16* out, const bf16* inp, const bf16* w, const bf16* bias, int N, int C,
                      int OC) override {
    const size_t NOC = static_cast<size_t>(N) * OC;
    float* o = scratch(0, NOC);
    float* b = widen(3, bias, OC);
    if (!wide_->matmul_forward_bf16(o, inp, w, b, N, C, OC))
      wide_->matmul_forward(o, widen(1, inp, static_cast<size_t>(N) * C), widen(2, w, static_cast<size_t>(OC) * C), b,
                            N, C, OC);
    narrow(out, o, NOC);
  }
  void matmul_backward(bf16* dinp, float* dw, float* dbias, const bf16* dout, const bf16* inp, const bf16* w, int N,
                       int C, int OC) override {
    const size_t NC = static_cast<size_t>(N) * C;
    float* di = widen(0, dinp, NC);
    if (!wide_->matmul_backward_bf16(di, dw, dbias, dout, inp, w, N, C, OC))
      wide_->matmul_backward(di, dw, dbias, widen(1, dout, static_cast<size_t>(N) * OC), widen(2, inp, NC),
                             widen(3, w, static_cast<size_t>(OC) * C), N, C, OC);
    if (dinp) narrow(dinp, di, NC);
  }
  void gelu_forward(bf16* out, const bf16* inp, size_t n) override {
    float* o = scratch(0, n);
    wide_->gelu_forward(o, widen(1, inp, n), n);
    narrow(out, o, n);
  }
  void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n) override {
    float* di = widen(0, dinp, n);
    wide_->gelu_backward(di, widen(1, inp, n), widen(2, dout, n), n);
    narrow(dinp, di, n);
  }
  void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n) override {
    float* o = scratch(0, n);
    wide_->residual_forward(o, widen(1, a, n), widen(2, b, n), n);
    narrow(out, o, n);
  }
  void add_inplace(bf16* dst, const bf16* src, size_t n) override {
    float* d = widen(0, dst, n);
    wide_->add_inplace(d, widen(1, src, n), n);
    narrow(dst, d, n);
  }
  void rope_forward(bf16* out, const bf16* inp, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0) override {
    const size_t n = static_cast<size_t>(B) * Tn * 3 * C;
    float* o = scratch(0, n);
    wide_->rope_forward(o, widen(1, inp, n), B, Tn, C, NH, rs, pos0);
    narrow(out, o, n);
  }
  void rope_backward(bf16* dinp, const bf16* dout, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0) override {
    const size_t n = static_cast<size_t>(B) * Tn * 3 * C;
    float* di = widen(0, dinp, n);
    wide_->rope_backward(di, widen(1, dout, n), B, Tn, C, NH, rs, pos0);
    narrow(dinp, di, n);
  }
  void attention_forward(bf16* out, float* stats, const bf16* qkv, int B, int Tn, int C, int NH,
                         const AttentionSpec& spec, const bf16* head_scale, double* diag,
                         const bf16* qkv_far) override {
    const size_t NC = static_cast<size_t>(B) * Tn * C;
    float* o = scratch(0, NC);
    wide_->attention_forward(o, stats, widen(1, qkv, 3 * NC), B, Tn, C, NH, spec, widen(2, head_scale, NH), diag,
                             widen(3, qkv_far, 3 * NC));
    narrow(out, o, NC);
  }
  void attention_backward(bf16* dqkv, float* dhead_scale, const bf16* dout, const bf16* out, const float* stats,
                          const bf16* qkv, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                          const bf16* head_scale, bf16* dqkv_far, const bf16* qkv_far) override {
    const size_t NC = static_cast<size_t>(B) * Tn * C;
    float* dq = widen(0, dqkv, 3 * NC);
    float* dqf = widen(5, dqkv_far, 3 * NC);
    wide_->attention_backward(dq, dhead_scale, widen(1, dout, NC), widen(2, out, NC), stats, widen(3, qkv, 3 * NC),
                              B, Tn, C, NH, spec, widen(4, head_scale, NH), dqf, widen(6, qkv_far, 3 * NC));
    narrow(dqkv, dq, 3 * NC);
    if (dqkv_far) narrow(dqkv_far, dqf, 3 * NC);
  }
  void crossentropy_forward(float* losses, const bf16* logits, const int32_t* targets, int N, int V,
                            int Vp) override {
    wide_->crossentropy_forward(losses, widen(0, logits, static_cast<size_t>(N) * Vp), targets, N, V, Vp);
  }
  // The float op overwrites its input in place (it may alias), then one rounding.
  void crossentropy_backward(bf16* dlogits, const bf16* logits, const int32_t* targets, const float* dloss, int N,
                             int V, int Vp) override {
    const size_t n = static_cast<size_t>(N) * Vp;
    float* l = widen(0, logits, n);
    wide_->crossentropy_backward(l, l, targets, dloss, N, V, Vp);
    narrow(dlogits, l, n);
  }

 private:
  static constexpr int kSlots = 7;

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
  std::array<Buffer<float>, kSlots> slots_;
};

}  // namespace

std::unique_ptr<Backend<bf16>> make_bf16_backend(std::unique_ptr<Backend<float>> wide) {
  return std::make_unique<Bf16Backend>(std::move(wide));
}

}  // namespace gpt
