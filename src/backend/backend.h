// The backend interface: memory and ops. The model is written once against
// this interface; kernels/cpu/ implements it now (CpuBackend) and
// kernels/cuda/ will implement it beside it. Pointers handed to ops are
// backend memory (host memory for the CPU backend, device memory for CUDA);
// only upload/download cross the boundary.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/attention_spec.h"

namespace gpt {

template <typename T>
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Waits until every op issued so far has finished (asynchronous backends;
  // a no-op on the CPU). Only timing needs it: download() already waits.
  virtual void synchronize() {}

  // ---- memory (zero-initialised) ----
  virtual T* alloc(size_t n) = 0;
  virtual void release(T* p) = 0;
  virtual int32_t* alloc_tokens(size_t n) = 0;
  virtual void release_tokens(int32_t* p) = 0;
  virtual void upload(T* dst, const T* host, size_t n) = 0;
  virtual void download(T* host, const T* src, size_t n) = 0;
  virtual void upload_tokens(int32_t* dst, const int32_t* host, size_t n) = 0;
  virtual void zero(T* p, size_t n) = 0;

  // ---- ops: same contracts as kernels/cpu/cpu_kernels.h ----
  virtual void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C) = 0;
  virtual void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C) = 0;
  virtual void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N, int C) = 0;
  virtual void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean,
                                  const T* rstd, int N, int C) = 0;
  virtual void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC) = 0;
  virtual void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N, int C,
                               int OC) = 0;
  virtual void gelu_forward(T* out, const T* inp, size_t n) = 0;
  virtual void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) = 0;
  virtual void residual_forward(T* out, const T* a, const T* b, size_t n) = 0;
  virtual void add_inplace(T* dst, const T* src, size_t n) = 0;
  virtual double sum_squares(const T* x, size_t n) = 0;
  virtual void scale_inplace(T* x, T s, size_t n) = 0;
  virtual void rope_forward(T* out, const T* inp, int B, int Tn, int C, int NH, double theta, int pos0) = 0;
  virtual void rope_backward(T* dinp, const T* dout, int B, int Tn, int C, int NH, double theta, int pos0) = 0;
  virtual void attention_forward(T* out, T* stats, const T* qkv, int B, int Tn, int C, int NH,
                                 const AttentionSpec& spec, const T* head_scale, double* diag) = 0;
  virtual void attention_backward(T* dqkv, T* dhead_scale, const T* dout, const T* out, const T* stats, const T* qkv,
                                  int B, int Tn, int C, int NH, const AttentionSpec& spec, const T* head_scale) = 0;
  virtual void crossentropy_forward(T* losses, const T* logits, const int32_t* targets, int N, int V, int Vp) = 0;
  virtual void crossentropy_backward(T* dlogits, const T* logits, const int32_t* targets, const T* dloss, int N,
                                     int V, int Vp) = 0;
  virtual void adamw_update(T* param, const T* grad, T* m, T* v, size_t n, double lr, double beta1, double beta2,
                            double eps, double weight_decay, long t) = 0;
};

// The CPU backend (kernels/cpu), for float or double.
template <typename T>
std::unique_ptr<Backend<T>> make_cpu_backend();

// The float backend of run.device: "cpu" or "cuda" (kernels/cuda). precision
// is run.precision, how the CUDA GEMMs compute: "fp32" (strict float32),
// "tf32" (TF32 tensor cores) or "bf16" (operands rounded to bf16, float32
// accumulation and output); storage is float32 in every mode. The cpu device
// takes "fp32" only. Throws gpt::Error naming run.device / run.precision and
// the valid choices for an unknown value, a precision the device lacks, a
// binary built without CUDA or no CUDA device. (Training in double, for
// gradient checks, is CPU only: make_cpu_backend<double>.)
std::unique_ptr<Backend<float>> make_backend(const std::string& device, const std::string& precision = "fp32");

// Whether make_backend("cuda") can work here; otherwise *why says why
// ("built without CUDA", the driver's message, "no device visible").
bool cuda_available(std::string* why = nullptr);

// Name of the current CUDA device (e.g. "NVIDIA H200"); empty without CUDA or a device.
std::string cuda_device_name();

// Bytes of the current CUDA device's memory in use (total - free, all
// processes), after waiting for the device; 0 without CUDA or a device.
size_t cuda_memory_in_use();

// Owning buffer of backend memory.
template <typename Elem, typename T>
class BasicBuffer {
 public:
  BasicBuffer() = default;
  BasicBuffer(Backend<T>& be, size_t n) : be_(&be), n_(n) { p_ = allocate(be, n); }
  BasicBuffer(BasicBuffer&& o) noexcept { swap(o); }
  BasicBuffer& operator=(BasicBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }
  BasicBuffer(const BasicBuffer&) = delete;
  BasicBuffer& operator=(const BasicBuffer&) = delete;
  ~BasicBuffer() { reset(); }
  Elem* get() const { return p_; }
  size_t size() const { return n_; }
  void reset() {
    if (p_) release(*be_, p_);
    p_ = nullptr;
    n_ = 0;
  }

 private:
  static Elem* allocate(Backend<T>& be, size_t n) {
    if constexpr (std::is_same_v<Elem, int32_t>) return be.alloc_tokens(n);
    else return be.alloc(n);
  }
  static void release(Backend<T>& be, Elem* p) {
    if constexpr (std::is_same_v<Elem, int32_t>) be.release_tokens(p);
    else be.release(p);
  }
  void swap(BasicBuffer& o) {
    std::swap(be_, o.be_);
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
  }
  Backend<T>* be_ = nullptr;
  Elem* p_ = nullptr;
  size_t n_ = 0;
};

template <typename T>
using Buffer = BasicBuffer<T, T>;
template <typename T>
using TokenBuffer = BasicBuffer<int32_t, T>;

}  // namespace gpt
