// The optimizer (src/train/optimizer.cpp) against a plain double reference of
// its update written in the test: AdamW on every tensor, or Muon on the
// hidden matrices (each separate matrix of a fused weight alone) and AdamW on
// the rest (docs/optimizers.md).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "backend/backend.h"
#include "config/attention.h"
#include "model/gpt.h"
#include "train/optimizer.h"
#include "util/gradcheck.h"
#include "util/muon_reference.h"

namespace gpt {
namespace {

// A Llama-style block with grouped keys and values (q, k and v blocks of
// different sizes in qkvw) and SwiGLU (gate and up in fcw), an untied head.
ModelConfig small_model() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.n_embd = 16;
  m.context = 8;
  m.vocab_size = 40;
  m.norm = "rmsnorm";
  m.mlp = "swiglu";
  m.mlp_hidden = 24;
  m.bias = "none";
  m.head = "untied";
  return m;
}

// The separate matrices of each hidden tensor, spelled out for this shape:
// q (16 rows), k and v (2 heads of 4 channels: 8 rows each); gate and up (24
// rows each); the rest whole.
const std::map<std::string, std::vector<int64_t>> kBlocks = {
    {"qkvw", {16, 8, 8}}, {"attprojw", {16}}, {"fcw", {24, 24}}, {"fcprojw", {16}}};

TEST(Optimizer, MuonAndAdamWMatchThePlainReference) {
  const ModelConfig mc = small_model();
  auto be = make_cpu_backend<double>();
  GPT<double> model(mc, resolve_attention(AttentionConfig{}, mc), *be);
  model.init(5);
  TrainConfig tc;
  tc.optimizer = "muon";
  tc.lr = 4e-3;
  tc.muon_lr = 0.05;
  tc.muon_momentum = 0.9;
  tc.muon_weight_decay = 0.01;
  tc.weight_decay = 0.1;
  Optimizer<double> opt(model, tc);

  const size_t N = model.num_params();
  std::vector<double> p = model.get_params(), m(N, 0.0), v(N, 0.0);
  const ParamLayout& layout = model.layout();
  int muon_tensors = 0;
  for (const ParamSpec& s : layout.specs)
    if (s.hidden_matrix()) {
      ++muon_tensors;
      ASSERT_TRUE(kBlocks.count(s.name)) << s.name;
      EXPECT_EQ(s.row_blocks, kBlocks.at(s.name)) << s.name;
    }
  EXPECT_EQ(muon_tensors, 4);
  EXPECT_FALSE(layout.find("lmhead").hidden_matrix());
  EXPECT_FALSE(layout.find("wte").hidden_matrix());

  for (int t = 1; t <= 3; ++t) {
    const double lr = tc.lr * (t == 3 ? 0.5 : 1.0);  // a scheduled step: Muon's rate scales alike
    const std::vector<double> g = test::random_vector(N, 100 + t, -1.0, 1.0);
    std::copy(g.begin(), g.end(), model.grads());
    opt.step(lr);
    // The reference.
    for (const ParamSpec& s : layout.specs) {
      if (s.hidden_matrix()) {
        const int cols = static_cast<int>(s.shape[2]);
        size_t off = s.offset;
        for (int64_t l = 0; l < s.shape[0]; ++l)
          for (int64_t rows : kBlocks.at(s.name)) {
            const size_t n = static_cast<size_t>(rows) * cols;
            std::vector<double> u(n);
            for (size_t i = 0; i < n; ++i) {
              m[off + i] = tc.muon_momentum * m[off + i] + (1 - tc.muon_momentum) * g[off + i];
              u[i] = (1 - tc.muon_momentum) * g[off + i] + tc.muon_momentum * m[off + i];
            }
            const std::vector<double> o = test::ref_newton_schulz(u, static_cast<int>(rows), cols);
            const double scale = std::sqrt(std::max(1.0, double(rows) / cols));
            const double mlr = tc.muon_lr * lr / tc.lr;
            for (size_t i = 0; i < n; ++i)
              p[off + i] = p[off + i] * (1 - mlr * tc.muon_weight_decay) - mlr * scale * o[i];
            off += n;
          }
      } else {
        const double c1 = 1 - std::pow(tc.beta1, t), c2 = 1 - std::pow(tc.beta2, t);
        const double wd = s.decay ? tc.weight_decay : 0.0;
        for (size_t i = s.offset; i < s.offset + s.numel(); ++i) {
          m[i] = tc.beta1 * m[i] + (1 - tc.beta1) * g[i];
          v[i] = tc.beta2 * v[i] + (1 - tc.beta2) * g[i] * g[i];
          p[i] -= lr * ((m[i] / c1) / (std::sqrt(v[i] / c2) + tc.eps) + wd * p[i]);
        }
      }
    }
    const std::vector<double> got = model.get_params();
    double worst = 0, worst_m = 0;
    for (size_t i = 0; i < N; ++i) {
      worst = std::max(worst, std::abs(got[i] - p[i]));
      worst_m = std::max(worst_m, std::abs(opt.m()[i] - m[i]));
    }
    std::printf("[optimizer] muon step %d: max |param - reference| %.3g, max |state - reference| %.3g\n", t, worst,
                worst_m);
    EXPECT_LT(worst, 1e-12) << "step " << t;
    EXPECT_LT(worst_m, 1e-14) << "step " << t;
  }
  // Muon's matrices keep no second moment.
  for (const ParamSpec& s : layout.specs) {
    if (!s.hidden_matrix()) continue;
    for (size_t i = s.offset; i < s.offset + s.numel(); ++i) ASSERT_EQ(opt.v()[i], 0.0) << s.name;
  }
}

// AdamW (the default) leaves every tensor to AdamW, as before Muon existed.
TEST(Optimizer, AdamWUpdatesEveryTensorAlike) {
  const ModelConfig mc = small_model();
  auto be = make_cpu_backend<double>();
  GPT<double> model(mc, resolve_attention(AttentionConfig{}, mc), *be);
  model.init(5);
  TrainConfig tc;
  Optimizer<double> opt(model, tc);
  const size_t N = model.num_params();
  std::vector<double> p = model.get_params();
  const std::vector<double> g = test::random_vector(N, 9, -1.0, 1.0);
  std::copy(g.begin(), g.end(), model.grads());
  opt.step(tc.lr);
  const std::vector<double> got = model.get_params();
  for (const ParamSpec& s : model.layout().specs)
    for (size_t i = s.offset; i < s.offset + s.numel(); ++i) {
      // Step 1: mhat = g, vhat = g², so the direction is g / (|g| + eps).
      const double want = p[i] - tc.lr * (g[i] / (std::abs(g[i]) + tc.eps) + (s.decay ? tc.weight_decay : 0) * p[i]);
      ASSERT_NEAR(got[i], want, 1e-12) << s.name;
    }
}

}  // namespace
}  // namespace gpt
