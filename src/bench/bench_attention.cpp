// gpt bench's attention parts on the CPU: every preset (and the contenders)
// forward and forward+backward against the GEMM peak, and the config's
// context-extension methods beside it.
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
            cpu::attention_backward(
                dqkv.data(),
                {dscale.data(), dsink.data(), dkerple.data(), dfcum.data(), dfire.empty() ? nullptr : dfire.data()},
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
                    Tn, 1e3 * sec[0][0], 1e3 * sec[1][0], sec[1][0] / sec[0][0], 1e6 * sec[1][0] / Tn, 1e3 * sec[0][1],
                    1e3 * sec[1][1], sec[1][1] / sec[0][1], 1e6 * sec[1][1] / Tn);
      out << buf << std::flush;
    }
  }
}

}  // namespace gpt::bench_detail
