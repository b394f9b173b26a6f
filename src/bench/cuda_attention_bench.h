// `gpt bench --only cuda-attention`: the fused CUDA attention kernels
// (kernels/cuda/attention.cu) per preset, forward and forward+backward, at
// long contexts with a fixed number of tokens per call (B·T), GPT-2 small's
// width: time, achieved TFLOP/s and the time relative to the softmax preset.
// Then cuDNN's fused causal softmax attention at the same shapes as a
// reference (bench/cudnn_attention.h; bf16, where our kernels run float32)
// and our softmax preset's time over cuDNN's, or a row saying why not.
// A benchmark, not a test: nothing here asserts a speed.
#pragma once
#include <ostream>
#include <string>
#include <vector>

namespace gpt {

struct CudaAttentionBenchOptions {
  std::vector<int> contexts = {1024, 2048, 4096, 8192, 16384};
  std::vector<std::string> presets;  // empty: every preset of kernels/attention_spec.h
  int tokens = 16384;                // B·T of every call (B = tokens / T, at least 1)
  int n_embd = 768;
  int n_head = 12;
  int trained_context = 1024;  // N of the presets' i-dependent scales
  double min_seconds = 0.2;    // each measurement repeats until this much GPU time has passed
};

// Writes the table to out. Throws gpt::Error when the build has no CUDA or
// no device is visible.
void run_cuda_attention_bench(const CudaAttentionBenchOptions& opt, std::ostream& out);

}  // namespace gpt
