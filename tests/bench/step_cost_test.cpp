// The cost model of a training step (src/bench/step_cost.cpp) on a small
// GPT-2 block: the linear layers' FLOPs and bytes against sums written out
// here from the shapes, the attention rows against the attention cost model,
// the roofline time of a row, the model FLOPs, and what bf16 storage changes
// (the adapter's passes, the weights counted once in the minimum).
#include "bench/step_cost.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "config/attention.h"

namespace gpt {
namespace {

Config small() {
  Config c;
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.n_embd = 32;
  c.model.vocab_size = 100;
  c.model.vocab_pad_multiple = 64;  // Vp = 128
  c.model.context = 16;
  c.model.position = "learned";
  c.train.batch_size = 3;
  return c;
}

const StepCostRow& row(const StepCost& sc, const std::string& op) {
  auto it = std::find_if(sc.rows.begin(), sc.rows.end(), [&](const StepCostRow& r) { return r.op == op; });
  if (it == sc.rows.end()) throw std::runtime_error("no row " + op);
  return *it;
}

TEST(StepCost, LinearLayersFromTheShapes) {
  const Config cfg = small();
  const StepCost sc = predict_step(cfg, "fp32", "tf32", "h100");
  EXPECT_TRUE(sc.not_modelled.empty());
  const double N = 3 * 16, C = 32, Vp = 128, L = 2;
  // Per layer qkv (C -> 3C), attention output (C -> C), fc (C -> 4C), fc
  // output (4C -> C), all with biases; then the LM head (C -> Vp), no bias.
  struct Lin {
    double in, out, bias;
  };
  const Lin layer[] = {{C, 3 * C, 1}, {C, C, 1}, {C, 4 * C, 1}, {4 * C, C, 1}};
  double fwd_flops = 0, fwd_bytes = 0, bwd_flops = 0, bwd_bytes = 0;
  auto add = [&](const Lin& l) {
    fwd_flops += 2 * N * l.in * l.out;
    fwd_bytes += 4 * (N * l.in + l.out * l.in + l.bias * l.out + N * l.out);
    // dinp and dW (2·N·in·out each) and dbias (N·out); dout, inp, W read;
    // dinp, dW, dbias read and written (every backward accumulates).
    bwd_flops += 4 * N * l.in * l.out + l.bias * N * l.out;
    bwd_bytes += 4 * (N * l.out + N * l.in + l.out * l.in) + 4 * 2 * (N * l.in + l.out * l.in + l.bias * l.out);
  };
  for (int i = 0; i < L; ++i)
    for (const Lin& l : layer) add(l);
  add({C, Vp, 0});
  const StepCostRow& f = row(sc, "matmul_forward");
  EXPECT_EQ(f.calls, 4 * L + 1);
  EXPECT_DOUBLE_EQ(f.flops, fwd_flops);
  EXPECT_DOUBLE_EQ(f.min_bytes, fwd_bytes);
  EXPECT_DOUBLE_EQ(f.code_bytes, fwd_bytes);
  // The row's time: its FLOPs at the TF32 peak or its bytes at 3.35 TB/s.
  EXPECT_DOUBLE_EQ(f.seconds, std::max(fwd_flops / 494.7e12, fwd_bytes / 3.35e12));
  const StepCostRow& b = row(sc, "matmul_backward");
  EXPECT_EQ(b.calls, 4 * L + 1);
  EXPECT_DOUBLE_EQ(b.flops, bwd_flops);
  EXPECT_DOUBLE_EQ(b.min_bytes, bwd_bytes);
  // The model FLOPs: 6 per weight and token plus 3 attention forwards.
  const double W = L * (C * 3 * C + C * C + C * 4 * C + 4 * C * C) + 100 * C;
  EXPECT_DOUBLE_EQ(sc.model_flops, 6 * W * N + 3 * L * 2.0 * 3 * C * 16 * 17);
  // The step's time is the sum of its rows.
  double sum = 0;
  for (const StepCostRow& r : sc.rows) sum += r.seconds;
  EXPECT_DOUBLE_EQ(sc.seconds, sum);
}

TEST(StepCost, AttentionFromTheAttentionCostModel) {
  const Config cfg = small();
  const StepCost sc = predict_step(cfg, "fp32", "tf32", "h100");
  const CostPrediction p = predict_forward(resolve_attention(cfg), 3, 16, 2, 16, false, *gpu_units("h100"));
  EXPECT_EQ(row(sc, "attention_forward").calls, 2);
  EXPECT_DOUBLE_EQ(row(sc, "attention_forward").seconds, 2 * p.seconds);
  EXPECT_DOUBLE_EQ(row(sc, "attention_backward").seconds, 2 * 2.5 * p.seconds);
  // AdamW: param, m, v read and written, the gradient read, 4 bytes each;
  // the parameters: wte (Vp = 128 rows, as llm.c pads it), wpe, per layer
  // the four linear layers with biases and two LayerNorms, the final one.
  const double P = 128 * 32 + 16 * 32 + 2 * (3 * 32 * 32 + 3 * 32 + 32 * 32 + 32 + 4 * 32 * 32 + 4 * 32 +
                                             4 * 32 * 32 + 32 + 4 * 32) + 2 * 32;
  EXPECT_DOUBLE_EQ(row(sc, "adamw_update").min_bytes, 28 * P);
}

TEST(StepCost, Bf16StorageCountsTheAdaptersPasses) {
  const Config cfg = small();
  const StepCost f = predict_step(cfg, "fp32", "bf16", "h100");
  const StepCost b = predict_step(cfg, "bf16", "bf16", "h100", /*native_bf16=*/false);
  EXPECT_TRUE(b.not_modelled.empty());
  // The adapter's passes: bytes in the code, none in the minimum.
  for (const char* op : {"bf16 adapter: widen", "bf16 adapter: round results"}) {
    EXPECT_GT(row(b, op).code_bytes, 0) << op;
    EXPECT_EQ(row(b, op).min_bytes, 0) << op;
  }
  EXPECT_EQ(row(b, "round master parameters to bf16").calls, 1);
  // The linear layers read bf16 as stored: the same FLOPs; the minimum has
  // 2-byte activations and weights, float32 biases.
  const StepCostRow& lin = row(b, "matmul_forward (bf16 in)");
  EXPECT_DOUBLE_EQ(lin.flops, row(f, "matmul_forward").flops);
  const double N = 48, C = 32, Vp = 128;
  double min_bytes = 0;
  const double shapes[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
  for (int l = 0; l < 2; ++l)
    for (const auto& s : shapes) min_bytes += 2 * (N * s[0] + s[1] * s[0] + N * s[1]) + 4 * s[1];
  min_bytes += 2 * (N * C + Vp * C + N * Vp);
  EXPECT_DOUBLE_EQ(lin.min_bytes, min_bytes);
  // Element-wise ops move half the bytes at their minimum, all of them
  // float32 in the code.
  EXPECT_DOUBLE_EQ(row(b, "gelu_forward").min_bytes, row(f, "gelu_forward").min_bytes / 2);
  EXPECT_DOUBLE_EQ(row(b, "gelu_forward").code_bytes, row(f, "gelu_forward").code_bytes);
  EXPECT_GT(b.seconds, b.min_seconds);
  EXPECT_DOUBLE_EQ(f.seconds, f.min_seconds);

  // With the native bf16 ops (as the CUDA backend runs them): those ops
  // move their minimum bytes, in one call each, and the adapter's passes
  // that were theirs are gone.
  const StepCost n = predict_step(cfg, "bf16", "bf16", "h100", /*native_bf16=*/true);
  for (const char* op : {"layernorm_forward", "layernorm_backward", "gelu_forward", "gelu_backward",
                         "residual_forward", "crossentropy_forward", "crossentropy_backward"}) {
    const StepCostRow& r = row(n, std::string(op) + " (bf16 native)");
    EXPECT_DOUBLE_EQ(r.code_bytes, r.min_bytes) << op;
    EXPECT_DOUBLE_EQ(r.min_bytes, row(b, op).min_bytes) << op;
    EXPECT_EQ(r.calls, row(b, op).calls) << op;  // one chunk each here
    EXPECT_THROW(row(n, op), std::runtime_error) << op;
  }
  EXPECT_LT(row(n, "bf16 adapter: widen").code_bytes, row(b, "bf16 adapter: widen").code_bytes);
  EXPECT_LT(n.seconds, b.seconds);
  EXPECT_DOUBLE_EQ(n.min_seconds, b.min_seconds);
}

TEST(StepCost, TheTablePrintsBothStoragesAndRefusesAnUnknownGpu) {
  std::ostringstream out;
  run_step_cost(small(), "h200", out);
  const std::string s = out.str();
  EXPECT_NE(s.find("run.storage fp32, run.precision tf32"), std::string::npos) << s;
  EXPECT_NE(s.find("run.storage bf16, run.precision bf16"), std::string::npos) << s;
  EXPECT_NE(s.find("predicted step"), std::string::npos) << s;
  EXPECT_NE(s.find("4.80 TB/s"), std::string::npos) << s;
  EXPECT_THROW(predict_step(small(), "fp32", "tf32", "a100"), std::exception);
  EXPECT_THROW(predict_step(small(), "fp16", "tf32", "h100"), std::exception);
}

}  // namespace
}  // namespace gpt
