// The backend interface: memory and ops. The model is written once against
// this interface; kernels/cpu/ (CpuBackend) and kernels/cuda/ (CudaBackend)
// implement it for float32, and a bf16-storage adapter (bf16_backend.cpp)
// turns either into a Backend<bf16>. Pointers handed to ops are backend
// memory (host memory for the CPU backend, device memory for CUDA); only
// upload/download cross the boundary.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "core/tokens.h"
#include "kernels/attention_spec.h"
#include "kernels/bf16_round.h"

namespace gpt {

// The type of a model's float32-side tensors for storage type T: master
// parameters, their gradients, AdamW moments, LayerNorm and attention
// statistics, losses. T itself for float and double; float for bf16.
template <typename T>
using accum_t = std::conditional_t<std::is_same_v<T, bf16>, float, T>;

// Memory of a backend, untyped: host memory for the CPU, device memory for
// CUDA. Allocations are zero-initialised; a zero-size one still gets a
// distinct pointer. Only upload/download cross the host/backend boundary.
class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  // Waits until every op issued so far has finished (asynchronous backends;
  // a no-op on the CPU). Only timing needs it: download() already waits.
  virtual void synchronize() {}

  virtual void* alloc_bytes(size_t bytes) = 0;
  virtual void release_bytes(void* p) = 0;
  virtual void upload_bytes(void* dst, const void* host, size_t bytes) = 0;
  virtual void download_bytes(void* host, const void* src, size_t bytes) = 0;
  virtual void zero_bytes(void* p, size_t bytes) = 0;
  // Conversions between float32 and bf16 (kernels/bf16_round.h: to nearest,
  // ties to even; widening is exact), element-wise on backend memory.
  virtual void convert(float* dst, const bf16* src, size_t n) = 0;
  virtual void convert(bf16* dst, const float* src, size_t n) = 0;

  // Typed helpers: n elements.
  template <typename E>
  void upload(E* dst, const E* host, size_t n) {
    upload_bytes(dst, host, n * sizeof(E));
  }
  template <typename E>
  void download(E* host, const E* src, size_t n) {
    download_bytes(host, src, n * sizeof(E));
  }
  template <typename E>
  void zero(E* p, size_t n) {
    zero_bytes(p, n * sizeof(E));
  }
  void upload_tokens(int32_t* dst, const int32_t* host, size_t n) { upload(dst, host, n); }
};

// The ops on float32-side tensors (A = accum_t of the storage type) that the
// optimizer and the trainer need: gradient norms, clipping, AdamW, Muon.
template <typename A>
class ParamBackend : public Device {
 public:
  virtual double sum_squares(const A* x, size_t n) = 0;
  virtual void scale_inplace(A* x, A s, size_t n) = 0;
  virtual void adamw_update(A* param, const A* grad, A* m, A* v, size_t n, double lr, double beta1, double beta2,
                            double eps, double weight_decay, long t) = 0;
  // Muon (kernels/muon_spec.h; contracts in kernels/cpu/cpu_kernels.h): Nesterov momentum into grad, the
  // Newton–Schulz orthogonalisation of a (rows, cols) matrix in place (work: muon::work_size(rows, cols)
  // elements), and the update param −= lr·(scale·update + weight_decay·param).
  virtual void muon_momentum(A* grad, A* m, size_t n, double beta) = 0;
  virtual void newton_schulz(A* x, int rows, int cols, int steps, A* work) = 0;
  virtual void muon_apply(A* param, const A* update, size_t n, double lr, double scale, double weight_decay) = 0;
};

// The layer ops every float32 backend hands unchanged to its kernels,
// cpu::NAME(arguments) and cuda::NAME(arguments, stream), declared once:
// X(name, (parameters, in T and Acc), (arguments)). Backend<T> declares them
// from this list and the CPU and CUDA backends forward them from it; a new op
// of this kind is a line here, its kernels (kernels/cpu/cpu_kernels.h,
// kernels/cuda/cuda_kernels.h) and the bf16 adapter's forwarder, which
// widens its bf16 operands (bf16_backend.cpp). The contracts are the
// kernels' (cpu_kernels.h); in brief:
//   sigmoid_gate_*   the output gate: out = y·σ(g); dy, dg += its backward
//   forget_*         the forget gate: c (B,NH,T) from the gate logits g (B,T,NH); dg += its backward
//   fire_*           FIRE's bias table (NH,T,T) from a layer's parameter block p; dp += its backward
//                    from dtable (B,NH,T,T)
//   position_table_* ALiBi's, KERPLE's or FIRE's biases (B,NH,T,T) of the position ids pos (B·Tn
//                    values in backend memory) from the layer's learned values p (none for ALiBi);
//                    dp += its backward from dtable (B,NH,T,T)
//   diff_*           differential attention: qkv split into the kernel heads of the two maps and
//                    back; their outputs combined (λ from lam, the gain, 1 − lambda_init) and back
//                    (dy2 overwritten, dlam and dgain +=)
//   pope_*           PoPE: qkv into the kernel heads of 2D channels (polar coordinates) and back
//                    (dqkv, ddelta +=); the output's first D channels of each head and back
//   rope_*, pope_*   pos: the tokens' position ids (B·Tn values in backend memory), null for
//                    0..Tn−1 in every sequence (training-time ids: docs/training_for_length.md)
//   head_repeat      per-head float32-side inputs repeated over a head's group of kernel heads;
//   head_reduce      their gradients added back
//   crossentropy_*   a target of kIgnoreTarget (core/tokens.h) has loss 0 and a zero gradient row
// The ops a backend runs its own way (the embedding, the linear layer,
// attention) are declared by hand in Backend.
#define GPT_BACKEND_PLAIN_OPS(X)                                                                                       \
  X(encoder_backward, (Acc * dwte, Acc * dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C),            \
    (dwte, dwpe, dout, tokens, B, Tn, C))                                                                              \
  X(layernorm_forward, (T * out, Acc * mean, Acc * rstd, const T* inp, const T* w, const T* b, int N, int C),          \
    (out, mean, rstd, inp, w, b, N, C))                                                                                \
  X(layernorm_backward,                                                                                                \
    (T * dinp, Acc * dw, Acc * db, const T* dout, const T* inp, const T* w, const Acc* mean, const Acc* rstd, int N,   \
     int C),                                                                                                           \
    (dinp, dw, db, dout, inp, w, mean, rstd, N, C))                                                                    \
  X(rmsnorm_forward, (T * out, Acc * rstd, const T* inp, const T* w, int N, int C, double eps),                        \
    (out, rstd, inp, w, N, C, eps))                                                                                    \
  X(rmsnorm_backward, (T * dinp, Acc * dw, const T* dout, const T* inp, const T* w, const Acc* rstd, int N, int C),    \
    (dinp, dw, dout, inp, w, rstd, N, C))                                                                              \
  X(swiglu_forward, (T * out, const T* inp, int N, int F), (out, inp, N, F))                                           \
  X(swiglu_backward, (T * dinp, const T* inp, const T* dout, int N, int F), (dinp, inp, dout, N, F))                   \
  X(gelu_erf_forward, (T * out, const T* inp, size_t n), (out, inp, n))                                                \
  X(gelu_erf_backward, (T * dinp, const T* inp, const T* dout, size_t n), (dinp, inp, dout, n))                        \
  X(relu2_forward, (T * out, const T* inp, size_t n), (out, inp, n))                                                   \
  X(relu2_backward, (T * dinp, const T* inp, const T* dout, size_t n), (dinp, inp, dout, n))                           \
  X(gqa_expand, (T * qkv, const T* grouped, int N, int NH, int NKV, int D), (qkv, grouped, N, NH, NKV, D))             \
  X(gqa_reduce, (T * dgrouped, const T* dqkv, int N, int NH, int NKV, int D), (dgrouped, dqkv, N, NH, NKV, D))         \
  X(qknorm_forward,                                                                                                    \
    (T * out, Acc * rstd, const T* inp, const T* wq, const T* wk, const T* sq, int N, int NH, int D, double eps),      \
    (out, rstd, inp, wq, wk, sq, N, NH, D, eps))                                                                       \
  X(qknorm_backward,                                                                                                   \
    (T * dinp, Acc * dwq, Acc * dwk, Acc * dsq, const T* dout, const T* inp, const T* wq, const T* wk, const T* sq,    \
     const Acc* rstd, int N, int NH, int D),                                                                           \
    (dinp, dwq, dwk, dsq, dout, inp, wq, wk, sq, rstd, N, NH, D))                                                      \
  X(gelu_forward, (T * out, const T* inp, size_t n), (out, inp, n))                                                    \
  X(gelu_backward, (T * dinp, const T* inp, const T* dout, size_t n), (dinp, inp, dout, n))                            \
  X(residual_forward, (T * out, const T* a, const T* b, size_t n), (out, a, b, n))                                     \
  X(add_inplace, (T * dst, const T* src, size_t n), (dst, src, n))                                                     \
  X(rope_forward,                                                                                                     \
    (T * out, const T* inp, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0, const int32_t* pos = nullptr), \
    (out, inp, B, Tn, C, NH, rs, pos0, pos))                                                                           \
  X(rope_backward,                                                                                                    \
    (T * dinp, const T* dout, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0,                              \
     const int32_t* pos = nullptr),                                                                                    \
    (dinp, dout, B, Tn, C, NH, rs, pos0, pos))                                                                         \
  X(sigmoid_gate_forward, (T * out, const T* y, const T* g, size_t n), (out, y, g, n))                                 \
  X(sigmoid_gate_backward, (T * dy, T * dg, const T* dout, const T* y, const T* g, size_t n), (dy, dg, dout, y, g, n)) \
  X(forget_forward, (Acc * c, const T* g, int B, int Tn, int NH), (c, g, B, Tn, NH))                                   \
  X(forget_backward, (T * dg, const Acc* dc, const T* g, int B, int Tn, int NH), (dg, dc, g, B, Tn, NH))               \
  X(fire_forward, (Acc * table, const T* p, int Tn, int NH, double L0), (table, p, Tn, NH, L0))                        \
  X(fire_backward, (Acc * dp, const Acc* dtable, const T* p, int B, int Tn, int NH, double L0),                        \
    (dp, dtable, p, B, Tn, NH, L0))                                                                                    \
  X(position_table_forward,                                                                                           \
    (Acc * table, const T* p, const int32_t* pos, int B, int Tn, int NH, const AttentionSpec& s),                      \
    (table, p, pos, B, Tn, NH, s))                                                                                     \
  X(position_table_backward,                                                                                          \
    (Acc * dp, const Acc* dtable, const T* p, const int32_t* pos, int B, int Tn, int NH, const AttentionSpec& s),      \
    (dp, dtable, p, pos, B, Tn, NH, s))                                                                                \
  X(pope_forward,                                                                                                     \
    (T * qkv2, const T* qkv, const T* delta, int B, int Tn, int C, int NH, double theta,                               \
     const int32_t* pos = nullptr),                                                                                    \
    (qkv2, qkv, delta, B, Tn, C, NH, theta, pos))                                                                      \
  X(pope_backward,                                                                                                     \
    (T * dqkv, Acc * ddelta, const T* dqkv2, const T* qkv, const T* delta, int B, int Tn, int C, int NH,               \
     double theta, const int32_t* pos = nullptr),                                                                      \
    (dqkv, ddelta, dqkv2, qkv, delta, B, Tn, C, NH, theta, pos))                                                       \
  X(pope_output_forward, (T * y, const T* y2, int N, int C, int NH), (y, y2, N, C, NH))                                \
  X(pope_output_backward, (T * dy2, const T* dy, int N, int C, int NH), (dy2, dy, N, C, NH))                           \
  X(diff_split_forward, (T * qkv2, const T* qkv, int N, int C, int NH), (qkv2, qkv, N, C, NH))                         \
  X(diff_split_backward, (T * dqkv, const T* dqkv2, int N, int C, int NH), (dqkv, dqkv2, N, C, NH))                    \
  X(diff_combine_forward,                                                                                              \
    (T * out, Acc * rstd, const T* y2, const T* lam, const T* gain, int N, int C, int NH, double lambda_init),         \
    (out, rstd, y2, lam, gain, N, C, NH, lambda_init))                                                                 \
  X(diff_combine_backward,                                                                                             \
    (T * dy2, Acc * dlam, Acc * dgain, const T* dout, const T* y2, const Acc* rstd, const T* lam, const T* gain,       \
     int N, int C, int NH, double lambda_init),                                                                        \
    (dy2, dlam, dgain, dout, y2, rstd, lam, gain, N, C, NH, lambda_init))                                              \
  X(head_repeat, (Acc * dst, const Acc* src, size_t outer, int NH, size_t inner, int group),                           \
    (dst, src, outer, NH, inner, group))                                                                               \
  X(head_reduce, (Acc * dst, const Acc* src, size_t outer, int NH, size_t inner, int group),                           \
    (dst, src, outer, NH, inner, group))                                                                               \
  X(crossentropy_forward, (Acc * losses, const T* logits, const int32_t* targets, int N, int V, int Vp),               \
    (losses, logits, targets, N, V, Vp))                                                                               \
  X(crossentropy_backward,                                                                                             \
    (T * dlogits, const T* logits, const int32_t* targets, const Acc* dloss, int N, int V, int Vp),                    \
    (dlogits, logits, targets, dloss, N, V, Vp))

// The ops a float32 backend may also run natively on bf16 storage (bf16
// activations, working weights and logits read and written as stored, the
// float32 op's math in registers; the statistics, weight gradients and
// losses float32): X(name, (parameters), (arguments)). Backend<T> declares
// for each an optional NAME_bf16 that returns false (no such path: the bf16
// adapter widens the operands itself); the CUDA backend runs them
// (kernels/cuda/storage.cuh). Same contracts as the float32 ops, with the
// same results bit for bit as the adapter's widen - float32 op - round.
#define GPT_BACKEND_NATIVE_BF16_OPS(X)                                                                               \
  X(layernorm_forward,                                                                                                \
    (bf16 * out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b, int N, int C),              \
    (out, mean, rstd, inp, w, b, N, C))                                                                               \
  X(layernorm_backward,                                                                                               \
    (bf16 * dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w, const float* mean,          \
     const float* rstd, int N, int C),                                                                                \
    (dinp, dw, db, dout, inp, w, mean, rstd, N, C))                                                                   \
  X(gelu_forward, (bf16 * out, const bf16* inp, size_t n), (out, inp, n))                                             \
  X(gelu_backward, (bf16 * dinp, const bf16* inp, const bf16* dout, size_t n), (dinp, inp, dout, n))                  \
  X(residual_forward, (bf16 * out, const bf16* a, const bf16* b, size_t n), (out, a, b, n))                           \
  X(add_inplace, (bf16 * dst, const bf16* src, size_t n), (dst, src, n))                                              \
  X(crossentropy_forward, (float* losses, const bf16* logits, const int32_t* targets, int N, int V, int Vp),          \
    (losses, logits, targets, N, V, Vp))                                                                              \
  X(crossentropy_backward,                                                                                            \
    (bf16 * dlogits, const bf16* logits, const int32_t* targets, const float* dloss, int N, int V, int Vp),           \
    (dlogits, logits, targets, dloss, N, V, Vp))

// The layer ops, for storage type T (float, double, or bf16). Activations,
// activation gradients and the parameters the ops read are T; parameter
// gradients, statistics (LayerNorm mean/rstd, attention stats) and losses
// are Acc = accum_t<T>, so a bf16 model keeps float32 gradients and
// reductions. Same contracts as kernels/cpu/cpu_kernels.h.
template <typename T>
class Backend : public ParamBackend<accum_t<T>> {
 public:
  using Acc = accum_t<T>;

#define GPT_DECLARE_OP(name, params, args) virtual void name params = 0;
  GPT_BACKEND_PLAIN_OPS(GPT_DECLARE_OP)
#undef GPT_DECLARE_OP

  // wte has V rows (the token ids index it); wpe (may be null) at least Tn.
  virtual void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C,
                               int V) = 0;
  virtual void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC) = 0;
  virtual void matmul_backward(T* dinp, Acc* dw, Acc* dbias, const T* dout, const T* inp, const T* w, int N, int C,
                               int OC) = 0;
  // head / dhead: the layer's learned per-head attention parameters and their
  // gradients (ssmax scales, sink logits; cpu::attention_forward). qkv_far /
  // dqkv_far: the far copy of a distance remapping; null without one.
  virtual void attention_forward(T* out, Acc* stats, const T* qkv, int B, int Tn, int C, int NH,
                                 const AttentionSpec& spec, const HeadParams<T, Acc>& head, double* diag,
                                 const T* qkv_far = nullptr) = 0;
  virtual void attention_backward(T* dqkv, const HeadGrads<Acc>& dhead, const T* dout, const T* out, const Acc* stats,
                                  const T* qkv, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                                  const HeadParams<T, Acc>& head, T* dqkv_far = nullptr,
                                  const T* qkv_far = nullptr) = 0;

  // Optional, for the bf16-storage adapter (make_bf16_backend): the linear
  // layer reading bf16 operands (inp, w, dout) as they are, with float32
  // results (out, dinp, dw, dbias) and the contracts of matmul_forward /
  // matmul_backward on the operands widened (dinp, dw and dbias may each be
  // null: not wanted); the embedding reading bf16 tables. false: this
  // backend has no such path for these shapes, nothing was done, and the
  // adapter widens the operands itself.
  virtual bool encoder_forward_bf16(float* /*out*/, const int32_t* /*tokens*/, const bf16* /*wte*/, const bf16* /*wpe*/,
                                    int /*B*/, int /*Tn*/, int /*C*/, int /*V*/) {
    return false;
  }
  virtual bool matmul_forward_bf16(float* /*out*/, const bf16* /*inp*/, const bf16* /*w*/, const float* /*bias*/,
                                   int /*N*/, int /*C*/, int /*OC*/) {
    return false;
  }
  virtual bool matmul_backward_bf16(float* /*dinp*/, float* /*dw*/, float* /*dbias*/, const bf16* /*dout*/,
                                    const bf16* /*inp*/, const bf16* /*w*/, int /*N*/, int /*C*/, int /*OC*/) {
    return false;
  }
  // The native bf16 ops (GPT_BACKEND_NATIVE_BF16_OPS): false, nothing done,
  // unless a backend runs them.
#define GPT_DECLARE_NATIVE_BF16(name, params, args) \
  virtual bool name##_bf16 params { return no_native_bf16 args; }
  GPT_BACKEND_NATIVE_BF16_OPS(GPT_DECLARE_NATIVE_BF16)
#undef GPT_DECLARE_NATIVE_BF16

 private:
  template <typename... A>
  static bool no_native_bf16(const A&...) {
    return false;
  }
};

// The CPU backend (kernels/cpu), for float or double.
template <typename T>
std::unique_ptr<Backend<T>> make_cpu_backend();

// The float backend of run.device: "cpu" or "cuda" (kernels/cuda). precision
// is run.precision, how the CUDA GEMMs compute: "fp32" (strict float32),
// "tf32" (TF32 tensor cores) or "bf16" (operands rounded to bf16, float32
// accumulation and output); the backend stores float32. The cpu device
// takes "fp32" only. Throws gpt::Error naming run.device / run.precision and
// the valid choices for an unknown value, a precision the device lacks, a
// binary built without CUDA or no CUDA device. (Training in double, for
// gradient checks, is CPU only: make_cpu_backend<double>.)
std::unique_ptr<Backend<float>> make_backend(const std::string& device, const std::string& precision = "fp32");

// Backend<bf16> over a float32 backend (run.storage "bf16"): activations
// and the parameters the ops read are stored in bf16; parameter gradients,
// statistics and losses are float32 (accum_t<bf16>). Each op converts its
// bf16 inputs (and the bf16 outputs it accumulates into) to float32 scratch
// on `wide`, runs wide's float32 op there, and rounds its bf16 outputs once
// (to nearest even). So the adapter over the CPU backend is the reference
// of the one over CUDA, op for op. The linear layers skip the widening
// where the float32 backend reads bf16 operands itself (matmul_*_bf16: the
// CUDA backend's cuBLASLt). Elsewhere the conversions are extra passes
// over memory: correct first; native bf16 kernels are left to when a GPU
// can measure them (docs/gpu.md).
// chunk_floats bounds the float32 scratch: each widened operand holds at
// most that many values (or one indivisible unit, a row or a sequence, when
// that is larger), the op running chunk after chunk; 0 widens whole tensors.
// Over the CPU backend the results are bit for bit those of whole-tensor
// widening whatever the chunk (tests/backend/bf16_backend_test.cpp).
constexpr size_t kBf16ChunkFloats = size_t(1) << 22;  // 16 MiB of float32 per operand
std::unique_ptr<Backend<bf16>> make_bf16_backend(std::unique_ptr<Backend<float>> wide,
                                                 size_t chunk_floats = kBf16ChunkFloats);

// Whether make_backend("cuda") can work here; otherwise *why says why
// ("built without CUDA", the driver's message, "no device visible").
bool cuda_available(std::string* why = nullptr);

// Name of the current CUDA device (e.g. "NVIDIA H200"); empty without CUDA or a device.
std::string cuda_device_name();

// Bytes of the current CUDA device's memory in use (total - free, all
// processes), after waiting for the device; 0 without CUDA or a device.
size_t cuda_memory_in_use();

// Owning buffer of n elements of backend memory.
template <typename Elem>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device& dev, size_t n) : dev_(&dev), n_(n) {
    p_ = static_cast<Elem*>(dev.alloc_bytes(n * sizeof(Elem)));
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }
  Elem* get() const { return p_; }
  size_t size() const { return n_; }
  void reset() {
    if (p_) dev_->release_bytes(p_);
    p_ = nullptr;
    n_ = 0;
  }

 private:
  void swap(DeviceBuffer& o) {
    std::swap(dev_, o.dev_);
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
  }
  Device* dev_ = nullptr;
  Elem* p_ = nullptr;
  size_t n_ = 0;
};

template <typename T>
using Buffer = DeviceBuffer<T>;
using TokenBuffer = DeviceBuffer<int32_t>;

}  // namespace gpt
