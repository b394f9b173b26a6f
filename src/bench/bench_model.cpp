// gpt bench's model parts: the square GEMM (the peak every ratio is against),
// the training step and evaluation of the config's model, its memory, and the
// memory of each phase against its floor.
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

void bench_gemm(const Config& cfg, const BenchOptions& opt, Table& t, double& peak) {
  const ModelConfig& m = cfg.model;
  const int N = cfg.train.batch_size * m.context, C = m.n_embd, Vp = m.padded_vocab();
  struct Shape {
    const char* name;
    int in, out;
  };
  const Shape shapes[] = {
      {"qkv", C, 3 * C}, {"attproj", C, C}, {"fc", C, 4 * C}, {"fcproj", 4 * C, C}, {"lm head", C, Vp}};
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
                    best_seconds(
                        [&] {
                          cpu::matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, s.in,
                                               s.out);
                        },
                        opt.min_seconds),
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
                 const std::function<std::string(double flops, double sec)>& note) {
  auto remark = [&](double flops, double sec) { return note ? note(flops, sec) : std::string(); };
  const ModelConfig& m = cfg.model;
  const int B = cfg.train.batch_size, Tn = m.context;
  const double tokens = static_cast<double>(B) * Tn, W = matmul_weights(m);
  const double attn = m.n_layer * attention_forward_flops(B, Tn, m.attn_width());
  ModelBench mb(cfg, resolve_attention(cfg), opt.device, opt.precision);
  Model<float>& model = *mb.model;
  const auto inputs = random_tokens(static_cast<size_t>(tokens), m.vocab_size, 7),
             targets = random_tokens(static_cast<size_t>(tokens), m.vocab_size, 8);
  const std::string shape = "B=" + std::to_string(B) + " T=" + std::to_string(Tn);
  if (selected(opt, "train")) {
    Optimizer<float> optimizer(model, cfg.train);
    TokenLayout layout;
    auto step = [&] {
      model.zero_grad();
      model.forward(inputs.data(), targets.data(), B, Tn, layout);
      model.backward();
      optimizer.clip(cfg.train.grad_clip);
      optimizer.step(cfg.train.lr);
      model.backend().synchronize();  // asynchronous backends: the step is done when its ops are
    };
    // The model's FLOPs only (Muon's Newton-Schulz products are not counted).
    const double sec = best_seconds(step, 0.0, opt.steps), flops = 6 * W * tokens + 3 * attn;
    const std::string which = cfg.train.optimizer == "muon" ? "Muon" : "AdamW";
    t.measured("train", "step fwd+bwd+" + which + " " + shape, sec, tokens, flops, remark(flops, sec));
    if (opt.doc_len > 0) {  // the same step with a document mask: documents of doc_len tokens
      std::vector<int32_t> starts(static_cast<size_t>(tokens));
      for (size_t i = 0; i < starts.size(); ++i) {
        const int t0 = static_cast<int>(i % Tn);
        starts[i] = t0 - t0 % opt.doc_len;
      }
      layout.doc_begin = starts.data();
      const double masked = best_seconds(step, 0.0, opt.steps);
      layout.doc_begin = nullptr;
      const double again = best_seconds(step, 0.0, opt.steps);  // the unmasked step once more, after it
      t.measured("train",
                 "step " + shape + " documents of " + std::to_string(opt.doc_len) + " (masked/unmasked " +
                     Table::fmt("%.3f", masked / std::min(sec, again)) + ")",
                 masked, tokens, flops, remark(flops, masked));
    }
  }
  if (selected(opt, "eval")) {
    std::vector<float> losses;
    const double sec =
        best_seconds([&] { model.forward_losses(inputs.data(), targets.data(), B, Tn, losses); }, opt.min_seconds, 3);
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
    const MemoryMark mark = memory_mark(cuda);
    const bool reset = mark.peak_reset;
    const double before = mark.before;
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
    t.measured("memory", what, sec, L, 2 * W * L + m.n_layer * attention_forward_flops(1, L, m.attn_width()), note);
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
      const MemoryMark mark = memory_mark(cuda);
      const bool reset = mark.peak_reset;
      const double before = mark.before;
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
    std::unique_ptr<Optimizer<float>> adamw;
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
      adamw = std::make_unique<Optimizer<float>>(*model, cfg.train);
    });
    // The way before issue 19, for comparison in the same run: the whole
    // initialisation staged in one host buffer.
    if (!cuda)
      phase("  init via a host copy (before)", base_bytes + fl.state, [&] {
        std::vector<float> host(model->num_params());
        init_params(model->layout(), m, cfg.train.seed, host.data());
        model->set_params(host);
      });
    out << "         (" << (cuda ? "device memory in use" : "process")
        << " before the model: " << Table::fmt("%.1f", base) << " MiB, added to every floor; state "
        << Table::fmt("%.1f", fl.state / MiB) << " MiB, training activations " << Table::fmt("%.1f", fl.training / MiB)
        << " MiB)\n";
    const auto inputs = random_tokens(static_cast<size_t>(tokens), m.vocab_size, 7),
               targets = random_tokens(static_cast<size_t>(tokens), m.vocab_size, 8);
    auto train_step = [&](Model<float>& mo, Optimizer<float>& o) {
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
        adamw = std::make_unique<Optimizer<float>>(*model, cfg.train);
        train_step(*model, *adamw);
      });
    }
  }
}

}  // namespace gpt::bench_detail
