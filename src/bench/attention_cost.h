// `gpt bench --only attention-cost`: a cost model of the fused attention
// forward and backward on a GPU, for the float32 kernel and the tensor-core one, with no
// GPU needed (docs/gpu.md, "Cost model"). Per causal (query, key) pair it
// counts the work of each unit the kernels use, from their inner loops
// (kernels/cuda/attention/forward.cuh, forward_tc.cuh):
//   matrix FLOPs    q·k (once per pass) and the weighted sum of v: on the
//                   tensor cores (bf16 mma), or as FMAs on the CUDA cores;
//   float32 instr.  the stage math between the products (logit, masks, the
//                   online maximum, positivity's arithmetic, Z, re-weighting);
//   MUFU instr.     the special-function unit's exp2 / log2 / reciprocal
//                   inside exp, softplus, sigmoid, tanh and pow;
// and the bytes moved: q, k, v, out and the statistics once through device
// memory, and k and v again for every block of 64 query rows, which the
// blocks of one head share through the L2 cache (a head's k and v, 8 MiB at
// T = 16K, fit in it). Each is divided by its unit's peak; with perfect overlap the largest is the predicted time, a
// lower bound (a real kernel also stalls on latency and issue slots). The
// instruction counts per stage are estimates read off the code and CUDA's
// math library (table kStageCost in attention_cost.cpp), not measurements:
// a GPU run (scripts/gpu_check.sh) is what calibrates them.
#pragma once
#include <ostream>
#include <string>

#include "bench/cuda_attention_bench.h"
#include "kernels/attention_spec.h"

namespace gpt {

// Peak rates of one GPU (data-sheet figures; docs/gpu.md cites them).
struct GpuUnits {
  const char* name;
  double mma_tflops;    // dense bf16 tensor-core FLOP/s, 1e12
  double fp32_tinstr;   // float32 instructions per second (FMA = 1), 1e12
  double mufu_tinstr;   // special-function instructions per second, 1e12
  double hbm_tbytes;    // device-memory bytes per second, 1e12
  double l2_tbytes;     // L2 cache read bytes per second, 1e12 (an assumed figure)
};
// "h100" (H100 SXM) or "h200"; null for another name.
const GpuUnits* gpu_units(const std::string& name);

// The work of one causal pair, summed over the kernel's passes.
struct PairWork {
  int passes = 1;         // 2 under sharpening (re-weighting)
  double mma_flops = 0;   // on tensor cores (tensor_cores), else 0
  double fp32_instr = 0;  // including the products' FMAs in the float32 kernel
  double mufu_instr = 0;
};
PairWork pair_work(const AttentionSpec& s, int D, bool tensor_cores);

struct CostPrediction {
  double t_mma = 0, t_fp32 = 0, t_mufu = 0, t_mem = 0, t_l2 = 0;  // seconds of each unit
  double seconds = 0;                                             // the largest
  const char* bound = "";  // its unit: "tensor", "fp32", "mufu", "memory", "l2"
  double tflops = 0;                                    // 2·B·C·T(T+1) / seconds, 1e12 (the bench's FLOP count)
};
// The forward over B sequences of T tokens, NH heads of size D.
CostPrediction predict_forward(const AttentionSpec& s, int B, int T, int NH, int D, bool tensor_cores,
                               const GpuUnits& gpu);

// The backward (kernels/cuda/attention/backward.cuh, backward_tc.cuh): the
// dq kernel visits every pair once, or twice under sharpening (S_i's pass),
// forming q·k and dy·v each time and ds·k once; the dk/dv kernel visits it
// once, forming k·q, v·dy, wᵀ·dy and dsᵀ·q. `passes` counts the visits;
// every visit recomputes the logit, φ and the gradient's stage math.
PairWork pair_work_backward(const AttentionSpec& s, int D, bool tensor_cores);
// The backward over B sequences of T tokens, NH heads of size D; tflops on
// 2.5 times the forward's FLOP count (five products against two).
CostPrediction predict_backward(const AttentionSpec& s, int B, int T, int NH, int D, bool tensor_cores,
                                const GpuUnits& gpu);

// The table for opt's presets and contexts on `gpu` (h100 or h200).
void run_attention_cost(const CudaAttentionBenchOptions& opt, const std::string& gpu, std::ostream& out);

}  // namespace gpt
