// `gpt bench --only step-cost`: a cost model of one training step on a GPU
// (docs/gpu.md, "Cost model of a training step"), with no GPU needed. The
// model's own code runs one step (zero_grad, forward, backward, clipping,
// the optimizer) against a backend that computes nothing and records every
// op it is handed with its shapes, so the list of ops is the model's, not a
// second copy of it; with run.storage = bf16 the bf16 adapter sits between
// the model and that backend as it does on a GPU, and its conversions are
// recorded as what they are. Per op: the FLOPs, the minimum bytes (every
// tensor read or written once at its storage width: bf16 activations and
// working weights, float32 gradients, statistics and optimizer state), the
// bytes as the code moves them (float32 kernels on widened scratch, plus the
// adapter's passes), and a roofline time on an H100 or H200: the GEMMs at
// the tensor-core (or float32) peak of run.precision, the fused attention
// from the attention cost model (attention_cost.h; backward taken as 2.5
// times the forward, FlashAttention's ratio of their FLOPs), every other op
// at its bytes over the memory bandwidth or its instructions over the
// float32 rate, whichever is larger. Launch latency and imperfect overlap
// are left out: the time is a lower bound. Ops without a formula here are
// listed as not modelled.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "bench/attention_cost.h"
#include "config/config.h"

namespace gpt {

struct StepCostRow {
  std::string op;    // the backend op (with "(bf16 in)" for the linear layer reading bf16)
  long calls = 0;
  double flops = 0;       // FLOPs (GEMM, attention) or float32 instructions (the rest)
  double min_bytes = 0;   // at the storage widths
  double code_bytes = 0;  // as the code moves them
  char unit = 'm';        // 'g' GEMM, 'a' attention, 'm' memory-bound
  double seconds = 0;     // the roofline time of the calls together
  double min_seconds = 0; // the same at the minimum bytes
  const char* bound = ""; // what decides `seconds`: "GEMM peak", "fp32 rate", "memory" or "attention model"
};

struct StepCost {
  std::string storage, precision;
  bool native_bf16 = false;               // bf16 storage with the native bf16 ops
  std::vector<StepCostRow> rows;          // in the order of their first call
  std::vector<std::string> not_modelled;  // ops met without a formula here (cost 0 in the sum)
  double seconds = 0;                     // the sum of the rows
  double min_seconds = 0;                 // the same with every op at its minimum bytes
  double model_flops = 0;                 // 6·N·tokens + 3·attention (the bench's count)
  double gemm_peak_tflops = 0;            // run.precision's peak
};

// One training step of cfg (model, train.batch_size, attention, train.optimizer)
// with the given storage ("fp32", "bf16") and GEMM precision ("fp32", "tf32",
// "bf16") on `gpu` ("h100" or "h200"); native_bf16: with bf16 storage, the
// ops that have a native bf16 form (GPT_BACKEND_NATIVE_BF16_OPS) run it, as
// on the CUDA backend; false: every op through the adapter, as before them.
StepCost predict_step(const Config& cfg, const std::string& storage, const std::string& precision,
                      const std::string& gpu, bool native_bf16 = true);

// The tables for fp32 storage, and bf16 storage without and with the native
// ops, on `gpu`.
void run_step_cost(const Config& cfg, const std::string& gpu, std::ostream& out);

}  // namespace gpt
