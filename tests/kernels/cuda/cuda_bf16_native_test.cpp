// The native bf16 ops of the CUDA backend (GPT_BACKEND_NATIVE_BF16_OPS,
// kernels/cuda/storage.cuh): LayerNorm, GELU, the residual adds and the
// classifier reading and writing bf16 as stored. Each against what the
// bf16-storage adapter did before them, on the same backend: widen the bf16
// operands (Device::convert), the float32 op, round the bf16 results. The
// float32 math between is the same code, so bf16 results, the statistics
// and the losses must be equal bit for bit; LayerNorm's weight gradients
// are float32 sums that the kernel adds across row blocks with atomicAdd,
// whose order the emulator's block order (and a GPU) changes: within float32
// reassociation (1e-5 relative). Skipped without a CUDA device; on the
// emulator in scripts/test.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/tokens.h"
#include "kernels/bf16_round.h"

namespace gpt {
namespace {

class CudaBf16Native : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) GTEST_SKIP() << "no CUDA device (" << why << ")";
    gpu = make_backend("cuda", "fp32");
  }

  template <typename E>
  Buffer<E> up(const std::vector<E>& h) {
    Buffer<E> b(*gpu, h.size());
    gpu->upload(b.get(), h.data(), h.size());
    return b;
  }
  template <typename E>
  std::vector<E> down(const Buffer<E>& b) {
    std::vector<E> h(b.size());
    gpu->download(h.data(), b.get(), h.size());
    return h;
  }
  std::vector<bf16> random_bf16(size_t n, float scale, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.f, scale);
    std::vector<bf16> v(n);
    for (bf16& x : v) x.bits = round_to_bf16_bits(d(rng));
    return v;
  }
  // The adapter's way: bf16 -> float32 scratch, and back.
  Buffer<float> widen(const Buffer<bf16>& b) {
    Buffer<float> f(*gpu, b.size());
    gpu->convert(f.get(), b.get(), b.size());
    return f;
  }
  std::vector<bf16> narrow(const Buffer<float>& f) {
    Buffer<bf16> b(*gpu, f.size());
    gpu->convert(b.get(), f.get(), f.size());
    return down(b);
  }
  static size_t differing_bits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
    size_t n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += a[i].bits != b[i].bits;
    return n;
  }
  static size_t differing_bits(const std::vector<float>& a, const std::vector<float>& b) {
    size_t n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return n;
  }

  std::unique_ptr<Backend<float>> gpu;
};

TEST_F(CudaBf16Native, ElementwiseOpsEqualTheAdaptersWidenOpRound) {
  const size_t n = 3000;  // more than one block of 256
  const auto x = random_bf16(n, 2.f, 1), y = random_bf16(n, 1.f, 2), d0 = random_bf16(n, 0.5f, 3);
  Buffer<bf16> bx = up(x), by = up(y);
  {  // GELU forward
    Buffer<bf16> out(*gpu, n);
    ASSERT_TRUE(gpu->gelu_forward_bf16(out.get(), bx.get(), n));
    Buffer<float> fo(*gpu, n), fx = widen(bx);
    gpu->gelu_forward(fo.get(), fx.get(), n);
    EXPECT_EQ(differing_bits(down(out), narrow(fo)), 0u) << "gelu_forward";
  }
  {  // GELU backward: dinp += gelu'(x)·dout
    Buffer<bf16> dinp = up(d0);
    ASSERT_TRUE(gpu->gelu_backward_bf16(dinp.get(), bx.get(), by.get(), n));
    Buffer<bf16> d0b = up(d0);
    Buffer<float> fd = widen(d0b), fx = widen(bx), fy = widen(by);
    gpu->gelu_backward(fd.get(), fx.get(), fy.get(), n);
    EXPECT_EQ(differing_bits(down(dinp), narrow(fd)), 0u) << "gelu_backward";
  }
  {  // residual: out = a + b; add_inplace: dst += src
    Buffer<bf16> out(*gpu, n), dst = up(d0);
    ASSERT_TRUE(gpu->residual_forward_bf16(out.get(), bx.get(), by.get(), n));
    ASSERT_TRUE(gpu->add_inplace_bf16(dst.get(), bx.get(), n));
    Buffer<float> fo(*gpu, n), fx = widen(bx), fy = widen(by);
    gpu->residual_forward(fo.get(), fx.get(), fy.get(), n);
    EXPECT_EQ(differing_bits(down(out), narrow(fo)), 0u) << "residual_forward";
    Buffer<bf16> d0b = up(d0);
    Buffer<float> fd = widen(d0b);
    gpu->add_inplace(fd.get(), fx.get(), n);
    EXPECT_EQ(differing_bits(down(dst), narrow(fd)), 0u) << "add_inplace";
  }
}

TEST_F(CudaBf16Native, LayerNormEqualsTheAdaptersWidenOpRound) {
  const int N = 37, C = 96;  // rows over several blocks; C not a multiple of 32
  const size_t NC = size_t(N) * C;
  Buffer<bf16> inp = up(random_bf16(NC, 3.f, 4)), w = up(random_bf16(C, 1.f, 5)), b = up(random_bf16(C, 0.3f, 6));
  Buffer<bf16> out(*gpu, NC);
  Buffer<float> mean(*gpu, N), rstd(*gpu, N);
  ASSERT_TRUE(gpu->layernorm_forward_bf16(out.get(), mean.get(), rstd.get(), inp.get(), w.get(), b.get(), N, C));
  Buffer<float> fo(*gpu, NC), fmean(*gpu, N), frstd(*gpu, N), finp = widen(inp), fw = widen(w), fb = widen(b);
  gpu->layernorm_forward(fo.get(), fmean.get(), frstd.get(), finp.get(), fw.get(), fb.get(), N, C);
  EXPECT_EQ(differing_bits(down(out), narrow(fo)), 0u) << "layernorm_forward out";
  EXPECT_EQ(differing_bits(down(mean), down(fmean)), 0u) << "mean";
  EXPECT_EQ(differing_bits(down(rstd), down(frstd)), 0u) << "rstd";

  const auto d0 = random_bf16(NC, 0.5f, 7);
  Buffer<bf16> dout = up(random_bf16(NC, 1.f, 8)), dinp = up(d0);
  Buffer<float> dw = up(std::vector<float>(C, 0.25f)), db = up(std::vector<float>(C, -0.5f));
  ASSERT_TRUE(gpu->layernorm_backward_bf16(dinp.get(), dw.get(), db.get(), dout.get(), inp.get(), w.get(), mean.get(),
                                           rstd.get(), N, C));
  Buffer<bf16> d0b = up(d0);
  Buffer<float> fdinp = widen(d0b), fdout = widen(dout), fdw = up(std::vector<float>(C, 0.25f)),
                fdb = up(std::vector<float>(C, -0.5f));
  gpu->layernorm_backward(fdinp.get(), fdw.get(), fdb.get(), fdout.get(), finp.get(), fw.get(), fmean.get(),
                          frstd.get(), N, C);
  EXPECT_EQ(differing_bits(down(dinp), narrow(fdinp)), 0u) << "layernorm_backward dinp";
  const auto a_dw = down(dw), r_dw = down(fdw), a_db = down(db), r_db = down(fdb);
  for (int c = 0; c < C; ++c) {
    EXPECT_NEAR(a_dw[c], r_dw[c], 1e-5 * (std::fabs(r_dw[c]) + 1)) << "dw " << c;
    EXPECT_NEAR(a_db[c], r_db[c], 1e-5 * (std::fabs(r_db[c]) + 1)) << "db " << c;
  }
}

TEST_F(CudaBf16Native, ClassifierEqualsTheAdaptersWidenOpRound) {
  const int N = 9, V = 100, Vp = 128;
  const size_t NV = size_t(N) * Vp;
  auto logits = random_bf16(NV, 3.f, 9);
  for (int r = 0; r < N; ++r)
    for (int v = V; v < Vp; ++v) logits[size_t(r) * Vp + v].bits = 0;
  std::vector<int32_t> targets = {3, 0, 99, kIgnoreTarget, 50, 7, 7, 1, 98};
  Buffer<bf16> bl = up(logits);
  TokenBuffer bt = up(targets);
  Buffer<float> losses(*gpu, N), flosses(*gpu, N), fl = widen(bl);
  ASSERT_TRUE(gpu->crossentropy_forward_bf16(losses.get(), bl.get(), bt.get(), N, V, Vp));
  gpu->crossentropy_forward(flosses.get(), fl.get(), bt.get(), N, V, Vp);
  EXPECT_EQ(differing_bits(down(losses), down(flosses)), 0u) << "crossentropy_forward";
  EXPECT_EQ(down(losses)[3], 0.f);  // the ignored target
  // The backward in place (dlogits = logits), as the model calls it.
  std::vector<float> dl(N, 1.f / N);
  Buffer<float> dloss = up(dl);
  ASSERT_TRUE(gpu->crossentropy_backward_bf16(bl.get(), bl.get(), bt.get(), dloss.get(), N, V, Vp));
  gpu->crossentropy_backward(fl.get(), fl.get(), bt.get(), dloss.get(), N, V, Vp);
  EXPECT_EQ(differing_bits(down(bl), narrow(fl)), 0u) << "crossentropy_backward";
}

// The CPU backend has no native bf16 forms: the adapter widens there.
TEST(Bf16NativeOps, CpuBackendDeclinesThem) {
  auto cpu = make_cpu_backend<float>();
  Buffer<bf16> a(*cpu, 4), b(*cpu, 4);
  EXPECT_FALSE(cpu->gelu_forward_bf16(a.get(), b.get(), 4));
  EXPECT_FALSE(cpu->add_inplace_bf16(a.get(), b.get(), 4));
}

}  // namespace
}  // namespace gpt
