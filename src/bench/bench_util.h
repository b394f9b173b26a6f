// Internal to src/bench: the measuring helpers and the parts of gpt bench
// (bench.cpp runs the parts the options select).
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "config/config.h"

namespace gpt::bench_detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Best (shortest) time of f over repetitions: after `warmup` untimed calls,
// at least min_reps timed calls and more until min_seconds have passed. The
// best time is the least disturbed by other processes on a shared machine.
template <class F>
inline double best_seconds(F&& f, double min_seconds, int min_reps = 2, int warmup = 1) {
  for (int i = 0; i < warmup; ++i) f();
  double best = std::numeric_limits<double>::infinity(), total = 0;
  for (int reps = 0; reps < min_reps || total < min_seconds; ++reps) {
    const auto t0 = Clock::now();
    f();
    const double dt = seconds_since(t0);
    best = std::min(best, dt);
    total += dt;
  }
  return best;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f);
std::vector<int32_t> random_tokens(size_t n, int vocab, uint32_t seed);
// VmHWM (peak resident set) and VmRSS in MiB; -1 where /proc is unavailable.
double proc_status_mib(const char* key);
// Resets VmHWM to the current RSS ("5" to clear_refs, Linux >= 4.0).
bool reset_peak_rss();
// The memory mark a measured pass starts from, in MiB: on the device
// (cuda) the memory in use; on the CPU the resident set after returning
// freed heap to the system, with the peak reset to it when /proc allows
// (peak_reset; always true on the device, where the figure is exact).
struct MemoryMark {
  double before = 0;
  bool peak_reset = true;
};
MemoryMark memory_mark(bool cuda);
std::string load_average();  // /proc/loadavg's three figures, "n/a" without it

// The table every CPU part writes into: seconds, tokens/s, GFLOP/s and the
// ratio to the square GEMM's peak.
class Table {
 public:
  explicit Table(std::ostream& out, double* peak) : out_(out), peak_(peak) {}
  void header() {
    row("part", "case", "ms", "tokens/s", "GFLOP/s", "of peak", "");
    out_ << std::string(112, '-') << "\n";
  }
  // One measured row: seconds per call, tokens per call (0: not applicable),
  // FLOPs per call.
  void measured(const std::string& part, const std::string& what, double sec, double tokens, double flops,
                const std::string& note = "") {
    const double gflops = flops / sec / 1e9;
    row(part, what, fmt("%.2f", sec * 1e3), tokens > 0 ? fmt("%.0f", tokens / sec) : "-", fmt("%.1f", gflops),
        *peak_ > 0 ? fmt("%.0f%%", 100.0 * gflops / *peak_) : "-", note);
  }
  void row(const std::string& part, const std::string& what, const std::string& ms, const std::string& tok,
           const std::string& gf, const std::string& ratio, const std::string& note) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%-9s %-36s %10s %10s %9s %8s  %s", part.c_str(), what.c_str(), ms.c_str(),
                  tok.c_str(), gf.c_str(), ratio.c_str(), note.c_str());
    std::string s(buf);
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out_ << s << "\n" << std::flush;
  }
  static std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
  }

 private:
  std::ostream& out_;
  double* peak_;
};

inline bool selected(const BenchOptions& o, const std::string& part) {
  return std::find(o.parts.begin(), o.parts.end(), part) != o.parts.end();
}

// Weights that take part in matrix multiplies (bench_util.cpp).
double matmul_weights(const ModelConfig& m);
// One causal attention forward over B sequences of Tn tokens, all heads:
// q·k and the weighted sum of v, each 2·D FLOPs per (query, key) pair, over
// the Tn(Tn+1)/2 pairs of the causal triangle: 2·2·B·NH·D·Tn(Tn+1)/2.
inline double attention_forward_flops(double B, double Tn, double C) { return 2.0 * B * C * Tn * (Tn + 1); }

// Seconds of one square n×n×n float GEMM on the CPU (best of repeats).
double square_gemm_seconds(int n, double min_seconds);

// The parts (bench_model.cpp, bench_attention.cpp, bench_cuda.cpp).
void bench_gemm(const Config& cfg, const BenchOptions& opt, Table& t, double& peak);
// The training step and evaluation; note (may be empty) adds a remark per row.
void bench_model(const Config& cfg, const BenchOptions& opt, Table& t,
                 const std::function<std::string(double flops, double sec)>& note = {});
void bench_memory(const Config& cfg, const BenchOptions& opt, Table& t, bool cuda);
void bench_phases(const Config& cfg_in, const BenchOptions& opt, std::ostream& out);
void bench_attention(const Config& cfg, const BenchOptions& opt, std::ostream& out, double peak);
void bench_attention_context(const Config& cfg, const BenchOptions& opt, std::ostream& out);
void run_bench_cuda(const Config& cfg, const BenchOptions& opt, std::ostream& out);

}  // namespace gpt::bench_detail
