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
      case cuda::GemmPrecision::Tf32:
        return "cuda (tf32 GEMMs)";
      case cuda::GemmPrecision::Bf16:
        return "cuda (bf16 GEMM operands; attention on tensor cores)";
      case cuda::GemmPrecision::Fp32:
        break;
    }
    return "cuda";
  }
  void synchronize() override { GPT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  bool tensor_core_inference() const { return matmul_.precision() == cuda::GemmPrecision::Bf16; }
  // Whether training runs attention on tensor cores in both directions (with
  // bf16 GEMM operands): where both tensor-core kernels take the spec.
  static bool tensor_core_training(const AttentionSpec& spec, int D) {
    return !cuda::tensor_core_fallback(spec, D) && !cuda::tensor_core_backward_fallback(spec, D);
  }

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

  // The plain ops (GPT_BACKEND_PLAIN_OPS), to the kernels on the stream.
  using T = float;
  using Acc = float;
#define GPT_WITH_STREAM(...) (__VA_ARGS__, stream_)
#define GPT_CUDA_OP(name, params, args) \
  void name params override { cuda::name GPT_WITH_STREAM args; }
  GPT_BACKEND_PLAIN_OPS(GPT_CUDA_OP)
#undef GPT_CUDA_OP
#undef GPT_WITH_STREAM

  void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int Tn, int C,
                       int /*V*/) override {
    cuda::encoder_forward(out, tokens, wte, wpe, B, Tn, C, stream_);
  }
  void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int C, int OC) override {
    matmul_.forward(out, inp, w, bias, N, C, OC, stream_);
  }
  void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w, int N,
                       int C, int OC) override {
    matmul_.backward(dinp, dw, dbias, dout, inp, w, N, C, OC, stream_);
  }
  // bf16 operands straight into cuBLASLt when every row is a multiple of 16
  // bytes (C and OC multiples of 8), which its bf16 tensor-core kernels want;
  // other shapes go the adapter's widening way.
  bool encoder_forward_bf16(float* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B, int Tn, int C,
                            int /*V*/) override {
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
  // LayerNorm, GELU, the residual adds and the classifier on bf16 as stored
  // (GPT_BACKEND_NATIVE_BF16_OPS; kernels/cuda/storage.cuh).
#define GPT_CUDA_NATIVE_BF16(name, params, args) \
  bool name##_bf16 params override {             \
    cuda::name GPT_WITH_STREAM args;             \
    return true;                                 \
  }
#define GPT_WITH_STREAM(...) (__VA_ARGS__, stream_)
  GPT_BACKEND_NATIVE_BF16_OPS(GPT_CUDA_NATIVE_BF16)
#undef GPT_WITH_STREAM
#undef GPT_CUDA_NATIVE_BF16
  double sum_squares(const float* x, size_t n) override {
    cuda::sum_squares_partials(sum_partials_, x, n, stream_);
    std::vector<double> partial(cuda::kSumSquaresBlocks);
    GPT_CUDA_CHECK(cudaMemcpy(partial.data(), sum_partials_, partial.size() * sizeof(double), cudaMemcpyDeviceToHost));
    double total = 0.0;
    for (double p : partial) total += p;
    return total;
  }
  void scale_inplace(float* x, float s, size_t n) override { cuda::scale_inplace(x, s, n, stream_); }
  // diag (host doubles, NH × kAttentionDiagStats) combined (add_attention_diag)
  // with what the kernel adds to a zeroed device copy.
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
    // bf16 GEMM operands: the forward on tensor cores (bf16 q, k, v and
    // weights) in inference, and in training where the backward runs on
    // tensor cores too (tensor_core_training): the backward recomputes the
    // weights from the forward's statistics, so both must score the same
    // bf16-rounded q·k. Elsewhere training keeps the float32 pair.
    if (tensor_core_inference() && (!stats || tensor_core_training(spec, C / NH)))
      cuda::attention_forward_tc(out, stats, qkv, B, Tn, C, NH, spec, head_scale, ddiag, stream_, qkv_far);
    else
      cuda::attention_forward(out, stats, qkv, B, Tn, C, NH, spec, head_scale, ddiag, stream_, qkv_far);
    if (diag) {
      std::vector<double> host(ndiag);
      GPT_CUDA_CHECK(cudaMemcpy(host.data(), ddiag, ndiag * sizeof(double), cudaMemcpyDeviceToHost));
      for (int h = 0; h < NH; ++h) add_attention_diag(diag + h * kAttentionDiagStats, host.data() + h * kAttentionDiagStats);
    }
  }
  void attention_backward(float* dqkv, const HeadGrads<float>& dhead_scale, const float* dout, const float* out,
                          const float* stats, const float* qkv, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                          const HeadParams<float>& head_scale, float* dqkv_far, const float* qkv_far) override {
    if (tensor_core_inference() && tensor_core_training(spec, C / NH))
      cuda::attention_backward_tc(dqkv, dhead_scale, dout, out, stats, qkv, B, Tn, C, NH, spec, head_scale, stream_,
                                  dqkv_far, qkv_far);
    else
      cuda::attention_backward(dqkv, dhead_scale, dout, out, stats, qkv, B, Tn, C, NH, spec, head_scale, stream_,
                               dqkv_far, qkv_far);
  }
  void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, double lr, double beta1,
                    double beta2, double eps, double weight_decay, long t) override {
    cuda::adamw_update(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t, stream_);
  }
  void muon_momentum(float* grad, float* m, size_t n, double beta) override {
    cuda::muon_momentum(grad, m, n, beta, stream_);
  }
  void newton_schulz(float* x, int rows, int cols, int steps, float* work) override {
    cuda::newton_schulz(matmul_, x, rows, cols, steps, work, sum_partials_, stream_);
  }
  void muon_apply(float* param, const float* update, size_t n, double lr, double scale, double weight_decay) override {
    cuda::muon_apply(param, update, n, lr, scale, weight_decay, stream_);
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
  if (precision == "tf32")
    p = cuda::GemmPrecision::Tf32;
  else if (precision == "bf16")
    p = cuda::GemmPrecision::Bf16;
  else
    GPT_CHECK(precision == "fp32", "run.precision \"", precision, "\" is not a precision; valid: fp32, tf32, bf16");
  std::string why;
  if (!cuda_device_present(&why)) fail("run.device \"cuda\": no CUDA device (", why, "); valid: cpu");
  // On the current device: 0 unless the NCCL communicator, made first, chose
  // this rank's GPU (dist::world_for_device).
  return std::make_unique<CudaBackend>(p);
}

}  // namespace gpt
#endif  // GPT_HAVE_CUDA
