// CUDA backend vs CPU backend, op by op, on random inputs (forward and
// backward), and a few training steps of a tiny GPT on both. Every test goes
// through Backend<float> (make_backend("cuda") vs make_cpu_backend<float>()),
// so the backend's plumbing is tested with the kernels. The file compiles
// with or without CUDA; without a usable device (a CPU-only build, a machine
// without a GPU, CI) every parity test reports "skipped: no CUDA device".
// GEMMs run in strict float32 (GPT_CUDA_TF32=0 is forced here).
//
// Tolerances (float32, TF32 off), as err = |gpu - cpu| / (|cpu| + mean|cpu|),
// i.e. relative to the entry with the tensor's mean magnitude as a floor so
// that entries near zero are not held to a relative bound:
//   element-wise ops (encoder, residual, add, scale, AdamW, RoPE)   1e-5
//   GELU (expf vs the CPU's vectorised exp)                          1e-5
//   row reductions (LayerNorm, cross-entropy: tree vs sequential sums) 1e-5 fwd, 1e-4 bwd
//   GEMM-based (matmul fwd/bwd; the bias and LayerNorm parameter
//   gradients summed over rows)                                       1e-4
//   sum of squares (both in double)                                   1e-9 relative
//   whole model after a few AdamW steps: losses within 1e-4 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "config/attention.h"
#include "core/check.h"
#include "model/gpt.h"
#include "train/optimizer.h"

namespace gpt {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<int32_t> random_ids(size_t n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> u(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = u(rng);
  return v;
}

// Max over i of |g - c| / (|c| + mean|c|); EXPECTs it to be <= tol.
void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, double tol, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double mean_abs = 0;
  for (float c : cpu) mean_abs += std::abs(c);
  mean_abs = cpu.empty() ? 0 : mean_abs / cpu.size();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double err = std::abs(double(gpu[i]) - cpu[i]) / (std::abs(cpu[i]) + mean_abs + 1e-30);
    if (!(err <= worst)) {  // also catches NaN
      worst = std::isnan(err) ? INFINITY : err;
      at = i;
    }
  }
  EXPECT_LE(worst, tol) << what << ": worst at " << at << ": gpu " << gpu[at] << " cpu " << cpu[at];
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) GTEST_SKIP() << "no CUDA device (" << why << ")";
    setenv("GPT_CUDA_TF32", "0", 1);
    gpu_ = make_backend("cuda");
    cpu_ = make_cpu_backend<float>();
  }

  // A device tensor holding a copy of host data.
  Buffer<float> up(const std::vector<float>& h) {
    Buffer<float> b(*gpu_, h.size());
    gpu_->upload(b.get(), h.data(), h.size());
    return b;
  }
  TokenBuffer<float> up_ids(const std::vector<int32_t>& h) {
    TokenBuffer<float> b(*gpu_, h.size());
    gpu_->upload_tokens(b.get(), h.data(), h.size());
    return b;
  }
  std::vector<float> down(const Buffer<float>& b, size_t n) {
    std::vector<float> h(n);
    gpu_->download(h.data(), b.get(), n);
    return h;
  }

  std::unique_ptr<Backend<float>> gpu_, cpu_;
};

TEST_F(CudaOps, Encoder) {
  const int B = 3, T = 17, C = 40, V = 5;  // few tokens: many repeats in the atomic scatter
  const auto ids = random_ids(B * T, V, 1);
  const auto wte = random_floats(V * C, 2), wpe = random_floats(T * C, 3), dout = random_floats(B * T * C, 4);
  auto dwte = random_floats(V * C, 5), dwpe = random_floats(T * C, 6);  // backward accumulates
  for (bool with_wpe : {true, false}) {
    auto g_ids = up_ids(ids);
    auto g_wte = up(wte), g_wpe = up(wpe), g_out = up(std::vector<float>(B * T * C));
    std::vector<float> out(B * T * C);
    cpu_->encoder_forward(out.data(), ids.data(), wte.data(), with_wpe ? wpe.data() : nullptr, B, T, C);
    gpu_->encoder_forward(g_out.get(), g_ids.get(), g_wte.get(), with_wpe ? g_wpe.get() : nullptr, B, T, C);
    expect_close(down(g_out, out.size()), out, 1e-6, "encoder_forward");

    auto g_dwte = up(dwte), g_dwpe = up(dwpe), g_dout = up(dout);
    std::vector<float> c_dwte = dwte, c_dwpe = dwpe;
    cpu_->encoder_backward(c_dwte.data(), with_wpe ? c_dwpe.data() : nullptr, dout.data(), ids.data(), B, T, C);
    gpu_->encoder_backward(g_dwte.get(), with_wpe ? g_dwpe.get() : nullptr, g_dout.get(), g_ids.get(), B, T, C);
    expect_close(down(g_dwte, dwte.size()), c_dwte, 1e-5, "encoder_backward dwte");
    expect_close(down(g_dwpe, dwpe.size()), c_dwpe, 1e-5, "encoder_backward dwpe");
  }
}

TEST_F(CudaOps, LayerNorm) {
  const int N = 37, C = 72;
  auto inp = random_floats(N * C, 1, -2.f, 3.f);  // non-zero mean
  const auto w = random_floats(C, 2, 0.5f, 1.5f), b = random_floats(C, 3), dout = random_floats(N * C, 4);
  std::vector<float> out(N * C), mean(N), rstd(N);
  cpu_->layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  auto g_inp = up(inp), g_w = up(w), g_b = up(b), g_out = up(out), g_mean = up(mean), g_rstd = up(rstd);
  gpu_->zero(g_out.get(), out.size());
  gpu_->layernorm_forward(g_out.get(), g_mean.get(), g_rstd.get(), g_inp.get(), g_w.get(), g_b.get(), N, C);
  expect_close(down(g_out, out.size()), out, 1e-5, "layernorm_forward out");
  expect_close(down(g_mean, N), mean, 1e-5, "layernorm_forward mean");
  expect_close(down(g_rstd, N), rstd, 1e-5, "layernorm_forward rstd");

  auto dinp = random_floats(N * C, 5), dw = random_floats(C, 6), db = random_floats(C, 7);
  auto g_dinp = up(dinp), g_dw = up(dw), g_db = up(db), g_dout = up(dout);
  // Both backward passes from the CPU's statistics, so only the backward differs.
  auto c_mean = up(mean), c_rstd = up(rstd);
  cpu_->layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                           rstd.data(), N, C);
  gpu_->layernorm_backward(g_dinp.get(), g_dw.get(), g_db.get(), g_dout.get(), g_inp.get(), g_w.get(), c_mean.get(),
                           c_rstd.get(), N, C);
  expect_close(down(g_dinp, dinp.size()), dinp, 1e-4, "layernorm_backward dinp");
  expect_close(down(g_dw, C), dw, 1e-4, "layernorm_backward dweight");
  expect_close(down(g_db, C), db, 1e-4, "layernorm_backward dbias");
}

// Odd shapes, and the weight at an offset of one float inside its buffer (as
// parameter tensors sit inside the flat parameter buffer): cuBLASLt must be
// told the real alignment.
TEST_F(CudaOps, Matmul) {
  for (auto [N, C, OC] : {std::tuple{37, 24, 40}, std::tuple{64, 64, 192}, std::tuple{5, 3, 7}}) {
    const std::string shape = " N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
    const auto inp = random_floats(N * C, 1), bias = random_floats(OC, 3), dout = random_floats(N * OC, 4);
    const auto wbuf = random_floats(OC * C + 1, 2);
    const std::vector<float> w(wbuf.begin() + 1, wbuf.end());
    auto g_inp = up(inp), g_wbuf = up(wbuf), g_bias = up(bias), g_dout = up(dout);
    const float* g_w = g_wbuf.get() + 1;
    for (bool with_bias : {true, false}) {
      std::vector<float> out(N * OC);
      cpu_->matmul_forward(out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, C, OC);
      auto g_out = up(random_floats(N * OC, 9));  // forward overwrites
      gpu_->matmul_forward(g_out.get(), g_inp.get(), g_w, with_bias ? g_bias.get() : nullptr, N, C, OC);
      expect_close(down(g_out, out.size()), out, 1e-4, "matmul_forward" + shape);
    }
    for (bool with_dinp : {true, false}) {
      auto dinp = random_floats(N * C, 5), dw = random_floats(OC * C, 6), db = random_floats(OC, 7);
      auto g_dinp = up(dinp), g_dw = up(dw), g_db = up(db);
      cpu_->matmul_backward(with_dinp ? dinp.data() : nullptr, dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                            N, C, OC);
      gpu_->matmul_backward(with_dinp ? g_dinp.get() : nullptr, g_dw.get(), g_db.get(), g_dout.get(), g_inp.get(), g_w,
                            N, C, OC);
      expect_close(down(g_dinp, dinp.size()), dinp, 1e-4, "matmul_backward dinp" + shape);
      expect_close(down(g_dw, dw.size()), dw, 1e-4, "matmul_backward dweight" + shape);
      expect_close(down(g_db, db.size()), db, 1e-4, "matmul_backward dbias" + shape);
    }
  }
}

TEST_F(CudaOps, Gelu) {
  auto inp = random_floats(10007, 1, -6.f, 6.f);
  inp[0] = 150.f;  // past the backward's clamp
  inp[1] = -150.f;
  const auto dout = random_floats(inp.size(), 2);
  auto dinp = random_floats(inp.size(), 3);
  std::vector<float> out(inp.size());
  cpu_->gelu_forward(out.data(), inp.data(), inp.size());
  auto g_inp = up(inp), g_out = up(out), g_dout = up(dout), g_dinp = up(dinp);
  gpu_->gelu_forward(g_out.get(), g_inp.get(), inp.size());
  expect_close(down(g_out, out.size()), out, 1e-5, "gelu_forward");
  cpu_->gelu_backward(dinp.data(), inp.data(), dout.data(), inp.size());
  gpu_->gelu_backward(g_dinp.get(), g_inp.get(), g_dout.get(), inp.size());
  expect_close(down(g_dinp, dinp.size()), dinp, 1e-5, "gelu_backward");
}

TEST_F(CudaOps, ElementwiseAndSumSquares) {
  const size_t n = 100003;
  const auto a = random_floats(n, 1), b = random_floats(n, 2);
  auto g_a = up(a), g_b = up(b), g_out = up(std::vector<float>(n));
  std::vector<float> out(n), acc = a;
  cpu_->residual_forward(out.data(), a.data(), b.data(), n);
  gpu_->residual_forward(g_out.get(), g_a.get(), g_b.get(), n);
  expect_close(down(g_out, n), out, 1e-6, "residual_forward");
  cpu_->add_inplace(acc.data(), b.data(), n);
  gpu_->add_inplace(g_a.get(), g_b.get(), n);
  expect_close(down(g_a, n), acc, 1e-6, "add_inplace");
  cpu_->scale_inplace(acc.data(), 0.37f, n);
  gpu_->scale_inplace(g_a.get(), 0.37f, n);
  expect_close(down(g_a, n), acc, 1e-6, "scale_inplace");
  const double c = cpu_->sum_squares(acc.data(), n), g = gpu_->sum_squares(g_a.get(), n);
  EXPECT_NEAR(g, c, 1e-9 * c) << "sum_squares";
  EXPECT_EQ(gpu_->sum_squares(g_a.get(), 0), 0.0);
  EXPECT_NEAR(gpu_->sum_squares(g_a.get(), 1), double(acc[0]) * acc[0], 1e-12);
}

TEST_F(CudaOps, Rope) {
  const int B = 2, T = 9, C = 48, NH = 3;
  const size_t n = size_t(B) * T * 3 * C;
  const auto inp = random_floats(n, 1), dout = random_floats(n, 2);
  for (int pos0 : {0, 1000}) {  // 1000: large angles, as in evaluation past the context
    std::vector<float> out(n);
    cpu_->rope_forward(out.data(), inp.data(), B, T, C, NH, 10000.0, pos0);
    auto g_inp = up(inp), g_out = up(std::vector<float>(n));
    gpu_->rope_forward(g_out.get(), g_inp.get(), B, T, C, NH, 10000.0, pos0);
    expect_close(down(g_out, n), out, 1e-5, "rope_forward pos0=" + std::to_string(pos0));
    auto dinp = random_floats(n, 3);
    auto g_dinp = up(dinp), g_dout = up(dout);
    cpu_->rope_backward(dinp.data(), dout.data(), B, T, C, NH, 10000.0, pos0);
    gpu_->rope_backward(g_dinp.get(), g_dout.get(), B, T, C, NH, 10000.0, pos0);
    expect_close(down(g_dinp, n), dinp, 1e-5, "rope_backward pos0=" + std::to_string(pos0));
  }
  auto g = up(inp), g_out = up(inp);
  EXPECT_THROW(gpu_->rope_forward(g_out.get(), g.get(), B, T, 45, NH, 10000.0, 0), Error);  // odd head size
}

TEST_F(CudaOps, CrossEntropyFusedInPlace) {
  const int N = 13, V = 1000, Vp = 1024;  // more columns than threads per block
  auto logits = random_floats(size_t(N) * Vp, 1, -8.f, 8.f);
  for (int i = 0; i < N; ++i)
    for (int v = V; v < Vp; ++v) logits[size_t(i) * Vp + v] = 1e4f;  // padding must never enter the softmax
  const auto targets = random_ids(N, V, 2);
  const auto dloss = random_floats(N, 3, 0.1f, 1.f);
  std::vector<float> losses(N);
  cpu_->crossentropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
  auto g_logits = up(logits), g_losses = up(losses), g_dloss = up(dloss);
  auto g_targets = up_ids(targets);
  gpu_->crossentropy_forward(g_losses.get(), g_logits.get(), g_targets.get(), N, V, Vp);
  expect_close(down(g_losses, N), losses, 1e-5, "crossentropy_forward");

  std::vector<float> dlogits(logits.size());
  cpu_->crossentropy_backward(dlogits.data(), logits.data(), targets.data(), dloss.data(), N, V, Vp);
  // Separate output, then in place over the logits (as the model calls it).
  auto g_dlogits = up(random_floats(logits.size(), 4));
  gpu_->crossentropy_backward(g_dlogits.get(), g_logits.get(), g_targets.get(), g_dloss.get(), N, V, Vp);
  expect_close(down(g_dlogits, dlogits.size()), dlogits, 1e-4, "crossentropy_backward");
  gpu_->crossentropy_backward(g_logits.get(), g_logits.get(), g_targets.get(), g_dloss.get(), N, V, Vp);
  const auto inplace = down(g_logits, logits.size());
  expect_close(inplace, dlogits, 1e-4, "crossentropy_backward in place");
  for (int i = 0; i < N; ++i) EXPECT_EQ(inplace[size_t(i) * Vp + V], 0.f) << "padding of row " << i;
}

TEST_F(CudaOps, AdamW) {
  const size_t n = 5003;
  auto param = random_floats(n, 1), m = std::vector<float>(n), v = std::vector<float>(n);
  auto g_param = up(param), g_m = up(m), g_v = up(v);
  for (long t = 1; t <= 3; ++t) {
    const auto grad = random_floats(n, 10 + t);
    auto g_grad = up(grad);
    cpu_->adamw_update(param.data(), grad.data(), m.data(), v.data(), n, 1e-2, 0.9, 0.95, 1e-8, 0.1, t);
    gpu_->adamw_update(g_param.get(), g_grad.get(), g_m.get(), g_v.get(), n, 1e-2, 0.9, 0.95, 1e-8, 0.1, t);
  }
  expect_close(down(g_param, n), param, 1e-5, "adamw param");
  expect_close(down(g_m, n), m, 1e-5, "adamw m");
  expect_close(down(g_v, n), v, 1e-5, "adamw v");
  EXPECT_THROW(gpu_->adamw_update(g_param.get(), g_param.get(), g_m.get(), g_v.get(), n, 1e-2, 0.9, 0.95, 1e-8, 0.1, 0),
               Error);
}

// The backend's attention plumbing (device diagnostics added into the host
// array); the kernel's own parity over every preset is tested with it.
TEST_F(CudaOps, AttentionThroughBackend) {
  const int B = 2, T = 11, C = 32, NH = 4;
  AttentionSpec spec;
  spec.trained_context = T;
  const auto qkv = random_floats(size_t(B) * T * 3 * C, 1), dout = random_floats(size_t(B) * T * C, 2);
  const std::vector<float> scale(NH, 1.f);
  std::vector<float> out(B * T * C), stats(size_t(B) * NH * T * spec.stats_per_row());
  std::vector<double> diag(NH * kAttentionDiagStats, 1.0), g_diag = diag;
  cpu_->attention_forward(out.data(), stats.data(), qkv.data(), B, T, C, NH, spec, scale.data(), diag.data());
  auto g_qkv = up(qkv), g_out = up(out), g_stats = up(stats), g_scale = up(scale), g_dout = up(dout);
  gpu_->attention_forward(g_out.get(), g_stats.get(), g_qkv.get(), B, T, C, NH, spec, g_scale.get(), g_diag.data());
  expect_close(down(g_out, out.size()), out, 1e-5, "attention_forward");
  for (size_t i = 0; i < diag.size(); ++i) EXPECT_NEAR(g_diag[i], diag[i], 1e-4 * (1 + std::abs(diag[i]))) << i;
  std::vector<float> dqkv(qkv.size()), dscale(NH);
  auto g_dqkv = up(dqkv);
  cpu_->attention_backward(dqkv.data(), dscale.data(), dout.data(), out.data(), stats.data(), qkv.data(), B, T, C, NH,
                           spec, scale.data());
  gpu_->attention_backward(g_dqkv.get(), nullptr, g_dout.get(), g_out.get(), g_stats.get(), g_qkv.get(), B, T, C, NH,
                           spec, g_scale.get());
  expect_close(down(g_dqkv, dqkv.size()), dqkv, 1e-4, "attention_backward");
}

// A tiny GPT trained a few AdamW steps on each backend from the same
// initialisation: the same losses, then the same evaluation losses.
TEST_F(CudaOps, TinyModelTrainsLikeCpu) {
  ModelConfig mc;
  mc.n_layer = 2;
  mc.n_head = 4;
  mc.n_embd = 32;
  mc.vocab_size = 50;
  mc.context = 16;
  mc.position = "rope";
  TrainConfig tc;
  tc.lr = 1e-3;
  AttentionConfig ac;
  const AttentionSpec spec = resolve_attention(ac, mc);
  const int B = 4, T = mc.context, steps = 4;
  GPT<float> on_cpu(mc, spec, *cpu_), on_gpu(mc, spec, *gpu_);
  on_cpu.init(5);
  on_gpu.set_params(on_cpu.get_params());
  AdamW<float> opt_cpu(on_cpu, tc), opt_gpu(on_gpu, tc);
  for (int s = 0; s < steps; ++s) {
    const auto ids = random_ids(size_t(B) * T + 1, mc.vocab_size, 100 + s);
    const std::vector<int32_t> in(ids.begin(), ids.end() - 1), tg(ids.begin() + 1, ids.end());
    double losses[2];
    int k = 0;
    for (auto [model, opt] : {std::pair{&on_cpu, &opt_cpu}, std::pair{&on_gpu, &opt_gpu}}) {
      model->zero_grad();
      losses[k++] = model->forward(in.data(), tg.data(), B, T);
      model->backward();
      opt->clip(1.0);
      opt->step(tc.lr);
    }
    EXPECT_NEAR(losses[1], losses[0], 1e-4 * losses[0]) << "step " << s;
  }
  const auto ids = random_ids(size_t(2) * 2 * T + 1, mc.vocab_size, 99);
  const std::vector<int32_t> in(ids.begin(), ids.end() - 1), tg(ids.begin() + 1, ids.end());
  std::vector<float> lc, lg;
  on_cpu.forward_losses(in.data(), tg.data(), 2, 2 * T, lc);  // past the training context
  on_gpu.forward_losses(in.data(), tg.data(), 2, 2 * T, lg);
  expect_close(lg, lc, 1e-4, "evaluation losses after training");
}

// These run everywhere: the CUDA backend where a device is present, otherwise
// a clear error (a machine without a GPU, a CPU-only build).
TEST(CudaBackendFactory, CudaBackendOrClearError) {
  std::string why;
  if (cuda_available(&why)) {
    EXPECT_EQ(make_backend("cuda")->name().rfind("cuda", 0), 0u);
    return;
  }
  EXPECT_FALSE(why.empty());
  try {
    make_backend("cuda");
    FAIL() << "make_backend(\"cuda\") should throw without a device";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("run.device \"cuda\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("valid: cpu"), std::string::npos) << msg;
  }
}

TEST(CudaBackendFactory, KnowsItsDevices) {
  EXPECT_EQ(make_backend("cpu")->name(), "cpu");
  try {
    make_backend("tpu");
    FAIL() << "make_backend(\"tpu\") should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("valid: cpu, cuda"), std::string::npos) << e.what();
  }
  setenv("GPT_CUDA_TF32", "yes", 1);
  EXPECT_THROW(cuda_tf32_from_env(), Error);
  setenv("GPT_CUDA_TF32", "1", 1);
  EXPECT_TRUE(cuda_tf32_from_env());
  unsetenv("GPT_CUDA_TF32");
  EXPECT_FALSE(cuda_tf32_from_env());
}

}  // namespace
}  // namespace gpt
