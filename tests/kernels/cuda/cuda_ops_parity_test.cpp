// CUDA backend vs CPU backend, op by op, on random inputs (forward and
// backward), and a few training steps of a tiny GPT on both. Every test goes
// through Backend<float> (make_backend("cuda") vs make_cpu_backend<float>()),
// so the backend's plumbing is tested with the kernels. The file compiles
// with or without CUDA; without a usable device (a CPU-only build, a machine
// without a GPU, CI) every parity test reports "skipped: no CUDA device".
// GEMMs run in strict float32 (run.precision "fp32") except in the CudaBf16
// tests at the end (run.precision "bf16"; their tolerances are stated there).
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
#include <bit>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "config/attention.h"
#include "core/check.h"
#include "kernels/bf16_round.h"
#include "kernels/muon_spec.h"
#include "model/gpt.h"
#include "train/optimizer.h"

#ifdef GPT_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_kernels.h"
#endif

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

// A tiny GPT (2 layers, 2 heads, C = 32, RoPE, softmax) on the CPU and on a
// CUDA backend from the same initialisation, trained with AdamW on the same
// random batches, one step at a time.
struct TinyModelPair {
  static ModelConfig model_config() {
    ModelConfig mc;
    mc.n_layer = 2;
    mc.n_head = 2;  // head size 16, the smallest the CUDA attention kernels take
    mc.n_embd = 32;
    mc.vocab_size = 50;
    mc.context = 16;
    mc.position = "rope";
    return mc;
  }
  static TrainConfig train_config() {
    TrainConfig tc;
    tc.lr = 1e-3;
    return tc;
  }
  TinyModelPair(Backend<float>& cpu, Backend<float>& gpu, const ModelConfig& m = model_config())
      : mc(m),
        tc(train_config()),
        spec(resolve_attention(AttentionConfig{}, mc)),
        on_cpu(mc, spec, cpu),
        on_gpu(mc, spec, gpu),
        opt_cpu(on_cpu, tc),
        opt_gpu(on_gpu, tc) {
    on_cpu.init(5);
    on_gpu.set_params(on_cpu.get_params());
  }
  // `steps` training steps with the same losses, then the same evaluation
  // losses at twice the context (tokens drawn with `seed`).
  void expect_trains_alike(int steps, uint32_t seed, const std::string& what) {
    for (int s = 0; s < steps; ++s) {
      const auto [cpu, gpu] = step(s);
      EXPECT_NEAR(gpu, cpu, 1e-4 * cpu) << what << ": step " << s;
    }
    const int T = mc.context;
    const auto ids = random_ids(size_t(2) * 2 * T + 1, mc.vocab_size, seed);
    const std::vector<int32_t> in(ids.begin(), ids.end() - 1), tg(ids.begin() + 1, ids.end());
    std::vector<float> lc, lg;
    on_cpu.forward_losses(in.data(), tg.data(), 2, 2 * T, lc);
    on_gpu.forward_losses(in.data(), tg.data(), 2, 2 * T, lg);
    expect_close(lg, lc, 1e-4, what);
  }
  // Training step s (B = 4 sequences of T = 16) on both: {cpu loss, gpu loss}.
  std::pair<double, double> step(int s) {
    const int B = 4, T = mc.context;
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
    return {losses[0], losses[1]};
  }

  ModelConfig mc;
  TrainConfig tc;
  AttentionSpec spec;
  GPT<float> on_cpu, on_gpu;
  Optimizer<float> opt_cpu, opt_gpu;
};

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) GTEST_SKIP() << "no CUDA device (" << why << ")";
    gpu_ = make_backend("cuda", "fp32");
    cpu_ = make_cpu_backend<float>();
  }

  // A device tensor holding a copy of host data.
  Buffer<float> up(const std::vector<float>& h) {
    Buffer<float> b(*gpu_, h.size());
    gpu_->upload(b.get(), h.data(), h.size());
    return b;
  }
  TokenBuffer up_ids(const std::vector<int32_t>& h) {
    TokenBuffer b(*gpu_, h.size());
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
    cpu_->encoder_forward(out.data(), ids.data(), wte.data(), with_wpe ? wpe.data() : nullptr, B, T, C, V);
    gpu_->encoder_forward(g_out.get(), g_ids.get(), g_wte.get(), with_wpe ? g_wpe.get() : nullptr, B, T, C, V);
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

TEST_F(CudaOps, RmsNorm) {
  const int N = 37, C = 72;
  const auto inp = random_floats(N * C, 1, -2.f, 3.f), w = random_floats(C, 2, 0.5f, 1.5f),
             dout = random_floats(N * C, 4);
  std::vector<float> out(N * C), rstd(N);
  cpu_->rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, 1e-6);
  auto g_inp = up(inp), g_w = up(w), g_out = up(out), g_rstd = up(rstd);
  gpu_->zero(g_out.get(), out.size());
  gpu_->rmsnorm_forward(g_out.get(), g_rstd.get(), g_inp.get(), g_w.get(), N, C, 1e-6);
  expect_close(down(g_out, out.size()), out, 1e-5, "rmsnorm_forward out");
  expect_close(down(g_rstd, N), rstd, 1e-5, "rmsnorm_forward rstd");
  auto dinp = random_floats(N * C, 5), dw = random_floats(C, 6);
  auto g_dinp = up(dinp), g_dw = up(dw), g_dout = up(dout), c_rstd = up(rstd);
  cpu_->rmsnorm_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);
  gpu_->rmsnorm_backward(g_dinp.get(), g_dw.get(), g_dout.get(), g_inp.get(), g_w.get(), c_rstd.get(), N, C);
  expect_close(down(g_dinp, dinp.size()), dinp, 1e-4, "rmsnorm_backward dinp");
  expect_close(down(g_dw, C), dw, 1e-4, "rmsnorm_backward dweight");
}

TEST_F(CudaOps, GqaExpandAndReduce) {
  for (auto [NH, NKV] : {std::pair{8, 2}, std::pair{6, 1}}) {
    const int N = 19, D = 16, C = NH * D, W = C + 2 * NKV * D;
    const auto g = random_floats(N * W, 1), dqkv = random_floats(N * 3 * C, 2);
    std::vector<float> qkv(N * 3 * C);
    auto dg = random_floats(N * W, 3);
    cpu_->gqa_expand(qkv.data(), g.data(), N, NH, NKV, D);
    auto g_g = up(g), g_qkv = up(qkv), g_dqkv = up(dqkv), g_dg = up(dg);
    gpu_->zero(g_qkv.get(), qkv.size());
    gpu_->gqa_expand(g_qkv.get(), g_g.get(), N, NH, NKV, D);
    expect_close(down(g_qkv, qkv.size()), qkv, 0.0, "gqa_expand");
    cpu_->gqa_reduce(dg.data(), dqkv.data(), N, NH, NKV, D);
    gpu_->gqa_reduce(g_dg.get(), g_dqkv.get(), N, NH, NKV, D);
    expect_close(down(g_dg, dg.size()), dg, 1e-6, "gqa_reduce");
  }
}

TEST_F(CudaOps, QkNorm) {
  const int N = 23, NH = 4, D = 48, C = NH * D;
  const auto inp = random_floats(N * 3 * C, 1, -2.f, 2.f), wq = random_floats(D, 2, 0.5f, 1.5f),
             wk = random_floats(D, 3, 0.5f, 1.5f), sq = random_floats(NH, 8, 0.5f, 2.f),
             dout = random_floats(N * 3 * C, 4);
  for (auto [gains, scale] :
       {std::pair{true, false}, std::pair{false, false}, std::pair{true, true}, std::pair{false, true}}) {
    std::vector<float> out(N * 3 * C), rstd(N * 2 * NH);
    cpu_->qknorm_forward(out.data(), rstd.data(), inp.data(), gains ? wq.data() : nullptr, gains ? wk.data() : nullptr,
                         scale ? sq.data() : nullptr, N, NH, D, 1e-6);
    auto g_inp = up(inp), g_wq = up(wq), g_wk = up(wk), g_sq = up(sq), g_out = up(out), g_rstd = up(rstd),
         g_dout = up(dout);
    gpu_->zero(g_out.get(), out.size());
    gpu_->qknorm_forward(g_out.get(), g_rstd.get(), g_inp.get(), gains ? g_wq.get() : nullptr,
                         gains ? g_wk.get() : nullptr, scale ? g_sq.get() : nullptr, N, NH, D, 1e-6);
    expect_close(down(g_out, out.size()), out, 1e-5, "qknorm_forward out");
    expect_close(down(g_rstd, rstd.size()), rstd, 1e-5, "qknorm_forward rstd");
    auto dinp = random_floats(N * 3 * C, 5), dwq = random_floats(D, 6), dwk = random_floats(D, 7),
         dsq = random_floats(NH, 9);
    auto g_dinp = up(dinp), g_dwq = up(dwq), g_dwk = up(dwk), g_dsq = up(dsq), c_rstd = up(rstd);
    cpu_->qknorm_backward(dinp.data(), gains ? dwq.data() : nullptr, gains ? dwk.data() : nullptr,
                          scale ? dsq.data() : nullptr, dout.data(), inp.data(), gains ? wq.data() : nullptr,
                          gains ? wk.data() : nullptr, scale ? sq.data() : nullptr, rstd.data(), N, NH, D);
    gpu_->qknorm_backward(g_dinp.get(), gains ? g_dwq.get() : nullptr, gains ? g_dwk.get() : nullptr,
                          scale ? g_dsq.get() : nullptr, g_dout.get(), g_inp.get(), gains ? g_wq.get() : nullptr,
                          gains ? g_wk.get() : nullptr, scale ? g_sq.get() : nullptr, c_rstd.get(), N, NH, D);
    expect_close(down(g_dinp, dinp.size()), dinp, 1e-4, "qknorm_backward dinp");
    expect_close(down(g_dwq, D), dwq, 1e-4, "qknorm_backward dwq");
    expect_close(down(g_dwk, D), dwk, 1e-4, "qknorm_backward dwk");
    expect_close(down(g_dsq, NH), dsq, 1e-4, "qknorm_backward dsq");
  }
}

TEST_F(CudaOps, SwiGluRelu2AndExactGelu) {
  const int N = 13, F = 77;
  auto inp = random_floats(N * 2 * F, 1, -8.f, 8.f);
  inp[0] = -150.f;  // saturated gates: σ = 0 and 1, no NaN
  inp[1] = 150.f;
  const auto dout = random_floats(N * F, 2);
  auto dinp = random_floats(inp.size(), 3);
  std::vector<float> out(N * F);
  cpu_->swiglu_forward(out.data(), inp.data(), N, F);
  auto g_inp = up(inp), g_out = up(out), g_dout = up(dout), g_dinp = up(dinp);
  gpu_->swiglu_forward(g_out.get(), g_inp.get(), N, F);
  expect_close(down(g_out, out.size()), out, 1e-5, "swiglu_forward");
  cpu_->swiglu_backward(dinp.data(), inp.data(), dout.data(), N, F);
  gpu_->swiglu_backward(g_dinp.get(), g_inp.get(), g_dout.get(), N, F);
  expect_close(down(g_dinp, dinp.size()), dinp, 1e-5, "swiglu_backward");
  // ReLU² on the same numbers.
  std::vector<float> r(inp.size());
  auto dr = random_floats(inp.size(), 4), dy = random_floats(inp.size(), 5);
  auto g_r = up(r), g_dr = up(dr), g_dy = up(dy);
  cpu_->relu2_forward(r.data(), inp.data(), inp.size());
  gpu_->relu2_forward(g_r.get(), g_inp.get(), inp.size());
  expect_close(down(g_r, r.size()), r, 1e-6, "relu2_forward");
  cpu_->relu2_backward(dr.data(), inp.data(), dy.data(), inp.size());
  gpu_->relu2_backward(g_dr.get(), g_inp.get(), g_dy.get(), inp.size());
  expect_close(down(g_dr, dr.size()), dr, 1e-6, "relu2_backward");
  // Exact GELU on the same numbers.
  std::vector<float> ge(inp.size());
  auto dge = random_floats(inp.size(), 6);
  auto g_ge = up(ge), g_dge = up(dge);
  cpu_->gelu_erf_forward(ge.data(), inp.data(), inp.size());
  gpu_->gelu_erf_forward(g_ge.get(), g_inp.get(), inp.size());
  expect_close(down(g_ge, ge.size()), ge, 1e-6, "gelu_erf_forward");
  cpu_->gelu_erf_backward(dge.data(), inp.data(), dy.data(), inp.size());
  gpu_->gelu_erf_backward(g_dge.get(), g_inp.get(), g_dy.get(), inp.size());
  expect_close(down(g_dge, dge.size()), dge, 1e-6, "gelu_erf_backward");
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

// The forget gate's prefix sums of ln σ(g) and their backward (a reverse
// scan), B = 3 sequences of T = 300 tokens, NH = 5 heads, logits far out
// both sides included.
TEST_F(CudaOps, ForgetGate) {
  const int B = 3, T = 300, NH = 5;
  const size_t n = static_cast<size_t>(B) * T * NH;
  auto g = random_floats(n, 1, -6.f, 8.f);
  g[0] = 40.f;
  g[1] = -40.f;
  const auto dc = random_floats(n, 2);
  auto dg = random_floats(n, 3);  // the backward accumulates
  std::vector<float> c(n);
  cpu_->forget_forward(c.data(), g.data(), B, T, NH);
  auto g_g = up(g), g_c = up(c), g_dc = up(dc), g_dg = up(dg);
  gpu_->forget_forward(g_c.get(), g_g.get(), B, T, NH);
  expect_close(down(g_c, n), c, 1e-6, "forget_forward");
  cpu_->forget_backward(dg.data(), dc.data(), g.data(), B, T, NH);
  gpu_->forget_backward(g_dg.get(), g_dc.get(), g_g.get(), B, T, NH);
  expect_close(down(g_dg, n), dg, 1e-6, "forget_backward");
}

// FIRE's table from a parameter block (the MLP in double on both) and its
// backward summed over B = 3 sequences' dL/db, at T = 70 (past a block of
// 256 pairs several times) with NH = 3, c and m away from their defaults;
// the entries above the diagonal are 0 and take no gradient.
TEST_F(CudaOps, FireTable) {
  const int B = 3, T = 70, NH = 3, np = attn::fire::count(NH);
  const double L0 = attn::fire::threshold0(32);
  auto p = random_floats(np, 1, -0.8f, 0.8f);
  p[attn::fire::c(NH)] = 0.3f;
  p[attn::fire::m(NH)] = 0.7f;
  const size_t nt = size_t(NH) * T * T;
  std::vector<float> table(nt, -7.f);
  cpu_->fire_forward(table.data(), p.data(), T, NH, L0);
  auto g_p = up(p), g_table = up(std::vector<float>(nt, -7.f));
  gpu_->fire_forward(g_table.get(), g_p.get(), T, NH, L0);
  expect_close(down(g_table, nt), table, 1e-6, "fire_forward");
  const auto dtable = random_floats(B * nt, 2);
  auto dp = random_floats(np, 3);  // the backward accumulates
  const std::vector<float> dp0 = dp;
  cpu_->fire_backward(dp.data(), dtable.data(), p.data(), B, T, NH, L0);
  auto g_dtable = up(dtable), g_dp = up(dp0);
  gpu_->fire_backward(g_dp.get(), g_dtable.get(), g_p.get(), B, T, NH, L0);
  expect_close(down(g_dp, np), dp, 1e-5, "fire_backward");
  int moved = 0;
  for (int k = 0; k < np; ++k) moved += dp[k] != dp0[k];
  EXPECT_GT(moved, np / 2) << "most parameters should get a gradient";
}

// The distance biases under position ids (cpu::position_table_*): ALiBi,
// KERPLE (log, power) and FIRE tables of B = 3 sequences whose ids jump
// differently, T = 41 (past a block of 256 pairs several times), NH = 3;
// the backward accumulates onto noise.
TEST_F(CudaOps, PositionTable) {
  const int B = 3, T = 41, NH = 3;
  std::vector<int32_t> ids(B * T);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) ids[b * T + t] = t + (t >= 11 * (b + 1) ? 50 * (b + 1) : 0);
  auto g_ids = up_ids(ids);
  for (const char* bias : {"alibi", "kerple_log", "kerple_power", "fire"}) {
    AttentionConfig a;
    a.position_bias = bias;
    ModelConfig mc;
    mc.context = 32;
    const AttentionSpec s = resolve_attention(a, mc);
    const int np = attn::position_table::param_count(s, NH);
    auto p = random_floats(std::max(np, 1), 1, -0.8f, 0.8f);
    if (s.fire()) {
      p[attn::fire::c(NH)] = 0.3f;
      p[attn::fire::m(NH)] = 0.7f;
    }
    const size_t nt = size_t(B) * NH * T * T;
    std::vector<float> table(nt, -7.f);
    cpu_->position_table_forward(table.data(), p.data(), ids.data(), B, T, NH, s);
    auto g_p = up(p), g_table = up(std::vector<float>(nt, -7.f));
    gpu_->position_table_forward(g_table.get(), g_p.get(), g_ids.get(), B, T, NH, s);
    expect_close(down(g_table, nt), table, 1e-6, std::string("position_table_forward ") + bias);
    if (np == 0) continue;
    const auto dtable = random_floats(nt, 2);
    auto dp = random_floats(np, 3);
    const std::vector<float> dp0 = dp;
    cpu_->position_table_backward(dp.data(), dtable.data(), p.data(), ids.data(), B, T, NH, s);
    auto g_dtable = up(dtable), g_dp = up(dp0);
    gpu_->position_table_backward(g_dp.get(), g_dtable.get(), g_p.get(), g_ids.get(), B, T, NH, s);
    expect_close(down(g_dp, np), dp, 1e-5, std::string("position_table_backward ") + bias);
    int moved = 0;
    for (int k = 0; k < np; ++k) moved += dp[k] != dp0[k];
    EXPECT_GT(moved, np / 2) << bias << ": most parameters should get a gradient";
  }
}

// Differential attention's ops (cpu::diff_*, head_repeat, head_reduce):
// N = 37 rows, NH = 3 heads of D = 32, λ vectors and a gain away from their
// starting values; the backward adds to dλ and the gain, overwrites dy2.
TEST_F(CudaOps, DifferentialOps) {
  const int N = 37, NH = 3, D = 32, C = NH * D;
  const double li = attn::diff::lambda_init(3);
  const auto qkv = random_floats(size_t(N) * 3 * C, 1), dqkv2 = random_floats(size_t(N) * 6 * C, 2);
  std::vector<float> qkv2(size_t(N) * 6 * C), dqkv = random_floats(size_t(N) * 3 * C, 3);
  auto g_qkv = up(qkv), g_qkv2 = up(qkv2), g_dqkv2 = up(dqkv2), g_dqkv = up(dqkv);
  cpu_->diff_split_forward(qkv2.data(), qkv.data(), N, C, NH);
  gpu_->diff_split_forward(g_qkv2.get(), g_qkv.get(), N, C, NH);
  expect_close(down(g_qkv2, qkv2.size()), qkv2, 0.0, "diff_split_forward");
  cpu_->diff_split_backward(dqkv.data(), dqkv2.data(), N, C, NH);
  gpu_->diff_split_backward(g_dqkv.get(), g_dqkv2.get(), N, C, NH);
  expect_close(down(g_dqkv, dqkv.size()), dqkv, 1e-6, "diff_split_backward");

  const auto y2 = random_floats(size_t(N) * 2 * C, 4), dout = random_floats(size_t(N) * C, 5),
             lam = random_floats(2 * D, 6, -0.3f, 0.3f), gain = random_floats(D, 7, 0.5f, 1.5f);
  std::vector<float> out(size_t(N) * C), rstd(size_t(N) * NH), dy2(size_t(N) * 2 * C, 9.f);
  auto dlam = random_floats(2 * D, 8), dgain = random_floats(D, 9);
  auto g_y2 = up(y2), g_dout = up(dout), g_lam = up(lam), g_gain = up(gain), g_out = up(out), g_rstd = up(rstd),
       g_dy2 = up(dy2), g_dlam = up(dlam), g_dgain = up(dgain);
  cpu_->diff_combine_forward(out.data(), rstd.data(), y2.data(), lam.data(), gain.data(), N, C, NH, li);
  gpu_->diff_combine_forward(g_out.get(), g_rstd.get(), g_y2.get(), g_lam.get(), g_gain.get(), N, C, NH, li);
  expect_close(down(g_out, out.size()), out, 1e-6, "diff_combine_forward out");
  expect_close(down(g_rstd, rstd.size()), rstd, 1e-6, "diff_combine_forward rstd");
  cpu_->diff_combine_backward(dy2.data(), dlam.data(), dgain.data(), dout.data(), y2.data(), rstd.data(), lam.data(),
                              gain.data(), N, C, NH, li);
  gpu_->diff_combine_backward(g_dy2.get(), g_dlam.get(), g_dgain.get(), g_dout.get(), g_y2.get(), g_rstd.get(),
                              g_lam.get(), g_gain.get(), N, C, NH, li);
  expect_close(down(g_dy2, dy2.size()), dy2, 1e-6, "diff_combine_backward dy2");
  expect_close(down(g_dlam, dlam.size()), dlam, 1e-5, "diff_combine_backward dlambda");
  expect_close(down(g_dgain, dgain.size()), dgain, 1e-5, "diff_combine_backward dgain");

  const size_t outer = 2, inner = 19;
  const auto src = random_floats(outer * NH * inner, 10), wide = random_floats(outer * NH * 4 * inner, 11);
  std::vector<float> rep(wide.size()), red = random_floats(src.size(), 12);
  auto g_src = up(src), g_wide = up(wide), g_rep = up(rep), g_red = up(red);
  cpu_->head_repeat(rep.data(), src.data(), outer, NH, inner, 4);
  gpu_->head_repeat(g_rep.get(), g_src.get(), outer, NH, inner, 4);
  expect_close(down(g_rep, rep.size()), rep, 0.0, "head_repeat");
  cpu_->head_reduce(red.data(), wide.data(), outer, NH, inner, 4);
  gpu_->head_reduce(g_red.get(), g_wide.get(), outer, NH, inner, 4);
  expect_close(down(g_red, red.size()), red, 0.0, "head_reduce");
}

// PoPE's transform, its backward (δ's gradient summed per channel over the
// rows, one inside and one outside the clamp) and the output slice.
TEST_F(CudaOps, PopeOps) {
  const int B = 3, Tn = 29, NH = 3, D = 16, C = NH * D, N = B * Tn;
  const auto qkv = random_floats(size_t(N) * 3 * C, 21, -2.f, 2.f), dqkv2 = random_floats(size_t(N) * 6 * C, 22);
  auto delta = random_floats(C, 23, -6.f, -0.1f);
  delta[1] = 0.4f, delta[2] = -7.f;  // clamped: no gradient
  std::vector<float> qkv2(size_t(N) * 6 * C), dqkv = random_floats(size_t(N) * 3 * C, 24),
                                              ddelta = random_floats(C, 25);
  auto g_qkv = up(qkv), g_qkv2 = up(qkv2), g_delta = up(delta), g_dqkv2 = up(dqkv2), g_dqkv = up(dqkv),
       g_ddelta = up(ddelta);
  cpu_->pope_forward(qkv2.data(), qkv.data(), delta.data(), B, Tn, C, NH, 10000.0);
  gpu_->pope_forward(g_qkv2.get(), g_qkv.get(), g_delta.get(), B, Tn, C, NH, 10000.0);
  expect_close(down(g_qkv2, qkv2.size()), qkv2, 1e-6, "pope_forward");
  cpu_->pope_backward(dqkv.data(), ddelta.data(), dqkv2.data(), qkv.data(), delta.data(), B, Tn, C, NH, 10000.0);
  gpu_->pope_backward(g_dqkv.get(), g_ddelta.get(), g_dqkv2.get(), g_qkv.get(), g_delta.get(), B, Tn, C, NH, 10000.0);
  expect_close(down(g_dqkv, dqkv.size()), dqkv, 1e-6, "pope_backward dqkv");
  expect_close(down(g_ddelta, ddelta.size()), ddelta, 1e-6, "pope_backward ddelta");
  // With training-time position ids (sorted, spread past Tn as PoSE's are).
  std::vector<int32_t> ids(N);
  for (int n = 0; n < N; ++n) ids[n] = (n % Tn) * 37 + (n / Tn) * 5 + ((n % Tn) > Tn / 2 ? 900 : 0);
  const TokenBuffer g_ids = up_ids(ids);
  cpu_->pope_forward(qkv2.data(), qkv.data(), delta.data(), B, Tn, C, NH, 10000.0, ids.data());
  gpu_->pope_forward(g_qkv2.get(), g_qkv.get(), g_delta.get(), B, Tn, C, NH, 10000.0, g_ids.get());
  expect_close(down(g_qkv2, qkv2.size()), qkv2, 1e-6, "pope_forward with position ids");
  cpu_->pope_backward(dqkv.data(), ddelta.data(), dqkv2.data(), qkv.data(), delta.data(), B, Tn, C, NH, 10000.0,
                      ids.data());
  gpu_->pope_backward(g_dqkv.get(), g_ddelta.get(), g_dqkv2.get(), g_qkv.get(), g_delta.get(), B, Tn, C, NH, 10000.0,
                      g_ids.get());
  expect_close(down(g_dqkv, dqkv.size()), dqkv, 1e-6, "pope_backward dqkv with position ids");
  expect_close(down(g_ddelta, ddelta.size()), ddelta, 1e-6, "pope_backward ddelta with position ids");
  const auto y2 = random_floats(size_t(N) * 2 * C, 26), dy = random_floats(size_t(N) * C, 27);
  std::vector<float> y(size_t(N) * C), dy2(size_t(N) * 2 * C, 3.f);
  auto g_y2 = up(y2), g_dy = up(dy), g_y = up(y), g_dy2 = up(dy2);
  cpu_->pope_output_forward(y.data(), y2.data(), N, C, NH);
  gpu_->pope_output_forward(g_y.get(), g_y2.get(), N, C, NH);
  expect_close(down(g_y, y.size()), y, 0.0, "pope_output_forward");
  cpu_->pope_output_backward(dy2.data(), dy.data(), N, C, NH);
  gpu_->pope_output_backward(g_dy2.get(), g_dy.get(), N, C, NH);
  expect_close(down(g_dy2, dy2.size()), dy2, 0.0, "pope_output_backward");
}

TEST_F(CudaOps, TinyModelWithPopeTrainsLikeCpu) {
  ModelConfig mc = TinyModelPair::model_config();
  mc.position = "pope";
  TinyModelPair p(*cpu_, *gpu_, mc);
  ASSERT_EQ(p.on_gpu.layout().find("attnpope").numel(), size_t(mc.n_layer) * mc.attn_width());
  p.expect_trains_alike(3, 97, "evaluation losses with PoPE");
}

TEST_F(CudaOps, OutputGate) {
  const size_t n = 10007;
  const auto y = random_floats(n, 1, -3.f, 3.f), dout = random_floats(n, 2);
  auto g = random_floats(n, 3, -8.f, 8.f);
  g[0] = 90.f;
  g[1] = -90.f;
  auto dy = random_floats(n, 4), dg = random_floats(n, 5);
  std::vector<float> out(n);
  cpu_->sigmoid_gate_forward(out.data(), y.data(), g.data(), n);
  auto g_y = up(y), g_g = up(g), g_out = up(out), g_dout = up(dout), g_dy = up(dy), g_dg = up(dg);
  gpu_->sigmoid_gate_forward(g_out.get(), g_y.get(), g_g.get(), n);
  expect_close(down(g_out, n), out, 1e-6, "sigmoid_gate_forward");
  cpu_->sigmoid_gate_backward(dy.data(), dg.data(), dout.data(), y.data(), g.data(), n);
  gpu_->sigmoid_gate_backward(g_dy.get(), g_dg.get(), g_dout.get(), g_y.get(), g_g.get(), n);
  expect_close(down(g_dy, n), dy, 1e-6, "sigmoid_gate_backward dy");
  expect_close(down(g_dg, n), dg, 1e-6, "sigmoid_gate_backward dg");
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
    cpu_->rope_forward(out.data(), inp.data(), B, T, C, NH, RopeSpec{10000.0}, pos0);
    auto g_inp = up(inp), g_out = up(std::vector<float>(n));
    gpu_->rope_forward(g_out.get(), g_inp.get(), B, T, C, NH, RopeSpec{10000.0}, pos0);
    expect_close(down(g_out, n), out, 1e-5, "rope_forward pos0=" + std::to_string(pos0));
    auto dinp = random_floats(n, 3);
    auto g_dinp = up(dinp), g_dout = up(dout);
    cpu_->rope_backward(dinp.data(), dout.data(), B, T, C, NH, RopeSpec{10000.0}, pos0);
    gpu_->rope_backward(g_dinp.get(), g_dout.get(), B, T, C, NH, RopeSpec{10000.0}, pos0);
    expect_close(down(g_dinp, n), dinp, 1e-5, "rope_backward pos0=" + std::to_string(pos0));
  }
  {  // training-time position ids, per sequence (PoSE-like jumps)
    std::vector<int32_t> ids(size_t(B) * T);
    for (int i = 0; i < B * T; ++i) ids[i] = (i % T) + (i % T >= 4 ? 3000 + 17 * (i / T) : 0);
    const TokenBuffer g_ids = up_ids(ids);
    std::vector<float> out(n);
    cpu_->rope_forward(out.data(), inp.data(), B, T, C, NH, RopeSpec{10000.0}, 2, ids.data());
    auto g_inp = up(inp), g_out = up(std::vector<float>(n));
    gpu_->rope_forward(g_out.get(), g_inp.get(), B, T, C, NH, RopeSpec{10000.0}, 2, g_ids.get());
    expect_close(down(g_out, n), out, 1e-5, "rope_forward with position ids");
    auto dinp = random_floats(n, 3);
    auto g_dinp = up(dinp), g_dout = up(dout);
    cpu_->rope_backward(dinp.data(), dout.data(), B, T, C, NH, RopeSpec{10000.0}, 2, ids.data());
    gpu_->rope_backward(g_dinp.get(), g_dout.get(), B, T, C, NH, RopeSpec{10000.0}, 2, g_ids.get());
    expect_close(down(g_dinp, n), dinp, 1e-5, "rope_backward with position ids");
  }
  // Interleaved pairs, whole and partial.
  for (int rot : {0, 8}) {
    RopeSpec rs{10000.0};
    rs.interleaved = true;
    rs.rot_dims = rot;
    std::vector<float> out(n);
    cpu_->rope_forward(out.data(), inp.data(), B, T, C, NH, rs, 500);
    auto g_inp = up(inp), g_out = up(std::vector<float>(n));
    gpu_->rope_forward(g_out.get(), g_inp.get(), B, T, C, NH, rs, 500);
    expect_close(down(g_out, n), out, 1e-5, "rope_forward interleaved d_r=" + std::to_string(rot));
    auto dinp = random_floats(n, 4);
    auto g_dinp = up(dinp), g_dout = up(dout);
    cpu_->rope_backward(dinp.data(), dout.data(), B, T, C, NH, rs, 500);
    gpu_->rope_backward(g_dinp.get(), g_dout.get(), B, T, C, NH, rs, 500);
    expect_close(down(g_dinp, n), dinp, 1e-5, "rope_backward interleaved d_r=" + std::to_string(rot));
  }
  auto g = up(inp), g_out = up(inp);
  EXPECT_THROW(gpu_->rope_forward(g_out.get(), g.get(), B, T, 45, NH, RopeSpec{10000.0}, 0), Error);  // odd head size
}

// Every RoPE frequency rule of docs/context_extension.md §1 and partial RoPE
// (d_r = 8 of a head of 16), at a length past the trained context.
TEST_F(CudaOps, RopeEveryFrequencyRuleAndPartialRope) {
  const int B = 2, T = 45, C = 48, NH = 3;
  const size_t n = size_t(B) * T * 3 * C;
  const auto inp = random_floats(n, 4), dout = random_floats(n, 5);
  // With p-RoPE's truncation (p = 0.5) and YaRN's exact ramp too; and the
  // frequencies grown by a training window warm-up (train.grow_yarn:
  // windows 64 -> 128 -> 256, where pairs 0..2 fall inside YaRN's ramp).
  for (int rule = 0; rule < kRopeScalingCount; ++rule)
    for (int variant = 0; variant < 6; ++variant) {
      const int d_r = variant % 2 ? 8 : 0;
      RopeSpec rs;
      rs.scaling = static_cast<RopeScaling>(rule);
      rs.trained_context = 11;
      rs.rot_dims = d_r;
      if (variant >= 2 && variant < 4) rs.keep = 0.5, rs.yarn_truncate = false;
      if (variant >= 4) rs.grown = 2, rs.grow[0] = 64, rs.grow[1] = 128, rs.grow[2] = 256;
      const std::string what = std::string(stage_name(rs.scaling)) + " d_r=" + std::to_string(d_r) +
                               (variant >= 4   ? " grown 64->128->256"
                                : variant >= 2 ? " p=0.5, yarn exact"
                                               : "");
      std::vector<float> out(n);
      cpu_->rope_forward(out.data(), inp.data(), B, T, C, NH, rs, 0);
      auto g_inp = up(inp), g_out = up(std::vector<float>(n));
      gpu_->rope_forward(g_out.get(), g_inp.get(), B, T, C, NH, rs, 0);
      expect_close(down(g_out, n), out, 1e-5, "rope_forward " + what);
      auto dinp = random_floats(n, 6);
      auto g_dinp = up(dinp), g_dout = up(dout);
      cpu_->rope_backward(dinp.data(), dout.data(), B, T, C, NH, rs, 0);
      gpu_->rope_backward(g_dinp.get(), g_dout.get(), B, T, C, NH, rs, 0);
      expect_close(down(g_dinp, n), dinp, 1e-5, "rope_backward " + what);
    }
  // The far copy of each distance remapping (q and k at their own positions).
  for (int kind = 1; kind < kRemapKindCount; ++kind) {
    RopeSpec rs;
    rs.trained_context = 11;
    rs.remap = static_cast<RemapKind>(kind);
    rs.remap_window = 5;
    rs.rerope_kappa = 3;
    rs.group = 3;
    rs.remap_sinks = 2;
    rs.far_positions = true;
    std::vector<float> out(n);
    cpu_->rope_forward(out.data(), inp.data(), B, T, C, NH, rs, 0);
    auto g_inp = up(inp), g_out = up(std::vector<float>(n));
    gpu_->rope_forward(g_out.get(), g_inp.get(), B, T, C, NH, rs, 0);
    expect_close(down(g_out, n), out, 1e-5, std::string("rope far positions ") + stage_name(rs.remap));
  }
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

// Targets a loss mask does not score (kIgnoreTarget): loss 0 and a zero
// gradient row on both backends, the other rows as without them.
TEST_F(CudaOps, CrossEntropyIgnoredTargets) {
  const int N = 9, V = 1000, Vp = 1024;
  const auto logits = random_floats(size_t(N) * Vp, 5, -8.f, 8.f);
  auto targets = random_ids(N, V, 6);
  for (int i : {0, 4, 5, 8}) targets[i] = kIgnoreTarget;
  const auto dloss = random_floats(N, 7, 0.1f, 1.f);
  std::vector<float> losses(N), dlogits(logits.size());
  cpu_->crossentropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
  cpu_->crossentropy_backward(dlogits.data(), logits.data(), targets.data(), dloss.data(), N, V, Vp);
  auto g_logits = up(logits), g_losses = up(random_floats(N, 8)), g_dloss = up(dloss);
  auto g_targets = up_ids(targets);
  gpu_->crossentropy_forward(g_losses.get(), g_logits.get(), g_targets.get(), N, V, Vp);
  const auto gl = down(g_losses, N);
  expect_close(gl, losses, 1e-5, "crossentropy_forward with ignored targets");
  gpu_->crossentropy_backward(g_logits.get(), g_logits.get(), g_targets.get(), g_dloss.get(), N, V, Vp);
  const auto gd = down(g_logits, logits.size());
  expect_close(gd, dlogits, 1e-4, "crossentropy_backward with ignored targets");
  for (int i : {0, 4, 5, 8}) {
    EXPECT_EQ(gl[i], 0.f) << "row " << i;
    for (int v = 0; v < Vp; ++v) ASSERT_EQ(gd[size_t(i) * Vp + v], 0.f) << "row " << i << " column " << v;
  }
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

// Muon's kernels (momentum, the Newton–Schulz iteration on wide, tall and
// square matrices through cuBLASLt, the update) against the CPU's.
TEST_F(CudaOps, Muon) {
  const size_t n = 3001;
  std::vector<float> mom(n), grad = random_floats(n, 3);
  auto g_mom = up(mom), g_grad = up(grad);
  for (int t = 0; t < 2; ++t) {
    cpu_->muon_momentum(grad.data(), mom.data(), n, 0.95);
    gpu_->muon_momentum(g_grad.get(), g_mom.get(), n, 0.95);
  }
  expect_close(down(g_mom, n), mom, 1e-6, "muon_momentum m");
  expect_close(down(g_grad, n), grad, 1e-6, "muon_momentum update");
  for (auto [rows, cols] : {std::pair{24, 40}, std::pair{40, 24}, std::pair{17, 17}, std::pair{1, 9}}) {
    const auto x = random_floats(size_t(rows) * cols, rows + cols);
    std::vector<float> cx = x, work(muon::work_size(rows, cols));
    auto g_x = up(x), g_work = up(work);
    cpu_->newton_schulz(cx.data(), rows, cols, muon::kSteps, work.data());
    gpu_->newton_schulz(g_x.get(), rows, cols, muon::kSteps, g_work.get());
    expect_close(down(g_x, cx.size()), cx, 1e-4, "newton_schulz " + std::to_string(rows) + "x" + std::to_string(cols));
  }
  std::vector<float> param = random_floats(n, 5), upd = random_floats(n, 6);
  auto g_param = up(param), g_upd = up(upd);
  cpu_->muon_apply(param.data(), upd.data(), n, 0.02, 1.5, 0.1);
  gpu_->muon_apply(g_param.get(), g_upd.get(), n, 0.02, 1.5, 0.1);
  expect_close(down(g_param, n), param, 1e-6, "muon_apply");
}

// The backend's attention plumbing (device diagnostics added into the host
// array); the kernel's own parity over every preset is tested with it.
TEST_F(CudaOps, AttentionThroughBackend) {
  const int B = 2, T = 11, C = 32, NH = 2;  // head size 16
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
  TinyModelPair p(*cpu_, *gpu_);
  for (int s = 0; s < 4; ++s) {
    const auto [cpu, gpu] = p.step(s);
    EXPECT_NEAR(gpu, cpu, 1e-4 * cpu) << "step " << s;
  }
  const ModelConfig& mc = p.mc;
  const int T = mc.context;
  GPT<float>& on_cpu = p.on_cpu;
  GPT<float>& on_gpu = p.on_gpu;
  const auto ids = random_ids(size_t(2) * 2 * T + 1, mc.vocab_size, 99);
  const std::vector<int32_t> in(ids.begin(), ids.end() - 1), tg(ids.begin() + 1, ids.end());
  std::vector<float> lc, lg;
  on_cpu.forward_losses(in.data(), tg.data(), 2, 2 * T, lc);  // past the training context
  on_gpu.forward_losses(in.data(), tg.data(), 2, 2 * T, lg);
  expect_close(lg, lc, 1e-4, "evaluation losses after training");
}

// A per-layer plan (SWAN's: RoPE with a window of N/2, then NoPE with full
// attention, here with ssmax scales and the forget gate in the NoPE layer)
// trains on the device as on the CPU.
TEST_F(CudaOps, TinyModelWithALayerPlanTrainsLikeCpu) {
  ModelConfig mc = TinyModelPair::model_config();
  mc.layer_plan = "swan";
  mc.layer_pattern = "LG";
  mc.layer_kinds = nlohmann::json::parse(R"({"G": {"attention": {"preset": "ssmax", "position_bias": "forget"}}})");
  TinyModelPair p(*cpu_, *gpu_, mc);
  ASSERT_EQ(p.on_gpu.per_layer_attention()[0].spec.window, 8);
  ASSERT_FALSE(p.on_gpu.per_layer_attention()[1].rope);
  p.expect_trains_alike(3, 98, "evaluation losses of the plan");
}

// FIRE's bias (its MLP evaluated into a table by the device) and
// stick-breaking on the other layer train on the device as on the CPU.
TEST_F(CudaOps, TinyModelWithFireAndStickBreakingTrainsLikeCpu) {
  ModelConfig mc = TinyModelPair::model_config();
  mc.position = "none";
  mc.layer_pattern = "FS";
  mc.layer_kinds = nlohmann::json::parse(
      R"({"F": {"attention": {"preset": "softmax", "position_bias": "fire"}},
          "S": {"attention": {"preset": "stick_breaking"}}})");
  TinyModelPair p(*cpu_, *gpu_, mc);
  ASSERT_TRUE(p.on_gpu.per_layer_attention()[0].spec.fire());
  ASSERT_TRUE(attn::stick_breaking(p.on_gpu.per_layer_attention()[1].spec));
  p.expect_trains_alike(3, 97, "evaluation losses with FIRE and stick-breaking");
}

// Differential attention (head size 32: kernel heads of 16) with RoPE on
// each half, the sink and the output gate trains on the device as on the
// CPU.
TEST_F(CudaOps, TinyModelWithDifferentialAttentionTrainsLikeCpu) {
  ModelConfig mc = TinyModelPair::model_config();
  mc.n_embd = 64;
  mc.layer_pattern = "DS";
  mc.layer_kinds = nlohmann::json::parse(
      R"({"D": {"attention": {"preset": "sink", "differential": "on", "output_gate": "sigmoid"}},
          "S": {"attention": {"preset": "softmax", "differential": "on", "position_bias": "forget"}}})");
  TinyModelPair p(*cpu_, *gpu_, mc);
  ASSERT_TRUE(p.on_gpu.per_layer_attention()[0].spec.differential);
  p.expect_trains_alike(3, 96, "evaluation losses with differential attention");
}

// Heads wider than n_embd / n_head (model.head_dim, Qwen3-0.6B's shape):
// two heads of 32 in a 32-wide model, one key/value head, QK-norm and the
// output gate, train on the device as on the CPU.
TEST_F(CudaOps, TinyModelWithWideHeadsTrainsLikeCpu) {
  ModelConfig mc = TinyModelPair::model_config();
  mc.head_dim = 32;
  mc.n_kv_head = 1;
  mc.qk_norm = "rms";
  mc.norm_eps = 1e-6;
  mc.layer_pattern = "GS";
  mc.layer_kinds = nlohmann::json::parse(R"({"G": {"attention": {"output_gate": "sigmoid"}}, "S": {}})");
  TinyModelPair p(*cpu_, *gpu_, mc);
  ASSERT_EQ(p.on_gpu.layout().find("attprojw").shape, (Shape{2, 32, 64}));
  p.expect_trains_alike(3, 95, "evaluation losses with heads of 32 in a 32-wide model");
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
  try {
    make_backend("cuda", "fp16");
    FAIL() << "make_backend(\"cuda\", \"fp16\") should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("valid: fp32, tf32, bf16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_backend("cpu", "bf16"), Error);  // message: tests/config/config_test.cpp
  if (cuda_available()) {
    EXPECT_EQ(make_backend("cuda", "fp32")->name(), "cuda");
    EXPECT_NE(make_backend("cuda", "tf32")->name().find("tf32"), std::string::npos);
    EXPECT_NE(make_backend("cuda", "bf16")->name().find("bf16"), std::string::npos);
  }
}

// ---- bf16 GEMM operands (run.precision "bf16") ------------------------------------------
// The CUDA backend rounds both operands of every GEMM to bf16 with
// kernels/bf16_round.h and multiplies them with float32 accumulation. The
// CPU references below are computed in double from inputs rounded by the
// same host function, so the GPU and the reference multiply the same
// numbers: a product of two bf16 values is exact in float32, and the only
// difference left is the float32 accumulation (order, and the tensor cores'
// own summation). Bound per output entry, with S = Σ_k |a_k||b_k| over the
// rounded operands and c0 the value the GEMM accumulates onto (bias, or the
// initial gradient):
//     |gpu - ref| <= 1e-5 · (S + |c0|) + 1e-6.
// A float32 sum of k terms is within about k·2^-24·S in the worst case and
// typically √k·2^-24·S; the largest k here is 200, so 1e-5 holds even for a
// summation that truncates instead of rounding (k·2^-23 = 2.4e-5·S is the
// never-reached worst case; random signs keep the running sums far below
// S), while an unrounded (float32) operand is off by ~2^-9·√k·mean|ab|, 10-100x
// more, so a GEMM that silently ran in fp32 (or on garbage) fails it.
// The bias gradient sums the float32 dout (no bf16): same bound with the
// unrounded dout.

namespace bf16ref {

constexpr double kAccRel = 1e-5, kAccAbs = 1e-6;

// Reference value and Σ|terms| of each output entry.
struct Ref {
  std::vector<double> val, mag;
};

double operand(float x, bool rounded) { return rounded ? double(round_to_bf16(x)) : double(x); }

// r(i,j) = Σ_k a(i,k)·b(j,k) in double, and Σ_k |a(i,k)·b(j,k)|, for i < rows,
// j < cols, k < K; the operands rounded to bf16 first when asked.
template <typename A, typename B>
Ref product(int rows, int cols, int K, A a, B b, bool rounded) {
  Ref r{std::vector<double>(size_t(rows) * cols), std::vector<double>(size_t(rows) * cols)};
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      double v = 0, m = 0;
      for (int k = 0; k < K; ++k) {
        const double t = operand(a(i, k), rounded) * operand(b(j, k), rounded);
        v += t;
        m += std::abs(t);
      }
      r.val[size_t(i) * cols + j] = v;
      r.mag[size_t(i) * cols + j] = m;
    }
  return r;
}

// out (N,OC) = inp (N,C) · Wᵀ (W: OC×C).
Ref forward(const std::vector<float>& inp, const std::vector<float>& w, int N, int C, int OC, bool rounded) {
  return product(
      N, OC, C, [&](int n, int c) { return inp[size_t(n) * C + c]; },
      [&](int o, int c) { return w[size_t(o) * C + c]; }, rounded);
}

// dinp (N,C) = dout (N,OC) · W (OC×C).
Ref dinp(const std::vector<float>& dout, const std::vector<float>& w, int N, int C, int OC, bool rounded) {
  return product(
      N, C, OC, [&](int n, int o) { return dout[size_t(n) * OC + o]; },
      [&](int c, int o) { return w[size_t(o) * C + c]; }, rounded);
}

// dW (OC,C) = doutᵀ (OC×N) · inp (N×C).
Ref dweight(const std::vector<float>& dout, const std::vector<float>& inp, int N, int C, int OC, bool rounded) {
  return product(
      OC, C, N, [&](int o, int n) { return dout[size_t(n) * OC + o]; },
      [&](int c, int n) { return inp[size_t(n) * C + c]; }, rounded);
}

// |gpu[i] - (c0[i] + ref.val[i])| <= kAccRel·(ref.mag[i] + |c0[i]|) + kAccAbs for every i
// (c0 empty: 0); reports the worst ratio of error to bound.
void expect_within(const std::vector<float>& gpu, const Ref& ref, const std::vector<float>& c0,
                   const std::string& what) {
  ASSERT_EQ(gpu.size(), ref.val.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double base = c0.empty() ? 0.0 : double(c0[i]);
    const double bound = kAccRel * (ref.mag[i] + std::abs(base)) + kAccAbs;
    const double ratio = std::abs(double(gpu[i]) - (base + ref.val[i])) / bound;
    if (!(ratio <= worst)) {  // also catches NaN
      worst = std::isnan(ratio) ? INFINITY : ratio;
      at = i;
    }
  }
  EXPECT_LE(worst, 1.0) << what << ": worst at " << at << ": gpu " << gpu[at] << ", reference "
                        << (c0.empty() ? 0.0 : double(c0[at])) + ref.val[at] << ", bound "
                        << kAccRel * (ref.mag[at] + (c0.empty() ? 0.0 : std::abs(double(c0[at])))) + kAccAbs
                        << " (error / bound = " << worst << ")";
}

}  // namespace bf16ref

class CudaBf16 : public CudaOps {
 protected:
  void SetUp() override {
    CudaOps::SetUp();  // skips without a device; gpu_ computes in fp32
    if (IsSkipped()) return;
    bf16_ = make_backend("cuda", "bf16");
  }
  std::unique_ptr<Backend<float>> bf16_;
};

// With bf16 GEMM operands the attention forward of inference (no statistics
// kept) runs on tensor cores, bit for bit cuda::attention_forward_tc; a
// forward that keeps statistics for a backward (training) runs the float32
// kernel, as the fp32 backend always does.
TEST_F(CudaBf16, InferenceAttentionRunsOnTensorCores) {
  AttentionConfig ac;
  ac.preset = "softmax";
  ModelConfig mc;
  mc.context = 32;
  const AttentionSpec spec = resolve_attention(ac, mc);
  const int B = 2, T = 70, C = 64, NH = 2;
  const size_t n = size_t(B) * T * C;
  auto qkv = up(random_floats(3 * n, 31));
  auto out_tc = up(std::vector<float>(n, 0.f)), out_fp32 = up(std::vector<float>(n, 0.f));
  auto stats = up(std::vector<float>(size_t(B) * NH * T * AttentionSpec::kStatsPerRow, 0.f));
  cuda::attention_forward_tc(out_tc.get(), nullptr, qkv.get(), B, T, C, NH, spec, nullptr, nullptr, nullptr);
  cuda::attention_forward(out_fp32.get(), nullptr, qkv.get(), B, T, C, NH, spec, nullptr, nullptr, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto out = up(std::vector<float>(n, 1.f));
  gpu_->synchronize();
  bf16_->attention_forward(out.get(), nullptr, qkv.get(), B, T, C, NH, spec, nullptr, nullptr, nullptr);
  bf16_->synchronize();
  const std::vector<float> tc = down(out_tc, n), fp32 = down(out_fp32, n);
  EXPECT_EQ(down(out, n), tc) << "bf16 inference: the tensor-core forward";
  EXPECT_NE(tc, fp32) << "the two forwards should differ (bf16 rounding)";
  bf16_->attention_forward(out.get(), stats.get(), qkv.get(), B, T, C, NH, spec, nullptr, nullptr, nullptr);
  bf16_->synchronize();
  EXPECT_EQ(down(out, n), fp32) << "bf16 training forward: the float32 kernel";
  gpu_->attention_forward(out.get(), nullptr, qkv.get(), B, T, C, NH, spec, nullptr, nullptr, nullptr);
  EXPECT_EQ(down(out, n), fp32) << "fp32 backend: the float32 kernel";
}

// At head size 64, where the backward has tensor-core kernels too
// (cuda::tensor_core_backward_fallback), bf16 training runs both directions
// on tensor cores, bit for bit the cuda:: tensor-core pair (the backward
// recomputes the weights from statistics of the same bf16 scores); the fp32
// backend keeps the float32 pair.
TEST_F(CudaBf16, TrainingAttentionRunsOnTensorCoresWhereBothDirectionsDo) {
  AttentionConfig ac;
  ac.preset = "lssar";
  ModelConfig mc;
  mc.context = 32;
  const AttentionSpec spec = resolve_attention(ac, mc);
  const int B = 2, T = 70, C = 128, NH = 2;
  ASSERT_EQ(cuda::tensor_core_backward_fallback(spec, C / NH), nullptr);
  const size_t n = size_t(B) * T * C, ns = size_t(B) * NH * T * AttentionSpec::kStatsPerRow;
  auto qkv = up(random_floats(3 * n, 31)), dout = up(random_floats(n, 32));
  auto out_tc = up(std::vector<float>(n, 0.f)), stats_tc = up(std::vector<float>(ns, 0.f));
  auto dqkv_tc = up(std::vector<float>(3 * n, 0.f));
  cuda::attention_forward_tc(out_tc.get(), stats_tc.get(), qkv.get(), B, T, C, NH, spec, nullptr, nullptr, nullptr);
  cuda::attention_backward_tc(dqkv_tc.get(), nullptr, dout.get(), out_tc.get(), stats_tc.get(), qkv.get(), B, T, C,
                              NH, spec, nullptr, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto out = up(std::vector<float>(n, 1.f)), stats = up(std::vector<float>(ns, 1.f));
  auto dqkv = up(std::vector<float>(3 * n, 0.f));
  bf16_->attention_forward(out.get(), stats.get(), qkv.get(), B, T, C, NH, spec, nullptr, nullptr, nullptr);
  bf16_->attention_backward(dqkv.get(), nullptr, dout.get(), out.get(), stats.get(), qkv.get(), B, T, C, NH, spec,
                            nullptr, nullptr, nullptr);
  bf16_->synchronize();
  const std::vector<float> g_tc = down(dqkv_tc, 3 * n);
  EXPECT_EQ(down(out, n), down(out_tc, n)) << "bf16 training forward: the tensor-core kernel";
  EXPECT_EQ(down(stats, ns), down(stats_tc, ns)) << "with its statistics";
  EXPECT_EQ(down(dqkv, 3 * n), g_tc) << "bf16 training backward: the tensor-core kernels";
  auto dqkv_fp32 = up(std::vector<float>(3 * n, 0.f));
  gpu_->attention_forward(out.get(), stats.get(), qkv.get(), B, T, C, NH, spec, nullptr, nullptr, nullptr);
  gpu_->attention_backward(dqkv_fp32.get(), nullptr, dout.get(), out.get(), stats.get(), qkv.get(), B, T, C, NH, spec,
                           nullptr, nullptr, nullptr);
  gpu_->synchronize();
  EXPECT_NE(down(dqkv_fp32, 3 * n), g_tc) << "fp32 backend: the float32 pair, which rounds nothing";
}

// Forward and backward against the double reference of the bf16-rounded
// inputs, over shapes that grow and shrink the scratch buffers, rows that
// need padding to 8 elements (C = 3, 24 + 4, 100, ...), and the weight at an
// offset of one float inside its buffer. The bias paths are float32.
TEST_F(CudaBf16, MatmulMatchesTheRoundedReference) {
  const std::tuple<int, int, int> shapes[] = {{5, 3, 7}, {64, 64, 192}, {37, 28, 40}, {33, 100, 52}, {70, 200, 9}};
  for (auto [N, C, OC] : shapes) {
    const std::string shape = " N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
    const auto inp = random_floats(size_t(N) * C, 11), bias = random_floats(OC, 13),
               dout = random_floats(size_t(N) * OC, 14);
    const auto wbuf = random_floats(size_t(OC) * C + 1, 12);
    const std::vector<float> w(wbuf.begin() + 1, wbuf.end());
    auto g_inp = up(inp), g_wbuf = up(wbuf), g_bias = up(bias), g_dout = up(dout);
    const float* g_w = g_wbuf.get() + 1;

    const bf16ref::Ref fwd = bf16ref::forward(inp, w, N, C, OC, true);
    for (bool with_bias : {true, false}) {
      auto g_out = up(random_floats(size_t(N) * OC, 19));  // forward overwrites
      bf16_->matmul_forward(g_out.get(), g_inp.get(), g_w, with_bias ? g_bias.get() : nullptr, N, C, OC);
      std::vector<float> c0;
      if (with_bias)
        for (int n = 0; n < N; ++n) c0.insert(c0.end(), bias.begin(), bias.end());
      bf16ref::expect_within(down(g_out, size_t(N) * OC), fwd, c0,
                             std::string("bf16 matmul_forward") + (with_bias ? " +bias" : "") + shape);
    }

    const bf16ref::Ref di = bf16ref::dinp(dout, w, N, C, OC, true), dw = bf16ref::dweight(dout, inp, N, C, OC, true);
    bf16ref::Ref db{std::vector<double>(OC), std::vector<double>(OC)};  // float32 dout, not rounded
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) {
        db.val[o] += dout[size_t(n) * OC + o];
        db.mag[o] += std::abs(dout[size_t(n) * OC + o]);
      }
    for (bool with_dinp : {true, false}) {
      const auto dinp0 = random_floats(size_t(N) * C, 15), dw0 = random_floats(size_t(OC) * C, 16),
                 db0 = random_floats(OC, 17);
      auto g_dinp = up(dinp0), g_dw = up(dw0), g_db = up(db0);
      bf16_->matmul_backward(with_dinp ? g_dinp.get() : nullptr, g_dw.get(), g_db.get(), g_dout.get(), g_inp.get(), g_w,
                             N, C, OC);
      if (with_dinp) {
        bf16ref::expect_within(down(g_dinp, dinp0.size()), di, dinp0, "bf16 matmul_backward dinp" + shape);
      } else {
        EXPECT_EQ(down(g_dinp, dinp0.size()), dinp0) << "dinp = null must leave the buffer alone" << shape;
      }
      bf16ref::expect_within(down(g_dw, dw0.size()), dw, dw0, "bf16 matmul_backward dweight" + shape);
      bf16ref::expect_within(down(g_db, db0.size()), db, db0, "bf16 matmul_backward dbias (float32)" + shape);
    }
  }
}

// fp32 and bf16 GEMMs of the same float32 inputs: their difference is the
// effect of rounding the operands, no more and no less.
//  (1) |bf16 - fp32| <= (2u + u²)·S + 2·acc, u = 2^-8 (bf16's unit roundoff):
//      |r(a)r(b) - ab| <= (2u + u²)|a||b| per product, plus both
//      accumulation bounds acc = 1e-5·S + 1e-6 (S = Σ|a||b|, the larger of
//      the unrounded and the rounded sums);
//  (2) (bf16 - fp32) matches the double-precision difference of the rounded
//      and unrounded references within 2·acc, and that difference is at
//      least 10·acc somewhere (checked on the CPU, so the test has teeth):
//      bf16 mode that computed in fp32 (or garbage) fails (2).
TEST_F(CudaBf16, DiffersFromFp32ByTheOperandRoundingOnly) {
  const int N = 48, C = 96, OC = 80;
  const auto inp = random_floats(size_t(N) * C, 21), w = random_floats(size_t(OC) * C, 22),
             dout = random_floats(size_t(N) * OC, 23);
  auto g_inp = up(inp), g_w = up(w), g_dout = up(dout);
  const double u = kBf16UnitRoundoff;  // 2^-8
  struct Case {
    std::string what;
    bf16ref::Ref exact, rounded;
    std::vector<float> fp32, bf16;
  };
  std::vector<Case> cases;
  {
    Case c{"forward", bf16ref::forward(inp, w, N, C, OC, false), bf16ref::forward(inp, w, N, C, OC, true), {}, {}};
    for (Backend<float>* be : {gpu_.get(), bf16_.get()}) {
      auto g_out = up(std::vector<float>(size_t(N) * OC));
      be->matmul_forward(g_out.get(), g_inp.get(), g_w.get(), nullptr, N, C, OC);
      (be == gpu_.get() ? c.fp32 : c.bf16) = down(g_out, size_t(N) * OC);
    }
    cases.push_back(std::move(c));
  }
  {
    Case di{"backward dinp", bf16ref::dinp(dout, w, N, C, OC, false), bf16ref::dinp(dout, w, N, C, OC, true), {}, {}};
    Case dw{"backward dweight",
            bf16ref::dweight(dout, inp, N, C, OC, false),
            bf16ref::dweight(dout, inp, N, C, OC, true),
            {},
            {}};
    for (Backend<float>* be : {gpu_.get(), bf16_.get()}) {
      auto g_dinp = up(std::vector<float>(size_t(N) * C)), g_dw = up(std::vector<float>(size_t(OC) * C));
      be->matmul_backward(g_dinp.get(), g_dw.get(), nullptr, g_dout.get(), g_inp.get(), g_w.get(), N, C, OC);
      (be == gpu_.get() ? di.fp32 : di.bf16) = down(g_dinp, size_t(N) * C);
      (be == gpu_.get() ? dw.fp32 : dw.bf16) = down(g_dw, size_t(OC) * C);
    }
    cases.push_back(std::move(di));
    cases.push_back(std::move(dw));
  }
  for (const Case& c : cases) {
    double worst_bound = 0, worst_match = 0, largest_effect = 0;
    for (size_t i = 0; i < c.fp32.size(); ++i) {
      // Accumulation bound of either GEMM (the rounded operands' Σ|ab| is at most (1+u)² S).
      const double S = c.exact.mag[i];
      const double acc = bf16ref::kAccRel * std::max(S, c.rounded.mag[i]) + bf16ref::kAccAbs;
      const double diff = double(c.bf16[i]) - double(c.fp32[i]);
      const double effect = c.rounded.val[i] - c.exact.val[i];  // what rounding the operands does, exactly
      worst_bound = std::max(worst_bound, std::abs(diff) / ((2 * u + u * u) * S + 2 * acc));
      worst_match = std::max(worst_match, std::abs(diff - effect) / (2 * acc));
      largest_effect = std::max(largest_effect, std::abs(effect) / acc);
      if (std::isnan(diff)) worst_bound = worst_match = INFINITY;
    }
    ASSERT_GE(largest_effect, 10.0) << c.what << ": the inputs should make the bf16 rounding visible";
    EXPECT_LE(worst_bound, 1.0) << c.what << ": |bf16 - fp32| exceeds the operand-rounding bound";
    EXPECT_LE(worst_match, 1.0) << c.what << ": bf16 - fp32 is not the effect of rounding the operands to bf16 "
                                << "(largest effect " << largest_effect << " x the accumulation tolerance)";
  }
}

// NaN and infinity survive the device's conversion (a non-finite input must
// reach the output, or the trainer's non-finite check would miss it); the
// other rows stay finite.
TEST_F(CudaBf16, NonFiniteInputsPropagate) {
  const int N = 4, C = 16, OC = 8;
  auto inp = random_floats(size_t(N) * C, 31);
  const auto w = random_floats(size_t(OC) * C, 32);
  inp[0 * C + 3] = NAN;
  inp[1 * C + 5] = std::bit_cast<float>(0x7f800001u);  // signalling NaN: truncation would make it inf
  inp[2 * C + 7] = INFINITY;
  auto g_inp = up(inp), g_w = up(w), g_out = up(std::vector<float>(size_t(N) * OC));
  bf16_->matmul_forward(g_out.get(), g_inp.get(), g_w.get(), nullptr, N, C, OC);
  const auto out = down(g_out, size_t(N) * OC);
  for (int o = 0; o < OC; ++o) {
    EXPECT_TRUE(std::isnan(out[0 * OC + o])) << o;
    EXPECT_TRUE(std::isnan(out[1 * OC + o])) << o;
    EXPECT_FALSE(std::isfinite(out[2 * OC + o])) << o;  // ±inf (w has both signs; never 0)
    EXPECT_TRUE(std::isfinite(out[3 * OC + o])) << o;
  }
}

#ifdef GPT_HAVE_CUDA
// The device conversion is the host function, bit for bit: every bf16
// pattern, ties, values just off ties, NaNs, infinities, subnormals, random
// floats; and the padded layout (rows of ld_dst elements, padding zero).
TEST_F(CudaBf16, DeviceRoundingIsTheHostRoundingBitForBit) {
  std::vector<float> x;
  for (uint32_t b = 0; b < 65536; ++b) x.push_back(std::bit_cast<float>(b << 16));
  for (uint32_t b = 0; b < 65536; b += 7) {
    for (uint32_t low : {0x8000u, 0x7fffu, 0x8001u, 0x0001u, 0xffffu})
      x.push_back(std::bit_cast<float>((b << 16) | low));
  }
  std::mt19937 rng(41);
  for (int i = 0; i < 100000; ++i) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  const int cols = 13, ld = 16;  // not a multiple of 8: padded rows
  while (x.size() % cols) x.push_back(1.0f);
  const int rows = static_cast<int>(x.size() / cols);
  float* d_src = nullptr;
  uint16_t *d_flat = nullptr, *d_pad = nullptr;
  ASSERT_EQ(cudaMalloc(&d_src, x.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_flat, x.size() * sizeof(uint16_t)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_pad, size_t(rows) * ld * sizeof(uint16_t)), cudaSuccess);
  std::vector<uint16_t> flat(x.size()), pad(size_t(rows) * ld, 0xabcd);
  ASSERT_EQ(cudaMemcpy(d_src, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_pad, pad.data(), pad.size() * sizeof(uint16_t), cudaMemcpyHostToDevice), cudaSuccess);
  cuda::convert_to_bf16(d_flat, d_src, rows, cols, cols, nullptr);
  cuda::convert_to_bf16(d_pad, d_src, rows, cols, ld, nullptr);
  ASSERT_EQ(cudaMemcpy(flat.data(), d_flat, flat.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(pad.data(), d_pad, pad.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_src);
  cudaFree(d_flat);
  cudaFree(d_pad);
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t want = round_to_bf16_bits(x[i]);
    const size_t r = i / cols, c = i % cols;
    if (flat[i] != want || pad[r * ld + c] != want) {
      if (bad++ == 0) first_bad = i;
    }
  }
  EXPECT_EQ(bad, 0u) << "first mismatch: float bits " << std::hex << std::bit_cast<uint32_t>(x[first_bad]) << " host "
                     << round_to_bf16_bits(x[first_bad]) << " device " << flat[first_bad] << " / padded "
                     << pad[first_bad / cols * ld + first_bad % cols];
  for (int r = 0; r < rows; ++r)
    for (int c = cols; c < ld; ++c) ASSERT_EQ(pad[size_t(r) * ld + c], 0) << "padding of row " << r;
}
#endif  // GPT_HAVE_CUDA

// A tiny GPT trained a few steps with bf16 GEMM operands next to the CPU in
// float32: the whole model runs through the bf16 path (every linear layer and
// the classifier), stays finite, and its losses agree with float32 to the
// effect of the bf16 rounding (within 2e-2 relative here; float32 on both
// sides agrees to 1e-4, TinyModelTrainsLikeCpu).
TEST_F(CudaBf16, TinyModelTrainsCloseToFloat32) {
  TinyModelPair p(*cpu_, *bf16_);
  for (int s = 0; s < 4; ++s) {
    const auto [cpu, gpu] = p.step(s);
    ASSERT_TRUE(std::isfinite(gpu)) << "step " << s;
    EXPECT_NEAR(gpu, cpu, 2e-2 * cpu) << "step " << s;
  }
}

}  // namespace
}  // namespace gpt
