// See cuda_attention_bench.h. Times are measured with CUDA events on the
// default stream: the best of repeated calls after one warm-up call.
#include "bench/cuda_attention_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "bench/cudnn_attention.h"
#include "config/attention.h"
#include "core/check.h"
#include "kernels/attention_spec.h"

#ifdef GPT_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/attention.h"
#endif

namespace gpt {

#ifndef GPT_HAVE_CUDA

void run_cuda_attention_bench(const CudaAttentionBenchOptions&, std::ostream&) {
  fail("bench cuda-attention: this build has no CUDA (nvcc was not found when it was configured)");
}

#else

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("bench cuda-attention: ", what, " failed: ", cudaGetErrorString(e));
}

// A device buffer of n floats, filled with uniform values in [-scale, scale].
class DeviceFloats {
 public:
  DeviceFloats(size_t n, uint32_t seed, float scale) {
    check_cuda(cudaMalloc(&p_, n * sizeof(float)), "cudaMalloc");
    if (scale == 0.f) {
      check_cuda(cudaMemset(p_, 0, n * sizeof(float)), "cudaMemset");
      return;
    }
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> h(n);
    for (float& x : h) x = u(rng);
    check_cuda(cudaMemcpy(p_, h.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  ~DeviceFloats() { cudaFree(p_); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* get() const { return p_; }

 private:
  float* p_ = nullptr;
};

// Best seconds of f (which enqueues work on the default stream) over
// repetitions: one warm-up call, then at least 3 timed calls and more until
// min_seconds have passed.
template <class F>
double best_gpu_seconds(F&& f, double min_seconds) {
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  f();
  check_cuda(cudaDeviceSynchronize(), "warm-up call");
  double best = std::numeric_limits<double>::infinity(), total = 0;
  for (int reps = 0; reps < 3 || total < min_seconds; ++reps) {
    check_cuda(cudaEventRecord(start), "cudaEventRecord");
    f();
    check_cuda(cudaEventRecord(stop), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "timed call");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    best = std::min(best, ms * 1e-3);
    total += ms * 1e-3;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

// cuDNN's fused causal softmax attention at the same shapes, and our softmax
// kernel's times over cuDNN's (bench/cudnn_attention.h). A failure is a row
// of the table ("cuDNN: ..."), never an abort of the bench.
void bench_cudnn_reference(const CudaAttentionBenchOptions& opt, const std::vector<double>& softmax_f,
                           const std::vector<double>& softmax_fb, std::ostream& out) {
  const int C = opt.n_embd, NH = opt.n_head, D = C / NH;
  out << "\nreference: cuDNN fused attention (sdpa), causal softmax, scale 1/sqrt(" << D
      << "), same B, T and heads; cuDNN runs bf16 Q, K, V, O (float32 statistics and accumulation) while our "
         "kernels run float32, so the ratios compare across precisions. \"ratio\": our softmax preset's time over "
         "cuDNN's (goal for the forward: at most 2).\n";
  if (!cudnn_sdpa_in_build()) {
    out << "cuDNN: " << cudnn_sdpa_description() << "\n";
    return;
  }
  out << cudnn_sdpa_description() << "\n";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-10s %6s %3s %10s %8s %12s %8s %10s %10s\n", "reference", "T", "B", "fwd ms",
                "TFLOP/s", "fwd+bwd ms", "TFLOP/s", "fwd ratio", "f+b ratio");
  out << buf << std::string(85, '-') << "\n" << std::flush;
  for (size_t ci = 0; ci < opt.contexts.size(); ++ci) {
    const int Tn = opt.contexts[ci], B = std::max(1, opt.tokens / Tn);
    if (C % NH != 0) {
      std::snprintf(buf, sizeof buf, "%-10s %6d %3d cuDNN: C=%d is not a multiple of %d heads\n", "cudnn-bf16", Tn, B,
                    C, NH);
      out << buf;
      continue;
    }
    const CudnnSdpaTimes t = time_cudnn_sdpa(B, Tn, NH, D, opt.min_seconds);
    if (!t.error.empty() || !(t.fwd_s > 0) || !(t.fwd_bwd_s > 0)) {
      out << "cudnn-bf16 " << Tn << " " << B << " cuDNN: " << (t.error.empty() ? "no time measured" : t.error) << "\n"
          << std::flush;
      continue;
    }
    const double flops = 2.0 * B * C * static_cast<double>(Tn) * (Tn + 1);
    char rf[32] = "-", rfb[32] = "-";
    if (softmax_f[ci] > 0) std::snprintf(rf, sizeof rf, "%.2f", softmax_f[ci] / t.fwd_s);
    if (softmax_fb[ci] > 0) std::snprintf(rfb, sizeof rfb, "%.2f", softmax_fb[ci] / t.fwd_bwd_s);
    std::snprintf(buf, sizeof buf, "%-10s %6d %3d %10.3f %8.2f %12.3f %8.2f %10s %10s\n", "cudnn-bf16", Tn, B,
                  t.fwd_s * 1e3, flops / t.fwd_s / 1e12, t.fwd_bwd_s * 1e3, 3 * flops / t.fwd_bwd_s / 1e12, rf, rfb);
    out << buf << std::flush;
  }
}

}  // namespace

void run_cuda_attention_bench(const CudaAttentionBenchOptions& opt, std::ostream& out) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  GPT_CHECK(e == cudaSuccess && devices > 0, "bench cuda-attention: no CUDA device (",
            e == cudaSuccess ? "none visible" : cudaGetErrorString(e), ")");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const int C = opt.n_embd, NH = opt.n_head;
  std::vector<std::string> names = opt.presets;
  if (names.empty())
    for (const AttentionPreset& p : kAttentionPresets) names.push_back(p.name);
  // softmax first: the other rows are relative to it.
  std::stable_partition(names.begin(), names.end(), [](const std::string& n) { return n == "softmax"; });

  out << "\nattention on " << prop.name << " (cuda kernels, float32), " << opt.tokens
      << " tokens per call (B = " << opt.tokens << "/T), " << NH << " heads, C=" << C
      << ", trained context N=" << opt.trained_context
      << "\nFLOPs: forward 2*B*C*T(T+1) (q.k and the weighted sum of v over the causal half); forward+backward "
         "3x that. \"x softmax\": time relative to the softmax preset at the same T. \"tc fwd\": the forward on "
         "tensor cores (cuda::attention_forward_tc: bf16 q, k, v and weights, float32 accumulation), \"fp32/tc\" "
         "the float32 forward's time over it (\"-\": the variant runs the float32 kernel there); \"tc f+b\" the "
         "forward and backward on tensor cores (cuda::attention_backward_tc, as bf16 training runs them), \"fp32/tc\" "
         "the float32 pair's time over it (\"-\": cuda::tensor_core_backward_fallback).\n";
  char buf[512];
  int width = 10;  // the name column holds the longest name
  for (const std::string& n : names) width = std::max(width, static_cast<int>(std::min<size_t>(n.size(), 40)));
  std::snprintf(buf, sizeof buf, "%-*s %6s %3s %10s %8s %12s %8s %10s %10s %8s %8s %10s %8s %8s\n", width, "preset",
                "T", "B", "fwd ms", "TFLOP/s", "fwd+bwd ms", "TFLOP/s", "x softmax", "tc fwd ms", "TFLOP/s", "fp32/tc",
                "tc f+b ms", "TFLOP/s", "fp32/tc");
  out << buf << std::string(122 + width, '-') << "\n" << std::flush;

  ModelConfig m;
  m.context = opt.trained_context;
  m.n_embd = C;
  m.n_head = NH;
  std::vector<double> softmax_f(opt.contexts.size(), 0.0), softmax_fb(opt.contexts.size(), 0.0);
  for (const std::string& name : names) {
    // PRESET, PRESET+BIAS (a position bias, as gpt bench --presets takes it)
    // or PRESET+differential (four kernel heads of D/2 per head: twice the
    // FLOPs, counted with the kernels' 2C).
    const AttentionSpec spec = resolve_attention(attention_variant(name, "bench --presets"), m);
    const int KC = spec.differential ? 2 * C : C, KNH = spec.differential ? attn::diff::kHeads * NH : NH;
    for (size_t ci = 0; ci < opt.contexts.size(); ++ci) {
      const int Tn = opt.contexts[ci], B = std::max(1, opt.tokens / Tn);
      const size_t n1 = static_cast<size_t>(B) * Tn * KC, TT = static_cast<size_t>(Tn) * Tn;
      DeviceFloats qkv(3 * n1, 11, 1.0f), dout(n1, 12, 0.01f), y(n1, 0, 0.f), dqkv(3 * n1, 0, 0.f),
          stats(static_cast<size_t>(B) * KNH * Tn * AttentionSpec::kStatsPerRow, 0, 0.f), scale(NH, 0, 0.f),
          dscale(NH, 0, 0.f), sink(NH, 0, 0.f), dsink(NH, 0, 0.f),  // the sink's ζ_h = 0
          kerple(2 * NH, 0, 0.f), dkerple(2 * NH, 0, 0.f),          // KERPLE's raw ρ = 0 (r = ln 2)
          fcum(static_cast<size_t>(B) * KNH * Tn, 0, 0.f), dfcum(static_cast<size_t>(B) * KNH * Tn, 0, 0.f),
          fire(spec.fire() ? KNH * TT : 1, 0, 0.f),
          dfire(spec.fire() ? B * KNH * TT : 1, 0, 0.f);  // FIRE's table (zeros: same cost)
      {                                                   // the forget gate's c: every f = 0.9
        std::vector<float> c(static_cast<size_t>(B) * KNH * Tn);
        for (size_t k = 0; k < c.size(); ++k) c[k] = static_cast<float>(std::log(0.9) * (k % Tn + 1));
        check_cuda(cudaMemcpy(fcum.get(), c.data(), c.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
      }
      const std::vector<float> s_h(NH, static_cast<float>(attn::ssmax_init(opt.trained_context)));
      check_cuda(cudaMemcpy(scale.get(), s_h.data(), NH * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
      const HeadParams<float> head(scale.get(), sink.get(), kerple.get(), fcum.get(), fire.get());
      auto fwd = [&] {
        cuda::attention_forward(y.get(), stats.get(), qkv.get(), B, Tn, KC, KNH, spec, head, nullptr, nullptr);
      };
      auto fb = [&] {
        fwd();
        cuda::attention_backward(dqkv.get(), {dscale.get(), dsink.get(), dkerple.get(), dfcum.get(), dfire.get()},
                                 dout.get(), y.get(), stats.get(), qkv.get(), B, Tn, KC, KNH, spec, head, nullptr);
      };
      const double f_sec = best_gpu_seconds(fwd, opt.min_seconds), fb_sec = best_gpu_seconds(fb, opt.min_seconds);
      const double flops = 2.0 * B * KC * static_cast<double>(Tn) * (Tn + 1);
      char tc[3][32] = {"-", "-", "-"};
      if (!cuda::tensor_core_fallback(spec, KC / KNH)) {
        const double tc_sec = best_gpu_seconds(
            [&] {
              cuda::attention_forward_tc(y.get(), stats.get(), qkv.get(), B, Tn, KC, KNH, spec, head, nullptr,
                                         nullptr);
            },
            opt.min_seconds);
        std::snprintf(tc[0], sizeof tc[0], "%.3f", tc_sec * 1e3);
        std::snprintf(tc[1], sizeof tc[1], "%.2f", flops / tc_sec / 1e12);
        std::snprintf(tc[2], sizeof tc[2], "%.2f", f_sec / tc_sec);
      }
      char tcb[3][32] = {"-", "-", "-"};
      if (!cuda::tensor_core_fallback(spec, KC / KNH) && !cuda::tensor_core_backward_fallback(spec, KC / KNH)) {
        const double tcb_sec = best_gpu_seconds(
            [&] {
              cuda::attention_forward_tc(y.get(), stats.get(), qkv.get(), B, Tn, KC, KNH, spec, head, nullptr,
                                         nullptr);
              cuda::attention_backward_tc(dqkv.get(),
                                          {dscale.get(), dsink.get(), dkerple.get(), dfcum.get(), dfire.get()},
                                          dout.get(), y.get(), stats.get(), qkv.get(), B, Tn, KC, KNH, spec, head,
                                          nullptr);
            },
            opt.min_seconds);
        std::snprintf(tcb[0], sizeof tcb[0], "%.3f", tcb_sec * 1e3);
        std::snprintf(tcb[1], sizeof tcb[1], "%.2f", 3 * flops / tcb_sec / 1e12);
        std::snprintf(tcb[2], sizeof tcb[2], "%.2f", fb_sec / tcb_sec);
      }
      if (name == "softmax") {
        softmax_f[ci] = f_sec;
        softmax_fb[ci] = fb_sec;
      }
      char ratio[32] = "-";
      if (softmax_fb[ci] > 0) std::snprintf(ratio, sizeof ratio, "%.2f", fb_sec / softmax_fb[ci]);
      std::snprintf(buf, sizeof buf, "%-*s %6d %3d %10.3f %8.2f %12.3f %8.2f %10s %10s %8s %8s %10s %8s %8s\n", width,
                    name.c_str(), Tn, B, f_sec * 1e3, flops / f_sec / 1e12, fb_sec * 1e3, 3 * flops / fb_sec / 1e12,
                    ratio, tc[0], tc[1], tc[2], tcb[0], tcb[1], tcb[2]);
      out << buf << std::flush;
    }
  }
  bench_cudnn_reference(opt, softmax_f, softmax_fb, out);
}

#endif  // GPT_HAVE_CUDA

}  // namespace gpt
