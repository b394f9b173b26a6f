// See attention_cost.h.
#include "bench/attention_cost.h"

#include <algorithm>
#include <cstdio>

#include "config/attention.h"
#include "core/check.h"

namespace gpt {

namespace {

// Data-sheet peaks. H100 SXM: 989.4 dense bf16 TFLOP/s, 66.9 float32
// TFLOP/s (an FMA counts 2: 33.45e12 instructions/s), 3.35 TB/s of HBM3;
// the special-function rate is the 3.9e12 exponentials/s FlashAttention-3's
// paper gives for the H100 SXM5 (Shah et al. 2024, §3). The H200 is the same
// chip with 4.8 TB/s of HBM3e. The L2 read bandwidth, 5.5 TB/s, is an
// assumption (NVIDIA publishes none; microbenchmarks report about that):
// the first figure a GPU run should calibrate.
constexpr GpuUnits kGpus[] = {
    {"h100", 989.4, 33.45, 3.9, 3.35, 5.5},
    {"h200", 989.4, 33.45, 3.9, 4.8, 5.5},
};

// Instructions per element of one stage (estimates from the code: the
// kernels' inner loops and CUDA's float math functions, without
// --use_fast_math). mufu: ex2, lg2, rcp, rsqrt on the special-function unit.
struct StageCost {
  double fp32, mufu;
};
// λ·f·q·k + bias (one FMA), ALiBi's slope, the causal / window / document
// tests of pair_in and the tile's bookkeeping.
constexpr StageCost kLogit{4, 0};
// Pass 1 besides φ: the running maximum, x − m, relu(u − c), Z += |u − c|,
// max u and the validity selects.
constexpr StageCost kPass1{6, 0};
// Pass 2 (re-weighting) besides the logit and φ: a = numer·(1/Z),
// t = i·a − o (FMA), t / t_max (an IEEE division), powf (log2 and exp2 with
// extended-precision corrections), Σr.
constexpr StageCost kSharpen{24, 2};
constexpr StageCost kSoftcap{10, 2};  // c·tanh(x / c): a division, tanhf (exp and a reciprocal)
constexpr StageCost kKerpleLog{10, 1};   // −r₁·log1p(r₂Δ)
constexpr StageCost kKerplePower{22, 2};  // −r₁·Δ^r₂ (powf)
constexpr StageCost kForget{3, 0};        // c_i − c_j (two loads)
constexpr StageCost kFire{2, 0};          // a table load
constexpr StageCost kScaleInvariant{16, 2};  // log1pf and sqrtf of the distance, two FMAs
constexpr StageCost kToBf16{5, 0};           // the weight rounded to bf16 (tensor cores)
// The backward's stage math per visit besides the logit and φ: a from u and
// 1/Z, h = g (dL/dw), φ'(x) from u, dx = φ'/Z·(h − S), the cap's factor,
// λ·f·dx and the row or column sums.
constexpr StageCost kGrad{10, 0};
// Under sharpening: w from a (as kSharpen) and dL/da through it
// (sharpen_grad: t / t_max, its powers p − 1 and p, a division).
constexpr StageCost kSharpenGrad{40, 4};

StageCost positivity_cost(Positivity p) {
  switch (p) {
    case Positivity::Exp:
      return {4, 1};  // expf: scale by log2 e, split, ex2, rescale
    case Positivity::Softplus:
      return {14, 2};  // max, |x|, expf, log1pf
    case Positivity::Sigmoid:
      return {12, 2};  // expf, 1 + e and an IEEE division (reciprocal and two Newton FMAs)
    case Positivity::Relu:
      return {1, 0};
  }
  return {0, 0};
}

StageCost logit_cost(const AttentionSpec& s) {
  StageCost c = kLogit;
  auto add = [&](StageCost x) { c.fp32 += x.fp32, c.mufu += x.mufu; };
  if (s.softcap > 0) add(kSoftcap);
  if (s.position_bias == PositionBias::KerpleLog) add(kKerpleLog);
  if (s.position_bias == PositionBias::KerplePower) add(kKerplePower);
  if (s.forget()) add(kForget);
  if (s.fire()) add(kFire);
  if (s.scale == Scale::ScaleInvariant) add(kScaleInvariant);
  return c;
}

// Key rows one pass reads for one (b, h): every block of 64 query rows reads
// the keys up to its last row.
double keys_read(int T) {
  double keys = 0;
  for (int q0 = 0; q0 < T; q0 += 64) keys += std::min(T, q0 + 64);
  return keys;
}

// Query rows the dk/dv kernel reads for one (b, h): every block of 64 keys
// reads the query tiles of 32 rows from the one holding its first key on.
double queries_read(int T) {
  double rows = 0;
  for (int k0 = 0; k0 < T; k0 += 64) rows += T - k0 / 32 * 32;
  return rows;
}

// Each unit's time at its peak for `pairs` pairs of work w and the bytes
// moved, and the largest of them.
CostPrediction unit_times(const PairWork& w, double pairs, double bytes, double l2_bytes, const GpuUnits& gpu) {
  CostPrediction p;
  p.t_mma = pairs * w.mma_flops / (gpu.mma_tflops * 1e12);
  p.t_fp32 = pairs * w.fp32_instr / (gpu.fp32_tinstr * 1e12);
  p.t_mufu = pairs * w.mufu_instr / (gpu.mufu_tinstr * 1e12);
  p.t_mem = bytes / (gpu.hbm_tbytes * 1e12);
  p.t_l2 = l2_bytes / (gpu.l2_tbytes * 1e12);
  p.seconds = p.t_mma, p.bound = "tensor";
  if (p.t_fp32 > p.seconds) p.seconds = p.t_fp32, p.bound = "fp32";
  if (p.t_mufu > p.seconds) p.seconds = p.t_mufu, p.bound = "mufu";
  if (p.t_mem > p.seconds) p.seconds = p.t_mem, p.bound = "memory";
  if (p.t_l2 > p.seconds) p.seconds = p.t_l2, p.bound = "l2";
  return p;
}

}  // namespace

const GpuUnits* gpu_units(const std::string& name) {
  for (const GpuUnits& g : kGpus)
    if (name == g.name) return &g;
  return nullptr;
}

PairWork pair_work(const AttentionSpec& s, int D, bool tensor_cores) {
  PairWork w;
  w.passes = s.sharpened() ? 2 : 1;
  const StageCost logit = logit_cost(s), phi = positivity_cost(s.positivity);
  // Pass 1: q·k, the logit, φ and the sums; the weighted sum too unless
  // a second pass re-weights.
  w.fp32_instr = logit.fp32 + phi.fp32 + kPass1.fp32;
  w.mufu_instr = logit.mufu + phi.mufu;
  if (w.passes == 2) {  // q·k, the logit, φ and the re-weighting again
    w.fp32_instr += logit.fp32 + phi.fp32 + kSharpen.fp32;
    w.mufu_instr += logit.mufu + phi.mufu + kSharpen.mufu;
  }
  const double qk_flops = 2.0 * D * w.passes, pv_flops = 2.0 * D;
  if (tensor_cores) {
    // Cosine scores: q̂·k̂ from bf16 hi + lo parts, three products (forward_tc.cuh).
    w.mma_flops = (s.score == Score::Cosine ? 3 : 1) * qk_flops + pv_flops;
    w.fp32_instr += kToBf16.fp32;
  } else {
    w.fp32_instr += (qk_flops + pv_flops) / 2;  // FMAs
  }
  return w;
}

CostPrediction predict_forward(const AttentionSpec& s, int B, int T, int NH, int D, bool tensor_cores,
                               const GpuUnits& gpu) {
  const PairWork w = pair_work(s, D, tensor_cores);
  const double heads = static_cast<double>(B) * NH;
  const double pairs = heads * T * (T + 1.0) / 2;
  // Bytes (float32 inputs): q, k, v, out and the four statistics per row
  // once from device memory; k once per pass (twice on tensor cores with
  // cosine scores: its hi and lo parts) and v once for every block of
  // query rows from the L2 cache.
  const double row = 4.0 * D;
  const double bytes = heads * (4 * T * row + T * 16.0);
  const int k_reads = (tensor_cores && s.score == Score::Cosine ? 2 : 1) * w.passes;
  const double l2_bytes = heads * keys_read(T) * row * (k_reads + 1);
  CostPrediction p = unit_times(w, pairs, bytes, l2_bytes, gpu);
  p.tflops = 2.0 * B * NH * D * static_cast<double>(T) * (T + 1.0) / p.seconds / 1e12;
  return p;
}

PairWork pair_work_backward(const AttentionSpec& s, int D, bool tensor_cores) {
  PairWork w;
  const bool sharp = s.sharpened();
  const int dq_visits = sharp ? 2 : 1;
  w.passes = dq_visits + 1;
  const StageCost logit = logit_cost(s), phi = positivity_cost(s.positivity);
  const double visit_fp32 = logit.fp32 + phi.fp32 + kGrad.fp32 + (sharp ? kSharpen.fp32 + kSharpenGrad.fp32 : 0);
  const double visit_mufu = logit.mufu + phi.mufu + (sharp ? kSharpen.mufu + kSharpenGrad.mufu : 0);
  w.fp32_instr = w.passes * visit_fp32;
  w.mufu_instr = w.passes * visit_mufu;
  // q·k and dy·v at every visit; ds·k in dq's last; wᵀ·dy and dsᵀ·q in dk/dv's.
  const double prod = 2.0 * D;
  const int qk_mult = tensor_cores && s.score == Score::Cosine ? 3 : 1;  // hi·hi + hi·lo + lo·hi
  const double flops = w.passes * (qk_mult + 1) * prod + 3 * prod;
  if (tensor_cores) {
    w.mma_flops = flops;
    w.fp32_instr += 3 * kToBf16.fp32;  // ds in dq; w and ds in dk/dv
  } else {
    w.fp32_instr += (w.passes * 2 * prod + 3 * prod) / 2;  // FMAs
  }
  return w;
}

CostPrediction predict_backward(const AttentionSpec& s, int B, int T, int NH, int D, bool tensor_cores,
                                const GpuUnits& gpu) {
  const PairWork w = pair_work_backward(s, D, tensor_cores);
  const double heads = static_cast<double>(B) * NH;
  const double pairs = heads * T * (T + 1.0) / 2;
  // Device memory: dq's kernel reads q, dy, out and the statistics and adds
  // dq (a read and a write), writing D_i, S_i; dk/dv's reads k, v and adds
  // dk, dv: eleven rows and 24 bytes per position.
  const double row = 4.0 * D;
  const double bytes = heads * T * (11 * row + 24.0);
  // L2: dq's blocks of 64 rows re-read k (hi and lo on tensor cores with
  // cosine scores) and v at each of their visits; dk/dv's blocks of 64 keys
  // re-read q (likewise), dy and the rows' statistics, D_i and S_i.
  const int split = tensor_cores && s.score == Score::Cosine ? 2 : 1;
  const int dq_visits = w.passes - 1;
  const double l2_bytes =
      heads * (keys_read(T) * row * (split + 1) * dq_visits + queries_read(T) * (row * (split + 1) + 24.0));
  CostPrediction p = unit_times(w, pairs, bytes, l2_bytes, gpu);
  p.tflops = 2.5 * 2.0 * B * NH * D * static_cast<double>(T) * (T + 1.0) / p.seconds / 1e12;
  return p;
}

void run_attention_cost(const CudaAttentionBenchOptions& opt, const std::string& gpu_name, std::ostream& out) {
  const GpuUnits* gpu = gpu_units(gpu_name);
  GPT_CHECK(gpu, "bench --gpu: \"", gpu_name, "\" has no cost model; valid: h100, h200");
  const int C = opt.n_embd, NH = opt.n_head, D = C / NH;
  std::vector<std::string> names = opt.presets;
  if (names.empty())
    for (const AttentionPreset& p : kAttentionPresets) names.push_back(p.name);
  out << "\nattention cost model, forward and backward, " << gpu->name << " (" << gpu->mma_tflops << " bf16 tensor TFLOP/s, "
      << gpu->fp32_tinstr << "e12 float32 and " << gpu->mufu_tinstr << "e12 special-function instructions/s, "
      << gpu->hbm_tbytes << " TB/s of memory, " << gpu->l2_tbytes << " TB/s of L2 reads, assumed), " << opt.tokens << " tokens per call, " << NH << " heads of " << D
      << ": each unit's time at its peak (ms), the largest bounds; TFLOP/s on 2*B*C*T(T+1). A lower bound on "
         "time from estimated instruction counts (docs/gpu.md, \"Cost model\"), not a measurement.\n"
         "reference: FlashAttention-3, causal forward at head size 64 on an H100 SXM in bf16, about 265 TFLOP/s "
         "at T = 1K and 470 at 16K (Shah et al. 2024); \"/FA3\" is the prediction over those (forward rows "
         "only: no backward figure of the paper is quoted here). Backward rows: TFLOP/s on 2.5 times the "
         "forward's count; its tensor-core kernels exist at head size 64 only (docs/gpu.md).\n";
  ModelConfig m;
  m.context = opt.trained_context;
  m.n_embd = C;
  m.n_head = NH;
  char buf[256];
  int width = 10;
  for (const std::string& n : names) width = std::max(width, static_cast<int>(std::min<size_t>(n.size(), 40)));
  std::snprintf(buf, sizeof buf, "%-*s %6s %7s %4s %9s %9s %9s %9s %9s %7s %8s %6s\n", width, "preset", "T",
                "kernel", "pass", "tensor", "fp32", "mufu", "memory", "l2", "bound", "TFLOP/s", "/FA3");
  out << buf << std::string(99 + width, '-') << "\n";
  for (const std::string& name : names) {
    const AttentionSpec spec = resolve_attention(attention_variant(name, "bench --presets"), m);
    if (attn::stick_breaking(spec)) {
      out << name << ": stick-breaking has kernels of its own (a reverse scan over key blocks), not modelled\n";
      continue;
    }
    for (int T : opt.contexts) {
      const int B = std::max(1, opt.tokens / T);
      for (bool bwd : {false, true})
        for (bool tc : {false, true}) {
          const CostPrediction p =
              bwd ? predict_backward(spec, B, T, NH, D, tc, *gpu) : predict_forward(spec, B, T, NH, D, tc, *gpu);
          char fa3[16] = "-";
          if (!bwd && tc && D == 64 && (T == 1024 || T == 16384))
            std::snprintf(fa3, sizeof fa3, "%.2f", p.tflops / (T == 1024 ? 265.0 : 470.0));
          std::snprintf(buf, sizeof buf, "%-*s %6d %7s %4s %9.3f %9.3f %9.3f %9.3f %9.3f %7s %8.1f %6s\n", width,
                        name.c_str(), T, tc ? "tc" : "fp32", bwd ? "bwd" : "fwd", p.t_mma * 1e3, p.t_fp32 * 1e3,
                        p.t_mufu * 1e3, p.t_mem * 1e3, p.t_l2 * 1e3, p.bound, p.tflops, fa3);
          out << buf;
        }
    }
  }
  out << std::flush;
}

}  // namespace gpt
