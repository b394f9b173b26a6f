// Backend<T> over the CPU kernels: memory is ordinary host memory.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

#include "backend/backend.h"
#include "kernels/bf16_round.h"
#include "kernels/cpu/cpu_kernels.h"

namespace gpt {
namespace {

// Conversions shorter than this stay on one thread.
constexpr size_t kMinParallelConvert = size_t(1) << 15;

void copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

// 64-byte alignment so that vectorised kernels can use aligned loads.
void* aligned_zeroed(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded == 0 ? 64 : rounded);
  return p;
}

template <typename T>
class CpuBackend final : public Backend<T> {
 public:
  std::string name() const override { return "cpu"; }
  void* alloc_bytes(size_t bytes) override { return aligned_zeroed(bytes); }
  void release_bytes(void* p) override { std::free(p); }
  void upload_bytes(void* dst, const void* host, size_t bytes) override { copy(dst, host, bytes); }
  void download_bytes(void* host, const void* src, size_t bytes) override { copy(host, src, bytes); }
  void zero_bytes(void* p, size_t bytes) override {
    if (bytes) std::memset(p, 0, bytes);
  }
  void convert(float* dst, const bf16* src, size_t n) override {
    const auto m = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static) if (n >= kMinParallelConvert)
    for (std::ptrdiff_t i = 0; i < m; ++i) dst[i] = bf16_bits_to_float(src[i].bits);
  }
  void convert(bf16* dst, const float* src, size_t n) override {
    const auto m = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static) if (n >= kMinParallelConvert)
    for (std::ptrdiff_t i = 0; i < m; ++i) dst[i].bits = round_to_bf16_bits(src[i]);
  }

  // The plain ops (GPT_BACKEND_PLAIN_OPS), straight to the kernels.
  using Acc = T;
#define GPT_CPU_OP(name, params, args) \
  void name params override { cpu::name args; }
  GPT_BACKEND_PLAIN_OPS(GPT_CPU_OP)
#undef GPT_CPU_OP

  void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C,
                       int /*V*/) override {
    cpu::encoder_forward(out, tokens, wte, wpe, B, Tn, C);
  }
  void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC) override {
    cpu::matmul_forward(out, inp, w, bias, N, C, OC);
  }
  void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N, int C,
                       int OC) override {
    cpu::matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
  }
  // bf16 operands read as they are (float backend only; the double one
  // serves gradient checks and never holds bf16 storage).
  bool encoder_forward_bf16(float* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B, int Tn, int C,
                            int /*V*/) override {
    if constexpr (!std::is_same_v<T, float>) return false;
    cpu::encoder_forward_bf16(out, tokens, wte, wpe, B, Tn, C);
    return true;
  }
  bool matmul_forward_bf16(float* out, const bf16* inp, const bf16* w, const float* bias, int N, int C,
                           int OC) override {
    if constexpr (!std::is_same_v<T, float>) return false;
    cpu::matmul_forward_bf16(out, inp, w, bias, N, C, OC);
    return true;
  }
  bool matmul_backward_bf16(float* dinp, float* dw, float* dbias, const bf16* dout, const bf16* inp, const bf16* w,
                            int N, int C, int OC) override {
    if constexpr (!std::is_same_v<T, float>) return false;
    cpu::matmul_backward_bf16(dinp, dw, dbias, dout, inp, w, N, C, OC);
    return true;
  }
  double sum_squares(const T* x, size_t n) override { return cpu::sum_squares(x, n); }
  void scale_inplace(T* x, T s, size_t n) override { cpu::scale_inplace(x, s, n); }
  void attention_forward(T* out, T* stats, const T* qkv, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                         const HeadParams<T>& head, double* diag, const T* qkv_far) override {
    cpu::attention_forward(out, stats, qkv, B, Tn, C, NH, spec, head, diag, qkv_far);
  }
  void attention_backward(T* dqkv, const HeadGrads<T>& dhead, const T* dout, const T* out, const T* stats, const T* qkv,
                          int B, int Tn, int C, int NH, const AttentionSpec& spec, const HeadParams<T>& head,
                          T* dqkv_far, const T* qkv_far) override {
    cpu::attention_backward(dqkv, dhead, dout, out, stats, qkv, B, Tn, C, NH, spec, head, dqkv_far, qkv_far);
  }
  void adamw_update(T* param, const T* grad, T* m, T* v, size_t n, double lr, double beta1, double beta2, double eps,
                    double weight_decay, long t) override {
    cpu::adamw_update(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
  }
  void muon_momentum(T* grad, T* m, size_t n, double beta) override { cpu::muon_momentum(grad, m, n, beta); }
  void newton_schulz(T* x, int rows, int cols, int steps, T* work) override {
    cpu::newton_schulz(x, rows, cols, steps, work);
  }
  void muon_apply(T* param, const T* update, size_t n, double lr, double scale, double weight_decay) override {
    cpu::muon_apply(param, update, n, lr, scale, weight_decay);
  }
};

}  // namespace

template <typename T>
std::unique_ptr<Backend<T>> make_cpu_backend() {
  return std::make_unique<CpuBackend<T>>();
}

template std::unique_ptr<Backend<float>> make_cpu_backend<float>();
template std::unique_ptr<Backend<double>> make_cpu_backend<double>();

}  // namespace gpt
