#include "bench/bench.h"
#include "bench/bench_util.h"

#include <malloc.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <sstream>

#include "backend/backend.h"
#include "bench/attention_cost.h"
#include "bench/step_cost.h"
#include "bench/cuda_attention_bench.h"
#include "config/attention.h"
#include "core/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include "model/gpt.h"
#include "train/checkpoint.h"
#include "train/model_io.h"
#include "train/optimizer.h"

namespace gpt {

using namespace bench_detail;

const GpuPeak* cuda_peak(const std::string& device_name) {
  // NVIDIA data sheets, dense (without sparsity); more specific names first.
  static const GpuPeak table[] = {
      {"H200 NVL", 835.0, 417.5, 60.0}, {"H200", 989.4, 494.7, 66.9}, {"H100 PCIe", 756.5, 378.0, 51.2},
      {"H100 NVL", 835.0, 417.5, 60.0}, {"H100", 989.4, 494.7, 66.9}, {"A100", 312.0, 156.0, 19.5},
      {"L40S", 362.1, 183.0, 91.6},
  };
  for (const GpuPeak& p : table)
    if (device_name.find(p.match) != std::string::npos) return &p;
  return nullptr;
}

const std::vector<std::string>& bench_parts() {
  static const std::vector<std::string> parts = {"gemm",   "train",  "eval",           "attention",
                                                 "memory", "phases", "cuda-attention", "attention-cost",
                                                 "step-cost"};
  return parts;
}

namespace {
CudaAttentionBenchOptions cuda_attention_options(const BenchOptions& opt) {
  CudaAttentionBenchOptions c;
  c.presets = opt.presets;
  if (opt.contexts_given) c.contexts = opt.attention_contexts;
  if (opt.min_seconds_given) c.min_seconds = opt.min_seconds;
  return c;
}
}  // namespace

void run_bench(const Config& cfg, const BenchOptions& opt, std::ostream& out) {
  for (const std::string& p : opt.parts)
    GPT_CHECK(std::find(bench_parts().begin(), bench_parts().end(), p) != bench_parts().end(), "bench: unknown part \"",
              p, "\"; valid: gemm, train, eval, attention, memory, phases, cuda-attention, attention-cost, step-cost");
  GPT_CHECK(opt.device == "cpu" || opt.device == "cuda", "bench --device: \"", opt.device, "\"; valid: cpu, cuda");
  // The cost model needs no device and times nothing.
  if (selected(opt, "attention-cost")) {
    run_attention_cost(cuda_attention_options(opt), opt.cost_gpu, out);
    if (opt.parts.size() == 1) return;
  }
  if (selected(opt, "step-cost")) {
    run_step_cost(cfg, opt.cost_gpu, out);
    if (opt.parts.size() == 1 || (opt.parts.size() == 2 && selected(opt, "attention-cost"))) return;
  }
  if (opt.device == "cuda") {
    // On the GPU, "attention" means the fused CUDA kernels too.
    run_bench_cuda(cfg, opt, out);
    if (selected(opt, "phases")) bench_phases(cfg, opt, out);
    if (selected(opt, "attention") || selected(opt, "cuda-attention"))
      run_cuda_attention_bench(cuda_attention_options(opt), out);
    return;
  }
  make_backend("cpu", opt.precision);  // the cpu computes in float32 only: a clear error for tf32 / bf16
  const ModelConfig& m = cfg.model;
  const auto start = Clock::now();
  const std::time_t now = std::time(nullptr);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  out << "gpt bench " << (opt.config_name.empty() ? "(defaults)" : opt.config_name) << ": " << m.n_layer << " layers, "
      << m.n_head << " heads, C=" << m.n_embd << ", V=" << m.vocab_size << ", T=" << m.context
      << ", B=" << cfg.train.batch_size << " (" << cfg.train.batch_size * m.context << " tokens/step), " << m.position
      << " positions, attention " << cfg.attention.preset << "\n";
  out << "threads " << omp_get_max_threads() << " of " << omp_get_num_procs() << " processors, GEMM kernel "
      << cpu::gemm_kernel_name(cpu::gemm_kernel()) << ", " << when << ", load average " << load_average()
      << " at start\n";
  if (cfg.run.storage == "bf16")
    out << "run.storage bf16: activations and working parameters bf16; the linear layers and the embedding read "
           "them as stored, the other ops widen their operands to float32 scratch in chunks of 16 MiB per operand; "
           "float32 master parameters, gradients and AdamW state\n";
  out << "FLOPs: matmul weights N = L*(C*(qkv + C + fc) + F*C) + V*C (12*L*C^2 + V*C for GPT-2's block) = "
      << Table::fmt("%.2f", matmul_weights(m) / 1e6)
      << "M; per token 2N forward, 6N training; plus attention 2*B*C*T(T+1) per layer forward, 2x that "
         "backward. Times: best of repeated runs.\n\n";

  double peak = 0;
  Table t(out, &peak);
  t.header();
  if (selected(opt, "gemm")) {
    bench_gemm(cfg, opt, t, peak);
  } else if (opt.parts != std::vector<std::string>{"cuda-attention"}) {
    // The ratios need a peak: the square GEMM alone.
    const double n = opt.square;
    peak = 2 * n * n * n / square_gemm_seconds(opt.square, opt.min_seconds) / 1e9;
    t.row("peak", "square " + std::to_string(opt.square) + "^3 GEMM", "", "", Table::fmt("%.1f", peak), "100%", "");
  }
  if (selected(opt, "train") || selected(opt, "eval")) bench_model(cfg, opt, t);
  if (selected(opt, "memory")) bench_memory(cfg, opt, t, false);
  if (selected(opt, "phases")) bench_phases(cfg, opt, out);
  if (selected(opt, "attention")) {
    bench_attention(cfg, opt, out, peak);
    if (context_summary(resolve_attention(cfg)) != "none") bench_attention_context(cfg, opt, out);
  }
  if (selected(opt, "cuda-attention")) run_cuda_attention_bench(cuda_attention_options(opt), out);
  out << "\ntotal " << Table::fmt("%.2f", seconds_since(start)) << " s, load average " << load_average() << " at end\n";
}

}  // namespace gpt
