// The attention cost model (src/bench/attention_cost.cpp): the work per pair
// and the predicted times against counts written out by hand from the
// model's stated per-stage costs (attention_cost.h), the byte count of a
// small case, and the choice of the bounding unit.
#include "bench/attention_cost.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "config/attention.h"
#include "core/check.h"

namespace gpt {
namespace {

AttentionSpec preset(const std::string& name) {
  AttentionConfig a;
  a.preset = name;
  ModelConfig m;
  m.context = 1024;
  return resolve_attention(a, m);
}

TEST(AttentionCost, WorkPerPairFromTheStageCosts) {
  // softmax (exp, one pass) at D = 64: q·k and p·v are 2·64 FLOPs each.
  const PairWork tc = pair_work(preset("softmax"), 64, true);
  EXPECT_EQ(tc.passes, 1);
  EXPECT_DOUBLE_EQ(tc.mma_flops, 256);
  EXPECT_DOUBLE_EQ(tc.mufu_instr, 1);          // expf's ex2
  EXPECT_DOUBLE_EQ(tc.fp32_instr, 4 + 4 + 6 + 5);  // logit, expf's arithmetic, pass 1, the bf16 rounding
  const PairWork simt = pair_work(preset("softmax"), 64, false);
  EXPECT_DOUBLE_EQ(simt.mma_flops, 0);
  EXPECT_DOUBLE_EQ(simt.fp32_instr, 4 + 4 + 6 + 128);  // the 2·64 FMAs of the two products on the CUDA cores
  // lssar: cosine scores, softplus, l1, re-weighting: two passes, q·k twice,
  // each from three bf16 products (q̂ and k̂ split into hi + lo).
  const PairWork lssar = pair_work(preset("lssar"), 64, true);
  EXPECT_EQ(lssar.passes, 2);
  EXPECT_DOUBLE_EQ(lssar.mma_flops, 3 * 2 * 128 + 128);
  EXPECT_DOUBLE_EQ(lssar.mufu_instr, 2 + 2 + 2);  // softplus in each pass, powf
  EXPECT_DOUBLE_EQ(lssar.fp32_instr, (4 + 14 + 6) + (4 + 14 + 24) + 5);
}

TEST(AttentionCost, PredictedTimesAndBytes) {
  const GpuUnits* h100 = gpu_units("h100");
  ASSERT_NE(h100, nullptr);
  EXPECT_EQ(gpu_units("a100"), nullptr);
  // One head of 64 rows: 64·65/2 pairs; one block of query rows reads the 64 keys.
  const int T = 64, D = 64;
  const CostPrediction p = predict_forward(preset("softmax"), 1, T, 1, D, true, *h100);
  const double pairs = 64.0 * 65 / 2;
  EXPECT_DOUBLE_EQ(p.t_mma, pairs * 256 / 989.4e12);
  EXPECT_DOUBLE_EQ(p.t_fp32, pairs * 19 / 33.45e12);
  EXPECT_DOUBLE_EQ(p.t_mufu, pairs * 1 / 3.9e12);
  const double bytes = 64 * 256.0 * 4 /*q, k, v, out*/ + 64 * 16.0 /*stats*/;
  EXPECT_DOUBLE_EQ(p.t_mem, bytes / 3.35e12);
  EXPECT_DOUBLE_EQ(p.t_l2, 64 * 256.0 * 2 /*k, v for the one block*/ / 5.5e12);
  EXPECT_DOUBLE_EQ(p.seconds, std::max({p.t_mma, p.t_fp32, p.t_mufu, p.t_mem, p.t_l2}));
  EXPECT_DOUBLE_EQ(p.tflops, 2.0 * D * T * (T + 1) / p.seconds / 1e12);
  // The bound is the slowest unit: a GPU without special-function throughput
  // to speak of is bound there, one with no memory bandwidth by memory.
  GpuUnits slow_mufu = *h100;
  slow_mufu.mufu_tinstr = 1e-3;
  EXPECT_STREQ(predict_forward(preset("softmax"), 1, T, 1, D, true, slow_mufu).bound, "mufu");
  GpuUnits slow_mem = *h100;
  slow_mem.hbm_tbytes = 1e-6;
  EXPECT_STREQ(predict_forward(preset("softmax"), 1, T, 1, D, true, slow_mem).bound, "memory");
  // Blocks of 64 query rows re-read k and v from L2: at T = 256, blocks
  // 1..4 read 64, 128, 192, 256 keys; lssar reads k in both passes, each
  // time its hi and lo parts (cosine scores), and v once.
  const CostPrediction q = predict_forward(preset("lssar"), 1, 256, 1, D, true, *h100);
  EXPECT_DOUBLE_EQ(q.t_l2, (64 + 128 + 192 + 256) * 256.0 * (2 * 2 + 1) / 5.5e12);
  const CostPrediction q32 = predict_forward(preset("lssar"), 1, 256, 1, D, false, *h100);
  EXPECT_DOUBLE_EQ(q32.t_l2, (64 + 128 + 192 + 256) * 256.0 * (2 + 1) / 5.5e12);
  // Long rows: compute grows as T², so time per pair settles.
  const CostPrediction a = predict_forward(preset("lssar"), 1, 4096, 12, D, true, *h100),
                       b = predict_forward(preset("lssar"), 1, 8192, 12, D, true, *h100);
  EXPECT_NEAR(b.t_mufu / a.t_mufu, 4.0, 0.01);
}

TEST(AttentionCost, BackwardWorkPerPairAndBytes) {
  // softmax at D = 64: the dq kernel's one visit (q·k, dy·v, ds·k) and the
  // dk/dv kernel's (k·q, v·dy, wᵀ·dy, dsᵀ·q): seven products of 2·64 FLOPs.
  const PairWork tc = pair_work_backward(preset("softmax"), 64, true);
  EXPECT_EQ(tc.passes, 2);
  EXPECT_DOUBLE_EQ(tc.mma_flops, 7 * 128);
  EXPECT_DOUBLE_EQ(tc.mufu_instr, 2 * 1);                     // expf at each visit
  EXPECT_DOUBLE_EQ(tc.fp32_instr, 2 * (4 + 4 + 10) + 3 * 5);  // logit, expf, gradient; three bf16 roundings
  const PairWork simt = pair_work_backward(preset("softmax"), 64, false);
  EXPECT_DOUBLE_EQ(simt.mma_flops, 0);
  EXPECT_DOUBLE_EQ(simt.fp32_instr, 2 * (4 + 4 + 10) + 7 * 64);  // the products as FMAs
  // lssar: S_i's extra visit in dq (three in all), q·k from three products
  // on tensor cores at each visit, and the re-weighting's cost at each.
  const PairWork lssar = pair_work_backward(preset("lssar"), 64, true);
  EXPECT_EQ(lssar.passes, 3);
  EXPECT_DOUBLE_EQ(lssar.mma_flops, 3 * (3 + 1) * 128 + 3 * 128);
  EXPECT_DOUBLE_EQ(lssar.mufu_instr, 3 * (2 + 2 + 4));  // softplus, powf, the gradient's powers
  EXPECT_DOUBLE_EQ(lssar.fp32_instr, 3 * (4 + 14 + 10 + 24 + 40) + 3 * 5);
  // Bytes of one head of 64 rows: eleven rows and 24 bytes per position
  // from memory; from L2, dq's one block reads k, v for its 64 keys, dk/dv's
  // one block the query tiles from 0 on (64 rows) with 24 bytes each.
  const GpuUnits* h100 = gpu_units("h100");
  ASSERT_NE(h100, nullptr);
  const CostPrediction p = predict_backward(preset("softmax"), 1, 64, 1, 64, true, *h100);
  EXPECT_DOUBLE_EQ(p.t_mem, 64 * (11 * 256.0 + 24) / 3.35e12);
  EXPECT_DOUBLE_EQ(p.t_l2, (64 * 256.0 * 2 + 64 * (256.0 * 2 + 24)) / 5.5e12);
  EXPECT_DOUBLE_EQ(p.t_mma, 64.0 * 65 / 2 * 7 * 128 / 989.4e12);
  EXPECT_DOUBLE_EQ(p.tflops, 2.5 * 2.0 * 64 * 64 * 65 / p.seconds / 1e12);
  // At T = 128 the second block of 64 keys starts at query tile 2 (row 64).
  const CostPrediction q = predict_backward(preset("softmax"), 1, 128, 1, 64, false, *h100);
  EXPECT_DOUBLE_EQ(q.t_l2, ((64 + 128) * 256.0 * 2 + (128 + 64) * (256.0 * 2 + 24)) / 5.5e12);
}

TEST(AttentionCost, TableNamesEveryUnitAndRefusesAnUnknownGpu) {
  CudaAttentionBenchOptions opt;
  opt.presets = {"softmax", "lssar", "stick_breaking"};
  opt.contexts = {1024, 16384};
  std::ostringstream out;
  run_attention_cost(opt, "h200", out);
  const std::string s = out.str();
  EXPECT_NE(s.find("h200"), std::string::npos) << s;
  EXPECT_NE(s.find("stick-breaking has kernels of its own"), std::string::npos) << s;
  int rows = 0;
  for (size_t at = 0; (at = s.find("\nsoftmax ", at)) != std::string::npos; ++at) ++rows;
  EXPECT_EQ(rows, 8) << s;  // 2 contexts x (fp32, tc) x (forward, backward)
  EXPECT_THROW(run_attention_cost(opt, "v100", out), Error);
}

}  // namespace
}  // namespace gpt
