// Backend<float> over the CUDA kernels (kernels/cuda/): device memory from
// cudaMalloc, every op on the default stream, GEMMs through cuBLASLt. Every
// tensor is float32 (parameters, activations, gradients, AdamW moments);
// run.precision only changes how the linear layers' GEMMs compute: fp32,
// tf32, or bf16 operands with float32 accumulation (cuda::Matmul). For bf16
// storage (run.storage, make_bf16_backend over this backend) it converts
// between bf16 and float32 and multiplies bf16 operands as stored
// (matmul_forward_bf16 / matmul_backward_bf16). Compiled
// only when nvcc was found (GPT_HAVE_CUDA); make_backend("cuda") refuses
// otherwise.
#ifdef GPT_HAVE_CUDA
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "backend/backend.h"
#include "core/check.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_kernels.h"

namespace gpt {
namespace {

// The device's cudaMalloc'd pointer, at least 256 bytes (a zero-size
// buffer still gets a distinct, valid pointer), zeroed.
void* device_zeroed(size_t bytes) {
  void* p = nullptr;
  const size_t n = bytes < 256 ? 256 : bytes;
  GPT_CUDA_CHECK(cudaMalloc(&p, n));
  const cudaError_t st = cudaMemset(p, 0, n);
  if (st != cudaSuccess) {
    cudaFree(p);
    GPT_CUDA_CHECK(st);
  }
  return p;
}

// Frees without throwing (called from destructors); a failure is logged.
void device_free(void* p) {
  const cudaError_t st = cudaFree(p);
  if (st != cudaSuccess) spdlog::warn("cudaFree failed: {}", cudaGetErrorString(st));
}

// bf16 elements as the kernels take them: their bit patterns.
const uint16_t* bits(const bf16* p) { return reinterpret_cast<const uint16_t*>(p); }

class CudaBackend final : public Backend<float> {
 public:
  explicit CudaBackend(cuda::GemmPrecision precision) : matmul_(precision) {
    sum_partials_ = static_cast<double*>(device_zeroed(sizeof(double) * cuda::kSumSquaresBlocks));
  }
  ~CudaBackend() override {
    device_free(sum_partials_);
    if (diag_) device_free(diag_);
  }
  std::string name() const override {
    switch (matmul_.precision()) {
      case cuda::GemmPrecision::Tf32: return "cuda (tf32 GEMMs)";
      case cuda::GemmPrecision::Bf16: return "cuda (bf16 GEMM operands)";
      case cuda::GemmPrecision::Fp32: break;
    }
    return "cuda";
  }
  void synchronize() override { GPT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  void* alloc_bytes(size_t bytes) override { return device_zeroed(bytes); }
  void release_bytes(void* p) override { device_free(p); }
  void upload_bytes(void* dst, const void* host, size_t bytes) override {
    if (bytes) GPT_CUDA_CHECK(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice));
  }
  void download_bytes(void* host, const void* src, size_t bytes) override {
    if (bytes) GPT_CUDA_CHECK(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost));
  }
  void zero_bytes(void* p, size_t bytes) override {
    if (bytes) GPT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  }
  void convert(float* dst, const bf16* src, size_t n) override { cuda::bf16_to_float(dst, bits(src), n, stream_); }
  void convert(bf16* dst, const float* src, size_t n) override {
    cuda::float_to_bf16(reinterpret_cast<uint16_t*>(dst), src, n, stream_);
  }

  void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int Tn, int C,
                       int /*V*/) override {
    cuda::encoder_forward(out, tokens, wte, wpe, B, Tn, C, stream_);
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int Tn,
                        int C) override {
    cuda::encoder_backward(dwte, dwpe, dout, tokens, B, Tn, C, stream_);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b, int N,
                         int C) override {
    cuda::layernorm_forward(out, mean, rstd, inp, w, b, N, C, stream_);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int N, int C) override {
    cuda::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, stream_);
  }
  void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int C,
                      int OC) override {
    matmul_.forward(out, inp, w, bias, N, C, OC, stream_);
  }
  void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                       int N, int C, int OC) override {
    matmul_.backward(dinp, dw, dbias, dout, inp, w, N, C, OC, stream_);
  }
  // bf16 operands straight into cuBLASLt when every row is a multiple of 16
  // bytes (C and OC multiples of 8), which its bf16 tensor-core kernels want;
  // other shapes go the adapter's widening way.
  bool encoder_forward_bf16(float* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B, int Tn,
                            int C, int /*V*/) override {
    cuda::encoder_forward(out, tokens, bits(wte), bits(wpe), B, Tn, C, stream_);
    return true;
  }
  bool matmul_forward_bf16(float* out, const bf16* inp, const bf16* w, const float* bias, int N, int C,
                           int OC) override {
    if (C % 8 != 0 || OC % 8 != 0) return false;
    matmul_.forward(out, bits(inp), bits(w), bias, N, C, OC, stream_);
    return true;
  }
  bool matmul_backward_bf16(float* dinp, float* dw, float* dbias, const bf16* dout, const bf16* inp, const bf16* w,
                            int N, int C, int OC) override {
    if (C % 8 != 0 || OC % 8 != 0) return false;
    matmul_.backward(dinp, dw, dbias, bits(dout), bits(inp), bits(w), N, C, OC, stream_);
    return true;
  }
  void gelu_forward(float* out, const float* inp, size_t n) override { cuda::gelu_forward(out, inp, n, stream_); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override {
    cuda::gelu_backward(dinp, inp, dout, n, stream_);
  }
  void residual_forward(float* out, const float* a, const float* b, size_t n) override {
    cuda::residual_forward(out, a, b, n, stream_);
  }
  void add_inplace(float* dst, const float* src, size_t n) override { cuda::add_inplace(dst, src, n, stream_); }
  double sum_squares(const float* x, size_t n) override {
    cuda::sum_squares_partials(sum_partials_, x, n, stream_);
    std::vector<double> partial(cuda::kSumSquaresBlocks);
    GPT_CUDA_CHECK(cudaMemcpy(partial.data(), sum_partials_, partial.size() * sizeof(double), cudaMemcpyDeviceToHost));
    double total = 0.0;
    for (double p : partial) total += p;
    return total;
  }
  void scale_inplace(float* x, float s, size_t n) override { cuda::scale_inplace(x, s, n, stream_); }
  void rope_forward(float* out, const float* inp, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0) override {
    cuda::rope_forward(out, inp, B, Tn, C, NH, rs, pos0, stream_);
  }
  void rope_backward(float* dinp, const float* dout, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0) override {
    cuda::rope_backward(dinp, dout, B, Tn, C, NH, rs, pos0, stream_);
  }
  // diag (host doubles, NH × kAttentionDiagStats) += what the kernel adds to a
  // zeroed device copy.
  void attention_forward(float* out, float* stats, const float* qkv, int B, int Tn, int C, int NH,
                         const AttentionSpec& spec, const HeadParams<float>& head_scale, double* diag,
                         const float* qkv_far) override {
    const size_t ndiag = static_cast<size_t>(NH) * kAttentionDiagStats;
    double* ddiag = nullptr;
    if (diag) {
      if (diag_size_ < ndiag) {
        if (diag_) device_free(diag_);
        diag_ = nullptr;
        diag_ = static_cast<double*>(device_zeroed(ndiag * sizeof(double)));
        diag_size_ = ndiag;
      }
      ddiag = diag_;
      GPT_CUDA_CHECK(cudaMemsetAsync(ddiag, 0, ndiag * sizeof(double), stream_));
    }
    cuda::attention_forward(out, stats, qkv, B, Tn, C, NH, spec, head_scale, ddiag, stream_, qkv_far);
    if (diag) {
      std::vector<double> host(ndiag);
      GPT_CUDA_CHECK(cudaMemcpy(host.data(), ddiag, ndiag * sizeof(double), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < ndiag; ++i) diag[i] += host[i];
    }
  }
  void attention_backward(float* dqkv, const HeadGrads<float>& dhead_scale, const float* dout, const float* out,
                          const float* stats, const float* qkv, int B, int Tn, int C, int NH,
                          const AttentionSpec& spec, const HeadParams<float>& head_scale, float* dqkv_far,
                          const float* qkv_far) override {
    cuda::attention_backward(dqkv, dhead_scale, dout, out, stats, qkv, B, Tn, C, NH, spec, head_scale, stream_,
                             dqkv_far, qkv_far);
  }
  void sigmoid_gate_forward(float* out, const float* y, const float* g, size_t n) override {
    cuda::sigmoid_gate_forward(out, y, g, n, stream_);
  }
  void sigmoid_gate_backward(float* dy, float* dg, const float* dout, const float* y, const float* g,
                             size_t n) override {
    cuda::sigmoid_gate_backward(dy, dg, dout, y, g, n, stream_);
  }
  void fire_forward(float* table, const float* p, int Tn, int NH, double L0) override {
    cuda::fire_forward(table, p, Tn, NH, L0, stream_);
  }
  void fire_backward(float* dp, const float* dtable, const float* p, int B, int Tn, int NH, double L0) override {
    cuda::fire_backward(dp, dtable, p, B, Tn, NH, L0, stream_);
  }
  void diff_split_forward(float* qkv2, const float* qkv, int N, int C, int NH) override {
    cuda::diff_split_forward(qkv2, qkv, N, C, NH, stream_);
  }
  void diff_split_backward(float* dqkv, const float* dqkv2, int N, int C, int NH) override {
    cuda::diff_split_backward(dqkv, dqkv2, N, C, NH, stream_);
  }
  void diff_combine_forward(float* out, float* rstd, const float* y2, const float* lam, const float* gain, int N,
                            int C, int NH, double lambda_init) override {
    cuda::diff_combine_forward(out, rstd, y2, lam, gain, N, C, NH, lambda_init, stream_);
  }
  void diff_combine_backward(float* dy2, float* dlam, float* dgain, const float* dout, const float* y2,
                             const float* rstd, const float* lam, const float* gain, int N, int C, int NH,
                             double lambda_init) override {
    cuda::diff_combine_backward(dy2, dlam, dgain, dout, y2, rstd, lam, gain, N, C, NH, lambda_init, stream_);
  }
  void head_repeat(float* dst, const float* src, size_t outer, int NH, size_t inner, int group) override {
    cuda::head_repeat(dst, src, outer, NH, inner, group, stream_);
  }
  void head_reduce(float* dst, const float* src, size_t outer, int NH, size_t inner, int group) override {
    cuda::head_reduce(dst, src, outer, NH, inner, group, stream_);
  }
  void forget_forward(float* c, const float* g, int B, int Tn, int NH) override {
    cuda::forget_forward(c, g, B, Tn, NH, stream_);
  }
  void forget_backward(float* dg, const float* dc, const float* g, int B, int Tn, int NH) override {
    cuda::forget_backward(dg, dc, g, B, Tn, NH, stream_);
  }
  void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V,
                            int Vp) override {
    cuda::crossentropy_forward(losses, logits, targets, N, V, Vp, stream_);
  }
  void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, const float* dloss, int N,
                             int V, int Vp) override {
    cuda::crossentropy_backward(dlogits, logits, targets, dloss, N, V, Vp, stream_);
  }
  void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, double lr, double beta1,
                    double beta2, double eps, double weight_decay, long t) override {
    cuda::adamw_update(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t, stream_);
  }

 private:

  cudaStream_t stream_ = nullptr;  // the legacy default stream: cudaMemcpy orders with it
  cuda::Matmul matmul_;
  double* sum_partials_ = nullptr;  // kSumSquaresBlocks doubles
  double* diag_ = nullptr;          // attention diagnostics scratch
  size_t diag_size_ = 0;
};

}  // namespace

bool cuda_device_present(std::string* why) {
  int count = 0;
  const cudaError_t st = cudaGetDeviceCount(&count);
  if (st != cudaSuccess) {
    if (why) *why = cudaGetErrorString(st);
    cudaGetLastError();  // reset the runtime's last-error state so later calls start clean
    return false;
  }
  if (count == 0) {
    if (why) *why = "no device visible";
    return false;
  }
  return true;
}

size_t cuda_memory_in_use() {
  size_t free = 0, total = 0;
  if (!cuda_device_present(nullptr) || cudaDeviceSynchronize() != cudaSuccess ||
      cudaMemGetInfo(&free, &total) != cudaSuccess)
    return 0;
  return total - free;
}

std::string cuda_device_name() {
  cudaDeviceProp prop{};
  int device = 0;
  if (!cuda_device_present(nullptr) || cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return "";
  return prop.name;
}

// precision: "fp32", "tf32" or "bf16" (make_backend has checked it).
std::unique_ptr<Backend<float>> make_cuda_backend(const std::string& precision) {
  cuda::GemmPrecision p = cuda::GemmPrecision::Fp32;
  if (precision == "tf32") p = cuda::GemmPrecision::Tf32;
  else if (precision == "bf16") p = cuda::GemmPrecision::Bf16;
  else GPT_CHECK(precision == "fp32", "run.precision \"", precision, "\" is not a precision; valid: fp32, tf32, bf16");
  std::string why;
  if (!cuda_device_present(&why)) fail("run.device \"cuda\": no CUDA device (", why, "); valid: cpu");
  // On the current device: 0 unless the NCCL communicator, made first, chose
  // this rank's GPU (dist::world_for_device).
  return std::make_unique<CudaBackend>(p);
}

}  // namespace gpt
#endif  // GPT_HAVE_CUDA
