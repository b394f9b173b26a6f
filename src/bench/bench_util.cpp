// The measuring helpers of gpt bench (bench/bench_util.h).
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

std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<int32_t> random_tokens(size_t n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> u(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = u(rng);
  return v;
}

// ---- process memory (Linux /proc) -------------------------------------------
// VmHWM (peak resident set) and VmRSS in MiB; -1 where /proc is unavailable.
double proc_status_mib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) {
      std::istringstream s(line.substr(std::string(key).size() + 1));
      double kib = -1;
      s >> kib;
      return kib / 1024.0;
    }
  return -1;
}
// Resets VmHWM to the current RSS ("5" to clear_refs, Linux >= 4.0).
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

MemoryMark memory_mark(bool cuda) {
  constexpr double kMiB = 1024.0 * 1024.0;
  MemoryMark m;
  if (cuda) {
    m.before = static_cast<double>(cuda_memory_in_use()) / kMiB;
  } else {
    malloc_trim(0);
    m.peak_reset = reset_peak_rss();
    m.before = proc_status_mib("VmRSS:");
  }
  return m;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  if (!(f >> a >> b >> c)) return "n/a";
  return a + " " + b + " " + c;
}

// ---- table -----------------------------------------------------------------------

// Weights that take part in matrix multiplies: per block qkv (3C²), the
// attention projection (C²), the MLP (8C²), and the tied LM head (V·C).
// Biases, LayerNorms and the embedding lookup are not counted.
double matmul_weights(const ModelConfig& m) {
  // Per layer: the qkv projection (grouped with n_kv_head), the attention
  // output, the MLP's first layer (2F for swiglu) and its output (12C² for
  // GPT-2's block); and the LM head.
  const double C = m.n_embd, A = m.attn_width();
  const double per_layer = C * m.qkv_width() + A * C + C * m.mlp_in_width() + m.mlp_width() * C;
  return m.n_layer * per_layer + static_cast<double>(m.vocab_size) * C;
}

// ---- parts ------------------------------------------------------------------------

double square_gemm_seconds(int n, double min_seconds) {
  const auto a = random_floats(static_cast<size_t>(n) * n, 1), w = random_floats(static_cast<size_t>(n) * n, 2);
  std::vector<float> out(static_cast<size_t>(n) * n);
  return best_seconds([&] { cpu::matmul_forward<float>(out.data(), a.data(), w.data(), nullptr, n, n, n); },
                      min_seconds);
}

}  // namespace gpt::bench_detail
