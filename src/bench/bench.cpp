#include "bench/bench.h"

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

namespace gpt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Best (shortest) time of f over repetitions: after `warmup` untimed calls,
// at least min_reps timed calls and more until min_seconds have passed. The
// best time is the least disturbed by other processes on a shared machine.
template <class F>
double best_seconds(F&& f, double min_seconds, int min_reps = 2, int warmup = 1) {
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

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
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

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  if (!(f >> a >> b >> c)) return "n/a";
  return a + " " + b + " " + c;
}

// ---- table -----------------------------------------------------------------------
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

bool selected(const BenchOptions& o, const std::string& part) {
  return std::find(o.parts.begin(), o.parts.end(), part) != o.parts.end();
}

// Weights that take part in matrix multiplies: per block qkv (3C²), the
// attention projection (C²), the MLP (8C²), and the tied LM head (V·C).
// Biases, LayerNorms and the embedding lookup are not counted.
double matmul_weights(const ModelConfig& m) {
  const double C = m.n_embd;
  return 12.0 * m.n_layer * C * C + static_cast<double>(m.vocab_size) * C;
}

// One causal attention forward over B sequences of Tn tokens, all heads:
// q·k and the weighted sum of v, each 2·D FLOPs per (query, key) pair, over
// the Tn(Tn+1)/2 pairs of the causal triangle: 2·2·B·NH·D·Tn(Tn+1)/2.
double attention_forward_flops(double B, double Tn, double C) { return 2.0 * B * C * Tn * (Tn + 1); }

// ---- parts ------------------------------------------------------------------------

double square_gemm_seconds(int n, double min_seconds) {
  const auto a = random_floats(static_cast<size_t>(n) * n, 1), w = random_floats(static_cast<size_t>(n) * n, 2);
  std::vector<float> out(static_cast<size_t>(n) * n);
  return best_seconds([&] { cpu::matmul_forward<float>(out.data(), a.data(), w.data(), nullptr, n, n, n); }, min_seconds);
}

void bench_gemm(const Config& cfg, const BenchOptions& opt, Table& t, double& peak) {
  const ModelConfig& m = cfg.model;
  const int N = cfg.train.batch_size * m.context, C = m.n_embd, Vp = m.padded_vocab();
  struct Shape {
    const char* name;
    int in, out;
  };
  const Shape shapes[] = {{"qkv", C, 3 * C}, {"attproj", C, C}, {"fc", C, 4 * C}, {"fcproj", 4 * C, C},
                          {"lm head", C, Vp}};
  struct Row {
    std::string what;
    double sec, flops;
  };
  std::vector<Row> rows;
  const double sq = square_gemm_seconds(opt.square, opt.min_seconds);
  const double n = opt.square;
  rows.push_back({"square " + std::to_string(opt.square) + "^3", sq, 2 * n * n * n});
  for (const Shape& s : shapes) {
    const auto x = random_floats(static_cast<size_t>(N) * s.in, 3), w = random_floats(size_t(s.out) * s.in, 4),
               b = random_floats(s.out, 5), dy = random_floats(static_cast<size_t>(N) * s.out, 6);
    std::vector<float> y(static_cast<size_t>(N) * s.out), dx(x.size()), dw(w.size()), db(b.size());
    const double f = 2.0 * N * s.in * s.out;
    const std::string dims = std::to_string(N) + "x" + std::to_string(s.in) + "->" + std::to_string(s.out);
    rows.push_back({std::string(s.name) + " fwd " + dims,
                    best_seconds([&] { cpu::matmul_forward(y.data(), x.data(), w.data(), b.data(), N, s.in, s.out); },
                                 opt.min_seconds),
                    f});
    rows.push_back({std::string(s.name) + " bwd " + dims,
                    best_seconds([&] {
                      cpu::matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, s.in,
                                           s.out);
                    }, opt.min_seconds),
                    2 * f});
  }
  for (const Row& r : rows) peak = std::max(peak, r.flops / r.sec / 1e9);
  for (const Row& r : rows) t.measured("gemm", r.what, r.sec, 0, r.flops);
  t.row("peak", "best GEMM above", "", "", Table::fmt("%.1f", peak), "100%", "");
}

struct ModelBench {
  std::unique_ptr<Model<float>> model;
  ModelBench(const Config& cfg, const AttentionSpec& attn, const std::string& device = "cpu",
             const std::string& precision = "fp32") {
    model = make_model(cfg.model, attn, device, precision, cfg.run.storage);
    model->init(cfg.train.seed);
  }
};

// Training step and evaluation pass on opt.device; `note` (optional) adds a
// remark per row (the CUDA bench: the share of the bf16 peak).
void bench_model(const Config& cfg, const BenchOptions& opt, Table& t,
                 const std::function<std::string(double flops, double sec)>& note = {}) {
  auto remark = [&](double flops, double sec) { return note ? note(flops, sec) : std::string(); };
  const ModelConfig& m = cfg.model;
  const int B = cfg.train.batch_size, Tn = m.context;
  const double tokens = static_cast<double>(B) * Tn, W = matmul_weights(m);
  const double attn = m.n_layer * attention_forward_flops(B, Tn, m.n_embd);
  ModelBench mb(cfg, resolve_attention(cfg), opt.device, opt.precision);
  Model<float>& model = *mb.model;
  const auto inputs = random_tokens(static_cast<size_t>(tokens), m.vocab_size, 7),
             targets = random_tokens(static_cast<size_t>(tokens), m.vocab_size, 8);
  const std::string shape = "B=" + std::to_string(B) + " T=" + std::to_string(Tn);
  if (selected(opt, "train")) {
    AdamW<float> adamw(model, cfg.train);
    auto step = [&] {
      model.zero_grad();
      model.forward(inputs.data(), targets.data(), B, Tn);
      model.backward();
      adamw.clip(cfg.train.grad_clip);
      adamw.step(cfg.train.lr);
      model.backend().synchronize();  // asynchronous backends: the step is done when its ops are
    };
    const double sec = best_seconds(step, 0.0, opt.steps), flops = 6 * W * tokens + 3 * attn;
    t.measured("train", "step fwd+bwd+AdamW " + shape, sec, tokens, flops, remark(flops, sec));
  }
  if (selected(opt, "eval")) {
    std::vector<float> losses;
    const double sec = best_seconds([&] { model.forward_losses(inputs.data(), targets.data(), B, Tn, losses); },
                                    opt.min_seconds, 3);
    const double flops = 2 * W * tokens + attn;
    t.measured("eval", "forward losses " + shape, sec, tokens, flops, remark(flops, sec));
  }
}

// Inference at each memory multiple: one sequence of mult·T tokens. On the
// CPU the process's peak RSS during the pass; on the GPU the device memory
// the pass adds (the inference activations stay allocated afterwards, so
// the difference after it is what it needed). Either way per token: the same
// KiB/token at every multiple means no T×T buffer.
void bench_memory(const Config& cfg, const BenchOptions& opt, Table& t, bool cuda) {
  // CPU: free heap pages left resident by earlier parts would be reused
  // without raising the RSS and hide buffers from the peak: from here on
  // every allocation past 256 KiB gets its own mapping, and before each pass
  // malloc_trim hands the heap's free pages back to the system. (Set here,
  // not for the whole run: the timed parts should allocate as training does.)
  if (!cuda) mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  const ModelConfig& m = cfg.model;
  const double W = matmul_weights(m), MiB = 1024.0 * 1024.0;
  for (int mult : opt.memory_multiples) {
    const int L = mult * m.context;
    const std::string what = "eval " + std::to_string(mult) + "x: 1 sequence of " + std::to_string(L);
    if (m.position == "learned" && L > m.position_rows()) {
      t.row("memory", what, "", "", "", "", "skipped: learned positions end at " + std::to_string(m.position_rows()));
      continue;
    }
    ModelBench mb(cfg, resolve_attention(cfg), cuda ? "cuda" : "cpu", cuda ? opt.precision : "fp32");
    const auto inputs = random_tokens(L, m.vocab_size, 9), targets = random_tokens(L, m.vocab_size, 10);
    std::vector<float> losses;
    losses.reserve(L);
    bool reset = false;
    double before = 0;
    if (cuda) {
      before = static_cast<double>(cuda_memory_in_use()) / MiB;
    } else {
      malloc_trim(0);
      reset = reset_peak_rss();
      before = proc_status_mib("VmRSS:");
    }
    const auto t0 = Clock::now();
    mb.model->forward_losses(inputs.data(), targets.data(), 1, L, losses);  // downloads the losses: synchronised
    const double sec = seconds_since(t0);
    std::string note;
    if (cuda) {
      const double after = static_cast<double>(cuda_memory_in_use()) / MiB;
      note = "device memory +" + Table::fmt("%.1f", after - before) + " MiB for the pass (" +
             Table::fmt("%.1f", (after - before) * 1024 / L) + " KiB/token), " + Table::fmt("%.2f", after / 1024) +
             " GiB in use";
    } else {
      const double peak = proc_status_mib("VmHWM:");
      note = "peak RSS " + Table::fmt("%.1f", peak) + " MiB";
      if (reset)
        note += ", +" + Table::fmt("%.1f", peak - before) + " MiB during the pass (" +
                Table::fmt("%.1f", (peak - before) * 1024 / L) + " KiB/token)";
      else
        note += " (process high-water mark: /proc/self/clear_refs not writable)";
    }
    t.measured("memory", what, sec, L, 2 * W * L + m.n_layer * attention_forward_flops(1, L, m.n_embd), note);
  }
}

// The floors of the phase table (bytes): what a run must hold at least.
struct PhaseFloors {
  double state = 0;     // master parameters, gradients, both AdamW moments (+ the bf16 working copy)
  double training = 0;  // the activations the backward pass reads, and its scratch
  double eval(const ModelConfig& m, int64_t batch_tokens, int mult, double sb) const {
    // One inference pass of b sequences of L = m·T: the residual stream and
    // its next value, one layer's q, k, v, attention output and MLP hidden
    // layer, and the logits: (2 + 3 + 1 + 4)·C + Vp stored values per token
    // (bf16 storage widens the logits for the loss in bounded chunks only).
    const int64_t L = static_cast<int64_t>(mult) * m.context;
    const int64_t b = std::max<int64_t>(1, batch_tokens / L);
    return static_cast<double>(b * L) * (10.0 * m.n_embd + m.padded_vocab()) * sb;
  }
};
// sb: bytes of a stored activation (4 fp32, 2 bf16). Per token and layer the
// backward pass reads the inputs of every linear layer and LayerNorm and
// the nonlinearity's input: the residual entering the block and after the
// attention (2C), the two LayerNorm outputs (2C), q, k, v (3C), the
// attention output (C), the MLP's hidden layer before and after GELU (8C):
// 16C values, plus 4 LayerNorm statistics and one attention statistic per
// head (float32). Outside the blocks: the embedding output and the final
// LayerNorm's (2C, +2 statistics), the logits, whose gradient overwrites
// them (Vp), and the loss. During backward: the residual's gradient and the
// largest per-layer gradient (C + 4C).
PhaseFloors phase_floors(const ModelConfig& m, size_t params, int64_t tokens, double sb) {
  PhaseFloors f;
  const double P = static_cast<double>(params), C = m.n_embd;
  f.state = 16 * P + (sb < 4 ? sb * P : 0);
  const double per_layer = 16 * C * sb + (4 + m.n_head) * 4.0;
  const double outside = 2 * C * sb + 2 * 4.0 + m.padded_vocab() * sb + 4 + 5 * C * sb;
  f.training = static_cast<double>(tokens) * (m.n_layer * per_layer + outside);
  return f;
}

// Peak resident memory of each phase of a run, one after the other in this
// process, for run.storage fp32 and bf16: the model and AdamW allocated, two
// training steps, a checkpoint saved (into a temporary directory, removed
// after) and loaded back into the model (as --resume does), and one
// evaluation pass at each memory multiple (sequences per pass as the
// trainer's evaluation: max(1, B·T / (m·T))); for bf16 last, a fresh model
// (allocated, initialised) taking one training step with whole-operand
// widening (the adapter's chunk 0; before issue 19 the adapter also widened
// whole weights, which the linear layers and the embedding now read as
// bf16 at every chunk size). Before each phase the heap's free
// pages go back to the system and the kernel's peak-RSS mark is reset, so
// each peak is that phase's.
//
// With --device cuda: the device memory in use after each phase (what stays
// allocated: parameters, state, activations, the adapter's and cuBLASLt's
// scratch), against floors without the process; the checkpoint rows, which
// move host memory only, are left out. Through the CUDA emulator (build-emu)
// this is its allocation accounting.
void bench_phases(const Config& cfg_in, const BenchOptions& opt, std::ostream& out) {
  const bool cuda = opt.device == "cuda";
  if (!cuda) mallopt(M_MMAP_THRESHOLD, 256 * 1024);  // as bench_memory: large buffers get their own mappings
  const ModelConfig& m = cfg_in.model;
  const int B = cfg_in.train.batch_size, T = m.context;
  const int64_t tokens = static_cast<int64_t>(B) * T;
  const double MiB = 1024.0 * 1024.0;
  if (cuda)
    out << "\nmemory by phase (cuda; device memory in use after each phase, MiB; floor: what a run must hold at that "
           "point, from the parameter table and the shapes; docs/performance.md)\n";
  else
    out << "\nmemory by phase (cpu; peak resident set of the process during each phase, MiB; floor: what a run must "
           "hold at that point, from the parameter table and the shapes; docs/performance.md)\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-8s %-40s %10s %10s %10s %8s %9s", "storage", "phase", cuda ? "in use" : "peak",
                cuda ? "+phase" : "+during", "floor", "peak/fl", "s");
  out << buf << "\n" << std::string(102, '-') << "\n" << std::flush;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("gpt_bench_phases_" + std::to_string(::getpid()));
  for (const std::string storage : {"fp32", "bf16"}) {
    Config cfg = cfg_in;
    cfg.run.storage = storage;
    const double sb = storage == "bf16" ? 2 : 4;
    auto phase = [&](const std::string& what, double floor_bytes, const std::function<void()>& f) {
      bool reset = true;
      double before = 0;
      if (cuda) {
        before = static_cast<double>(cuda_memory_in_use()) / MiB;
      } else {
        malloc_trim(0);
        reset = reset_peak_rss();
        before = proc_status_mib("VmRSS:");
      }
      const auto t0 = Clock::now();
      f();
      const double sec = seconds_since(t0);
      const double peak = cuda ? static_cast<double>(cuda_memory_in_use()) / MiB : proc_status_mib("VmHWM:");
      std::snprintf(buf, sizeof buf, "%-8s %-40s %10.1f %10s %10.1f %8s %9.2f", storage.c_str(), what.c_str(), peak,
                    reset ? Table::fmt("%+.1f", peak - before).c_str() : "n/a", floor_bytes / MiB,
                    floor_bytes > 0 ? Table::fmt("%.2f", peak / (floor_bytes / MiB)).c_str() : "-", sec);
      out << buf << "\n" << std::flush;
    };
    auto new_model = [&](size_t chunk) {
      return make_model(m, resolve_attention(cfg), make_backend(opt.device, cuda ? opt.precision : "fp32"), storage,
                        chunk);
    };
    std::unique_ptr<Model<float>> model;
    std::unique_ptr<AdamW<float>> adamw;
    const AttentionSpec attn = resolve_attention(cfg);
    const PhaseFloors fl = phase_floors(m, ParamLayout(m, attn).total, tokens, sb);
    // The floors are absolute: on the CPU the process before the model
    // (binary, libraries, what earlier parts left) is added to each; on the
    // device, what is in use before it.
    if (!cuda) malloc_trim(0);
    const double base = cuda ? static_cast<double>(cuda_memory_in_use()) / MiB : proc_status_mib("VmRSS:");
    const double base_bytes = base * MiB;
    phase("model + AdamW allocated and initialised", base_bytes + fl.state, [&] {
      model = new_model(kBf16ChunkFloats);
      model->init(cfg.train.seed);
      adamw = std::make_unique<AdamW<float>>(*model, cfg.train);
    });
    // The way before issue 19, for comparison in the same run: the whole
    // initialisation staged in one host buffer.
    if (!cuda)
      phase("  init via a host copy (before)", base_bytes + fl.state, [&] {
        std::vector<float> host(model->num_params());
        init_params(model->layout(), m, cfg.train.seed, host.data());
        model->set_params(host);
      });
    out << "         (" << (cuda ? "device memory in use" : "process") << " before the model: "
        << Table::fmt("%.1f", base) << " MiB, added to every floor; state " << Table::fmt("%.1f", fl.state / MiB)
        << " MiB, training activations " << Table::fmt("%.1f", fl.training / MiB) << " MiB)\n";
    const auto inputs = random_tokens(static_cast<size_t>(tokens), m.vocab_size, 7),
               targets = random_tokens(static_cast<size_t>(tokens), m.vocab_size, 8);
    auto train_step = [&](Model<float>& mo, AdamW<float>& o) {
      mo.zero_grad();
      mo.forward(inputs.data(), targets.data(), B, T);
      mo.backward();
      o.clip(cfg.train.grad_clip);
      o.step(cfg.train.lr);
    };
    for (int step = 1; step <= 2; ++step)
      phase("training step " + std::to_string(step), base_bytes + fl.state + fl.training,
            [&] { train_step(*model, *adamw); });
    if (!cuda) {
      std::filesystem::create_directories(dir);
      const std::string path = (dir / "phase.ckpt").string();
      phase("checkpoint save", base_bytes + fl.state + fl.training + kCheckpointBufferBytes, [&] {
        const CheckpointState st = checkpoint_state(*model, adamw.get(), cfg, {});
        write_checkpoint(path, st.meta, st.tensors);
      });
      phase("checkpoint load (resume)", base_bytes + fl.state + fl.training + kCheckpointBufferBytes, [&] {
        CheckpointReader r(path);
        restore_checkpoint(r, *model, adamw.get());
      });
      // Before: host copies of every tensor (the old save exactly; the old load
      // also held the whole file, which load_checkpoint no longer does).
      phase("  save via host copies (before)", base_bytes + fl.state + fl.training + kCheckpointBufferBytes,
            [&] { save_checkpoint(path, make_checkpoint(*model, adamw.get(), cfg, {})); });
      phase("  load via host copies (load_checkpoint)", base_bytes + fl.state + fl.training + kCheckpointBufferBytes,
            [&] {
              const Checkpoint c = load_checkpoint(path);
              restore_checkpoint(c, path, *model, adamw.get());
            });
      std::filesystem::remove_all(dir);
    }
    for (int mult : opt.memory_multiples) {
      const int L = mult * T;
      if (m.position == "learned" && L > m.position_rows()) continue;
      const int64_t b = std::max<int64_t>(1, tokens / L);
      const auto in = random_tokens(static_cast<size_t>(b * L), m.vocab_size, 9),
                 tg = random_tokens(static_cast<size_t>(b * L), m.vocab_size, 10);
      std::vector<float> losses;
      // The pass runs in the training activations when they hold its tokens,
      // and frees them for its own otherwise (GPT::activations).
      const double acts = b * L <= tokens ? fl.training : fl.eval(m, tokens, mult, sb);
      phase("eval " + std::to_string(mult) + "x (" + std::to_string(b) + " x " + std::to_string(L) + " tokens)",
            base_bytes + fl.state + acts,
            [&] { model->forward_losses(in.data(), tg.data(), static_cast<int>(b), L, losses); });
    }
    if (storage == "bf16") {
      adamw.reset();
      model.reset();
      phase("  step, whole-operand scratch (chunk 0)", base_bytes + fl.state + fl.training, [&] {
        model = new_model(0);
        model->init(cfg.train.seed);
        adamw = std::make_unique<AdamW<float>>(*model, cfg.train);
        train_step(*model, *adamw);
      });
    }
  }
}

// A FIRE parameter block for `heads` heads as the model draws one (attn::fire:
// the MLP U(±1/sqrt(fan_in)), c = 0.1, m = 1), for the bench's tables.
std::vector<float> fire_bench_block(int heads) {
  namespace f = attn::fire;
  std::vector<float> p = random_floats(f::count(heads), 13);
  for (int k = 0; k < f::count(heads); ++k) p[k] *= k < f::w2() ? 1.0f : static_cast<float>(1.0 / std::sqrt(f::kWidth));
  p[f::c(heads)] = static_cast<float>(f::kInitC);
  p[f::m(heads)] = static_cast<float>(f::kInitMultiplier);
  return p;
}

void bench_attention(const Config& cfg, const BenchOptions& opt, std::ostream& out, double peak) {
  const ModelConfig& m = cfg.model;
  const int C = m.n_embd, NH = m.n_head;
  std::vector<std::string> names = opt.presets;
  if (names.empty()) {
    for (const AttentionPreset& p : kAttentionPresets) names.push_back(p.name);
    for (const char* b : {"kerple_log", "kerple_power", "forget", "fire", "differential", "softcap"})
      names.push_back(std::string("softmax+") + b);
  }
  // Two tables: the forward alone (evaluation), then forward+backward (training).
  for (const bool with_backward : {false, true}) {
    out << "\nattention " << (with_backward ? "forward+backward" : "forward") << " (cpu kernels), B=1, " << NH
        << " heads, C=" << C << ": GFLOP/s and ratio to peak; FLOPs = " << (with_backward ? "3 x " : "")
        << "2*B*C*T(T+1) (forward: q.k and the weighted sum of v over the causal half, 2*2*B*NH*D*T(T+1)/2"
        << (with_backward ? "; backward counted as 2x the forward)" : ")")
        << "; +differential rows count their kernel heads' 2C\n";
    char buf[64];
    int width = 10;  // the name column holds the longest name
    for (const std::string& name : names) width = std::max(width, static_cast<int>(std::min<size_t>(name.size(), 40)));
    std::snprintf(buf, sizeof buf, "%-*s", width, "preset");
    out << buf;
    for (int Tn : opt.attention_contexts) {
      std::snprintf(buf, sizeof buf, " %15s", ("T=" + std::to_string(Tn)).c_str());
      out << buf;
    }
    out << "\n" << std::flush;
    for (const std::string& name : names) {
      // The preset's own stages and constants; PRESET+BIAS adds a position
      // bias, PRESET+differential differential attention, PRESET+softcap a cap.
      AttentionSpec spec = resolve_attention(attention_variant(name, "bench --presets"), m);
      if (m.position == "alibi") spec.position_bias = PositionBias::Alibi;
      // The kernels' geometry: differential attention runs 4 kernel heads of
      // D/2 per head (attn::diff), twice the FLOPs, counted as such.
      const int KC = spec.differential ? 2 * C : C, KNH = spec.differential ? attn::diff::kHeads * NH : NH;
      std::snprintf(buf, sizeof buf, "%-*s", width, name.c_str());
      out << buf << std::flush;
      for (int Tn : opt.attention_contexts) {
        const size_t n3 = static_cast<size_t>(Tn) * 3 * KC, n1 = static_cast<size_t>(Tn) * KC;
        const auto qkv = random_floats(n3, 11), dout = random_floats(n1, 12, 0.01f);
        // ssmax's s_h, the sink's ζ_h, KERPLE's raw ρ (r = ln 2), the forget gate's c (every f = 0.9),
        // FIRE's table of a block drawn as the model initialises it.
        const std::vector<float> scale(NH, 1.0f), sink(NH, 0.0f), kerple(2 * NH, 0.0f);
        std::vector<float> fcum(static_cast<size_t>(KNH) * Tn), fire, dfire;
        for (size_t k = 0; k < fcum.size(); ++k) fcum[k] = static_cast<float>(std::log(0.9) * (k % Tn + 1));
        if (spec.fire()) {
          fire.resize(static_cast<size_t>(KNH) * Tn * Tn);
          dfire.resize(fire.size());
          cpu::fire_forward(fire.data(), fire_bench_block(KNH).data(), Tn, KNH,
                            attn::fire::threshold0(spec.trained_context));
        }
        std::vector<float> y(n1), stats(static_cast<size_t>(KNH) * Tn * spec.stats_per_row()), dqkv(n3), dscale(NH),
            dsink(NH), dkerple(2 * NH), dfcum(fcum.size());
        const HeadParams<float> head(scale.data(), sink.data(), kerple.data(), fcum.data(),
                                     fire.empty() ? nullptr : fire.data());
        auto fb = [&] {
          cpu::attention_forward(y.data(), stats.data(), qkv.data(), 1, Tn, KC, KNH, spec, head, nullptr);
          if (with_backward)
            cpu::attention_backward(dqkv.data(),
                                    {dscale.data(), dsink.data(), dkerple.data(), dfcum.data(),
                                     dfire.empty() ? nullptr : dfire.data()},
                                    dout.data(), y.data(), stats.data(), qkv.data(), 1, Tn, KC, KNH, spec, head);
        };
        // Long contexts take up to seconds per call: two timed calls, no warm-up.
        const bool long_ctx = Tn >= 2048;
        const double sec = best_seconds(fb, long_ctx ? 0.0 : opt.min_seconds, 2, long_ctx ? 0 : 1);
        const double gflops = (with_backward ? 3 : 1) * attention_forward_flops(1, Tn, KC) / sec / 1e9;
        std::snprintf(buf, sizeof buf, " %8.1f %5.0f%%", gflops, peak > 0 ? 100 * gflops / peak : 0.0);
        out << buf << std::flush;
      }
      out << "\n";
    }
  }
}

// The context-extension methods of cfg.context against the same preset
// without them, in one run: a window or the sinks must make the cost grow
// linearly with T (the kernels skip the key blocks no row keeps), so the
// time per token of the masked kernel stays flat while the plain kernel's
// grows with T.
void bench_attention_context(const Config& cfg, const BenchOptions& opt, std::ostream& out) {
  const ModelConfig& m = cfg.model;
  const int C = m.n_embd, NH = m.n_head;
  std::vector<std::string> names = opt.presets;
  if (names.empty()) names = {"softmax", "lssar"};
  out << "\nattention with the context methods (" << context_summary(resolve_attention(cfg)) << ") against "
      << "without them (cpu kernels), B=1, " << NH << " heads, C=" << C << ": ms per call, ratio, and us per token\n";
  char buf[160];
  std::snprintf(buf, sizeof buf, "%-10s %7s %10s %10s %7s %9s %10s %10s %7s %9s\n", "preset", "T", "fwd", "fwd+ctx",
                "ratio", "us/tok", "f+b", "f+b+ctx", "ratio", "us/tok");
  out << buf;
  for (const std::string& name : names) {
    AttentionConfig ac;
    ac.preset = name;
    AttentionSpec plain = resolve_attention(ac, m);
    if (m.position == "alibi") plain.position_bias = PositionBias::Alibi;
    for (int Tn : opt.attention_contexts) {
      const AttentionSpec ctx = for_length(resolve_attention(ac, m, cfg.context), Tn);
      const size_t n3 = static_cast<size_t>(Tn) * 3 * C, n1 = static_cast<size_t>(Tn) * C;
      const auto qkv = random_floats(n3, 11), dout = random_floats(n1, 12, 0.01f);
      // A distance remapping's far copy (its values do not change the cost).
      const bool far = remap::on(ctx.rope);
      const auto qkv_far = far ? random_floats(n3, 13) : std::vector<float>{};
      std::vector<float> dfar(far ? n3 : 0);
      const std::vector<float> scale(NH, 1.0f), sink(NH, 0.0f);  // ssmax's s_h, the sink's ζ_h
      std::vector<float> y(n1), stats(static_cast<size_t>(NH) * Tn * plain.stats_per_row()), dqkv(n3), dscale(NH),
          dsink(NH);
      double sec[2][2];  // [plain/ctx][fwd/f+b]
      for (int which = 0; which < 2; ++which)
        for (int bw = 0; bw < 2; ++bw) {
          const AttentionSpec& sp = which ? ctx : plain;
          const float* f = which && far ? qkv_far.data() : nullptr;
          auto fb = [&] {
            cpu::attention_forward(y.data(), stats.data(), qkv.data(), 1, Tn, C, NH, sp, {scale.data(), sink.data()},
                                   nullptr, f);
            if (bw)
              cpu::attention_backward(dqkv.data(), {dscale.data(), dsink.data()}, dout.data(), y.data(), stats.data(),
                                      qkv.data(), 1, Tn, C, NH, sp, {scale.data(), sink.data()},
                                      f ? dfar.data() : nullptr, f);
          };
          const bool long_ctx = Tn >= 2048;
          sec[which][bw] = best_seconds(fb, long_ctx ? 0.0 : opt.min_seconds, 2, long_ctx ? 0 : 1);
        }
      std::snprintf(buf, sizeof buf, "%-10s %7d %10.2f %10.2f %7.3f %9.3f %10.2f %10.2f %7.3f %9.3f\n", name.c_str(),
                    Tn, 1e3 * sec[0][0], 1e3 * sec[1][0], sec[1][0] / sec[0][0], 1e6 * sec[1][0] / Tn,
                    1e3 * sec[0][1], 1e3 * sec[1][1], sec[1][1] / sec[0][1], 1e6 * sec[1][1] / Tn);
      out << buf << std::flush;
    }
  }
}

// ---- cuda ----------------------------------------------------------------------------
// Square n^3 GEMM through the backend (device buffers), best of repeats.
double backend_square_gemm_seconds(Backend<float>& be, int n, double min_seconds) {
  const size_t nn = static_cast<size_t>(n) * n;
  Buffer<float> a(be, nn), w(be, nn), out(be, nn);
  const auto ha = random_floats(nn, 1), hw = random_floats(nn, 2);
  be.upload(a.get(), ha.data(), nn);
  be.upload(w.get(), hw.data(), nn);
  return best_seconds([&] {
    be.matmul_forward(out.get(), a.get(), w.get(), nullptr, n, n, n);
    be.synchronize();
  }, min_seconds, 3);
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
  out << "gpt bench --device cuda " << (opt.config_name.empty() ? "(defaults)" : opt.config_name) << ": "
      << m.n_layer << " layers, " << m.n_head << " heads, C=" << m.n_embd << ", V=" << m.vocab_size
      << ", T=" << m.context << ", B=" << cfg.train.batch_size << " (" << cfg.train.batch_size * m.context
      << " tokens/step), " << m.position << " positions, attention " << cfg.attention.preset << "\n";
  out << "device " << name << ", backend " << probe->name() << ", run.precision " << precision << ": ";
  const std::string storage = "storage float32 (parameters, activations, gradients, AdamW state)";
  if (cfg.run.storage == "bf16")
    out << "run.storage bf16: activations and working parameters bf16; the GEMMs read them as stored (bf16 "
           "operands, float32 accumulation, whatever run.precision) where C and OC are multiples of 8; the other "
           "ops widen their operands to float32 scratch in chunks of 16 MiB per operand; float32 master parameters, gradients, "
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
  out << "FLOPs: matmul weights N = 12*L*C^2 + V*C = " << Table::fmt("%.2f", matmul_weights(m) / 1e6)
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
    t.measured("gemm", "square " + std::to_string(opt.square) + "^3", sec, 0, 2 * n * n * n,
               note(2 * n * n * n, sec));
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

}  // namespace

const GpuPeak* cuda_peak(const std::string& device_name) {
  // NVIDIA data sheets, dense (without sparsity); more specific names first.
  static const GpuPeak table[] = {
      {"H200 NVL", 835.0, 417.5, 60.0},  {"H200", 989.4, 494.7, 66.9},  {"H100 PCIe", 756.5, 378.0, 51.2},
      {"H100 NVL", 835.0, 417.5, 60.0},  {"H100", 989.4, 494.7, 66.9},  {"A100", 312.0, 156.0, 19.5},
      {"L40S", 362.1, 183.0, 91.6},
  };
  for (const GpuPeak& p : table)
    if (device_name.find(p.match) != std::string::npos) return &p;
  return nullptr;
}

const std::vector<std::string>& bench_parts() {
  static const std::vector<std::string> parts = {"gemm",   "train",  "eval",          "attention",
                                                 "memory", "phases", "cuda-attention"};
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
              p, "\"; valid: gemm, train, eval, attention, memory, phases, cuda-attention");
  GPT_CHECK(opt.device == "cpu" || opt.device == "cuda", "bench --device: \"", opt.device, "\"; valid: cpu, cuda");
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
  out << "gpt bench " << (opt.config_name.empty() ? "(defaults)" : opt.config_name) << ": " << m.n_layer
      << " layers, " << m.n_head << " heads, C=" << m.n_embd << ", V=" << m.vocab_size << ", T=" << m.context
      << ", B=" << cfg.train.batch_size << " (" << cfg.train.batch_size * m.context << " tokens/step), "
      << m.position << " positions, attention " << cfg.attention.preset << "\n";
  out << "threads " << omp_get_max_threads() << " of " << omp_get_num_procs() << " processors, GEMM kernel "
      << cpu::gemm_kernel_name(cpu::gemm_kernel()) << ", " << when << ", load average " << load_average()
      << " at start\n";
  if (cfg.run.storage == "bf16")
    out << "run.storage bf16: activations and working parameters bf16; the linear layers and the embedding read "
           "them as stored, the other ops widen their operands to float32 scratch in chunks of 16 MiB per operand; "
           "float32 master parameters, gradients and AdamW state\n";
  out << "FLOPs: matmul weights N = 12*L*C^2 + V*C = " << Table::fmt("%.2f", matmul_weights(m) / 1e6)
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
  out << "\ntotal " << Table::fmt("%.2f", seconds_since(start)) << " s, load average " << load_average()
      << " at end\n";
}

}  // namespace gpt
