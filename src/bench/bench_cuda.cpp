// gpt bench on the CUDA backend: the GEMM peak of each precision, the
// training step and evaluation with their MFU.
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
#include "bench/cuda_attention_bench.h"
#include "config/attention.h"
#include "core/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include "model/gpt.h"
#include "train/checkpoint.h"
#include "train/model_io.h"
#include "train/optimizer.h"

namespace gpt::bench_detail {

// ---- cuda ----------------------------------------------------------------------------
// Square n^3 GEMM through the backend (device buffers), best of repeats.
double backend_square_gemm_seconds(Backend<float>& be, int n, double min_seconds) {
  const size_t nn = static_cast<size_t>(n) * n;
  Buffer<float> a(be, nn), w(be, nn), out(be, nn);
  const auto ha = random_floats(nn, 1), hw = random_floats(nn, 2);
  be.upload(a.get(), ha.data(), nn);
  be.upload(w.get(), hw.data(), nn);
  return best_seconds(
      [&] {
        be.matmul_forward(out.get(), a.get(), w.get(), nullptr, n, n, n);
        be.synchronize();
      },
      min_seconds, 3);
}

void run_bench_cuda(const Config& cfg, const BenchOptions& opt, std::ostream& out) {
  const ModelConfig& m = cfg.model;
  // A clear error without a device or with an unknown precision.
  std::unique_ptr<Backend<float>> probe = make_backend("cuda", opt.precision);
  const std::string name = cuda_device_name();
#ifdef GPT_CUDA_EMULATOR
  out << "note: this gpt is built against the CUDA emulator (GPT_CUDA_EMULATOR): the kernels run on the CPU, "
         "so the times below say nothing about a GPU\n";
#endif
  const std::string& precision = opt.precision;
  // bf16 storage multiplies bf16 operands in every precision.
  const bool bf16_gemms = precision == "bf16" || cfg.run.storage == "bf16";
  const char* peak_name = bf16_gemms ? "bf16" : precision == "tf32" ? "TF32" : "float32";
  const GpuPeak* known = cuda_peak(name);
  double peak = 0, bf16 = 0;  // TFLOP/s; bf16: the bf16 peak for the extra column (float32 and TF32 runs)
  std::string peak_src;
  if (opt.peak_tflops > 0) {
    peak = opt.peak_tflops;
    peak_src = "--peak-tflops";
  } else if (known) {
    peak = bf16_gemms ? known->bf16 : precision == "tf32" ? known->tf32 : known->fp32;
    if (!bf16_gemms) bf16 = known->bf16;
    peak_src = std::string("data sheet of ") + known->match;
  }
  out << "gpt bench --device cuda " << (opt.config_name.empty() ? "(defaults)" : opt.config_name) << ": " << m.n_layer
      << " layers, " << m.n_head << " heads, C=" << m.n_embd << ", V=" << m.vocab_size << ", T=" << m.context
      << ", B=" << cfg.train.batch_size << " (" << cfg.train.batch_size * m.context << " tokens/step), " << m.position
      << " positions, attention " << cfg.attention.preset << "\n";
  out << "device " << name << ", backend " << probe->name() << ", run.precision " << precision << ": ";
  const std::string storage = "storage float32 (parameters, activations, gradients, AdamW state)";
  if (cfg.run.storage == "bf16")
    out << "run.storage bf16: activations and working parameters bf16; the GEMMs read them as stored (bf16 "
           "operands, float32 accumulation, whatever run.precision) where C and OC are multiples of 8; the other "
           "ops widen their operands to float32 scratch in chunks of 16 MiB per operand; float32 master parameters, "
           "gradients, "
           "AdamW state\n";
  else if (bf16_gemms)
    out << "GEMM operands bf16 (rounded to bf16 before each GEMM), float32 accumulation and output; " << storage
        << "; attention, LayerNorm and the other ops compute in float32\n";
  else
    out << "GEMMs " << (precision == "tf32" ? "with TF32 tensor cores" : "in strict float32") << "; " << storage
        << "\n";
  if (peak > 0)
    out << "MFU against the " << (opt.peak_tflops > 0 ? "given" : peak_name) << " dense peak "
        << Table::fmt("%.1f", peak) << " TFLOP/s (" << peak_src << ")"
        << (bf16 > 0 ? "; the last column is against the bf16 dense peak " + Table::fmt("%.0f", bf16) + " TFLOP/s" : "")
        << "\n";
  else
    out << "MFU: no peak known for \"" << name << "\" (give --peak-tflops)\n";
  out << "FLOPs: matmul weights N = L*(C*(qkv + C + fc) + F*C) + V*C (12*L*C^2 + V*C for GPT-2's block) = "
      << Table::fmt("%.2f", matmul_weights(m) / 1e6)
      << "M; per token 2N forward, 6N training; plus attention 2*B*C*T(T+1) per layer forward, 2x that "
         "backward. Times: best of repeated runs, synchronised.\n\n";
  probe.reset();

  double peak_gflops = peak * 1e3;
  Table t(out, &peak_gflops);
  t.header();
  auto note = [&](double flops, double sec) {
    return bf16 > 0 ? "of bf16 peak " + Table::fmt("%.1f%%", 100.0 * flops / sec / 1e12 / bf16) : std::string();
  };
  if (selected(opt, "gemm")) {
    std::unique_ptr<Backend<float>> be = make_backend("cuda", opt.precision);
    const double n = opt.square, sec = backend_square_gemm_seconds(*be, opt.square, opt.min_seconds);
    t.measured("gemm", "square " + std::to_string(opt.square) + "^3", sec, 0, 2 * n * n * n, note(2 * n * n * n, sec));
  }
  if (selected(opt, "train") || selected(opt, "eval")) {
    BenchOptions on_gpu = opt;
    on_gpu.device = "cuda";  // precision: opt.precision
    bench_model(cfg, on_gpu, t, note);
  }
  if (selected(opt, "memory")) bench_memory(cfg, opt, t, true);
  if (selected(opt, "attention")) t.row("attention", "(cpu only)", "", "", "", "", "skipped on cuda");
  out << "(GFLOP/s above; \"of peak\" is the MFU)\n";
}

}  // namespace gpt::bench_detail
