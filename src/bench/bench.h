// `gpt bench`: how close training and evaluation come to the machine's
// float32 matrix-multiply peak. One run measures
//   gemm       the GEMM the trainer uses, at the trainer's linear-layer
//              shapes (forward and backward) and at a large square size;
//              the best of these is "peak";
//   train      a full training step (forward, backward, clip, AdamW); with
//              doc_len, also the step under a document mask of documents
//              of doc_len tokens (masked key tiles skipped) and the ratio;
//   eval       forward-only evaluation (per-position losses) of the same batch;
//   attention  each attention preset's forward, and forward+backward, at T = 256…4096;
//   memory     peak RSS of evaluating one sequence of 1×, 4×, 16× the context;
//   phases     (only when asked for) peak RSS of each phase of a run: model
//              and AdamW, two training steps, checkpoint save and load,
//              evaluation at each memory multiple, for fp32 and bf16 storage,
//              each beside its floor (CPU only);
//   cuda-attention (only when asked for) the CUDA attention kernels per
//              preset at T = 1K…16K (bench/cuda_attention_bench.h);
// and prints time, tokens/s, GFLOP/s and the ratio to peak. A benchmark, not
// a test: nothing here asserts a speed.
//
// With device "cuda" the parts are gemm (a square GEMM through the backend),
// train and eval, run on the CUDA backend with the GEMM precision
// opt.precision (run.precision: fp32, tf32 or bf16 operands) and the
// config's run.storage (fp32 or bf16); the ratio is the MFU against the GPU's data-sheet
// dense peak (cuda_peak) of that precision: float32, TF32 or bf16, with the
// bf16 peak beside it for the float32 and TF32 modes.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "config/config.h"

namespace gpt {

struct BenchOptions {
  std::vector<std::string> parts = {"gemm", "train", "eval", "attention", "memory"};
  std::vector<int> attention_contexts = {256, 512, 1024, 2048, 4096};
  std::vector<std::string> presets;  // empty: every preset of kernels/attention_spec.h
  std::vector<int> memory_multiples = {1, 4, 16};
  int square = 2048;               // size of the square GEMM
  int steps = 3;                   // timed training steps (after one warm-up step)
  int doc_len = 0;                 // train: also the step under a document mask of documents of N tokens
  double min_seconds = 0.5;        // each other measurement repeats until this much time has passed
  std::string config_name;         // shown in the header
  std::string device = "cpu";      // cpu or cuda
  std::string precision = "fp32";  // run.precision of the backend: fp32; cuda also tf32, bf16
  double peak_tflops = 0;          // cuda: override of the peak table (TFLOP/s); 0 = by device name
  std::string cost_gpu = "h100";   // attention-cost: the GPU of the cost model (h100, h200)
  // Whether --contexts / --min-seconds were given: then they also set the
  // cuda-attention part's (whose defaults are T = 1K-16K and 0.2 s).
  bool contexts_given = false, min_seconds_given = false;
};

// Dense data-sheet peaks of a GPU, TFLOP/s (no sparsity).
struct GpuPeak {
  const char* match;  // substring of the device name
  double bf16, tf32, fp32;
};
// The entry whose `match` the device name contains, or null.
const GpuPeak* cuda_peak(const std::string& device_name);

// Valid part names, for the CLI's check.
const std::vector<std::string>& bench_parts();

// Runs the selected parts for cfg (model, train.batch_size, attention
// preset for train/eval) with the current OpenMP thread count and writes the
// table to out.
void run_bench(const Config& cfg, const BenchOptions& opt, std::ostream& out);

// gpt bench --hf HF_DIR (bench_hf.cpp): reading, loading and evaluating a
// Hugging Face model directory; --contexts sets the evaluated lengths.
void run_bench_hf(const std::string& dir, const BenchOptions& opt, std::ostream& out);

}  // namespace gpt
