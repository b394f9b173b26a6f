// run.storage "bf16" on CUDA: the bf16-storage adapter over the CUDA
// backend against the CPU float32 backend (bf16_ops_check.h), the
// conversion kernels against the CPU's bit for bit, and a tiny GPT trained
// with bf16 storage on both devices. Skipped without a CUDA device; in the
// emulator build (scripts/test.sh) they run on the CPU.
//
// Tolerances: a float32 output of the CUDA kernels differs from the CPU's
// by float32 rounding (CudaOps' tolerances, up to 1e-4), so its rounding to
// bf16 may land on the neighbouring bf16 value: bf16 outputs are held to one
// bf16 step (2^-7 relative) plus 1e-5 absolute for results near zero;
// float32 outputs to 2e-4·(|x| + 1); losses of the tiny model to 1e-2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/bf16_ops_check.h"
#include "config/attention.h"
#include "model/gpt.h"
#include "train/optimizer.h"

namespace gpt {
namespace {

class CudaBf16Storage : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) GTEST_SKIP() << "no CUDA device (" << why << ")";
  }
};

// With the default chunk (every op of the check in one chunk) and with
// chunks of one unit (a row, a sequence or an element: many calls per op).
TEST_F(CudaBf16Storage, EveryOpMatchesTheCpuFloatOpRoundedOnce) {
  auto ref = make_cpu_backend<float>();
  ModelConfig mc;
  mc.context = 7;
  for (size_t chunk : {kBf16ChunkFloats, size_t(1)}) {
    auto subject = make_bf16_backend(make_backend("cuda", "fp32"), chunk);
    for (const auto& [name, spec] : testing_bf16::check_variants(mc)) {
      testing_bf16::Bf16OpsCheck check(*subject, *ref, {0x1p-7, 2e-4, 1e-5});
      check.run_all(spec, name);
      if (HasFailure()) FAIL() << "variant " << name << ", chunk " << chunk;
      EXPECT_EQ(check.checked(), testing_bf16::Bf16OpsCheck::expected_checks(spec));
    }
  }
}

// The CUDA backend multiplies bf16 operands as stored exactly when both
// widths are multiples of 8 (rows of 16 bytes); otherwise it declines and
// the adapter widens them. Both ways give the float32 op's results.
TEST_F(CudaBf16Storage, DirectGemmPathForRowsOf16BytesWideningOtherwise) {
  auto gpu = make_backend("cuda", "fp32");
  const int N = 3;
  for (auto [C, OC, direct] : {std::tuple{32, 24, true}, {32, 20, false}, {20, 24, false}}) {
    Buffer<bf16> inp(*gpu, size_t(N) * C), w(*gpu, size_t(OC) * C), dout(*gpu, size_t(N) * OC);
    Buffer<float> out(*gpu, size_t(N) * OC), dinp(*gpu, size_t(N) * C), dw(*gpu, size_t(OC) * C);
    EXPECT_EQ(gpu->matmul_forward_bf16(out.get(), inp.get(), w.get(), nullptr, N, C, OC), direct) << C << "x" << OC;
    EXPECT_EQ(gpu->matmul_backward_bf16(dinp.get(), dw.get(), nullptr, dout.get(), inp.get(), w.get(), N, C, OC),
              direct)
        << C << "x" << OC;
  }
  // (The CPU backend reads bf16 operands for every shape: tests/backend/bf16_backend_test.cpp.)

  auto ref = make_cpu_backend<float>();
  ModelConfig mc;
  mc.context = 7;
  const AttentionSpec spec = resolve_attention(AttentionConfig{}, mc);
  for (size_t chunk : {kBf16ChunkFloats, size_t(1)}) {
    auto subject = make_bf16_backend(make_backend("cuda", "fp32"), chunk);
    for (auto [OC, IC] : {std::pair{20, 32}, {24, 20}}) {
      testing_bf16::Bf16OpsCheck check(*subject, *ref, {0x1p-7, 2e-4, 1e-5});
      check.run_all(spec, "softmax", OC, IC);
      EXPECT_EQ(check.checked(), testing_bf16::Bf16OpsCheck::expected_checks(spec));
    }
  }
}

// host -> backend memory, Device::convert there, back to the host.
template <typename To, typename From>
std::vector<To> convert_on(Device& d, const std::vector<From>& in) {
  Buffer<From> src(d, in.size());
  Buffer<To> dst(d, in.size());
  d.upload(src.get(), in.data(), in.size());
  d.convert(dst.get(), src.get(), in.size());
  std::vector<To> out(in.size());
  d.download(out.data(), dst.get(), out.size());
  return out;
}

TEST_F(CudaBf16Storage, ConversionsMatchTheCpuBitForBit) {
  auto gpu = make_backend("cuda", "fp32");
  auto cpu = make_cpu_backend<float>();
  // Every bf16 bit pattern widened (NaNs included) ...
  std::vector<bf16> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i].bits = static_cast<uint16_t>(i);
  const auto wide_gpu = convert_on<float>(*gpu, all), wide_cpu = convert_on<float>(*cpu, all);
  size_t bad = 0;
  for (size_t i = 0; i < all.size(); ++i) bad += std::memcmp(&wide_gpu[i], &wide_cpu[i], sizeof(float)) != 0;
  EXPECT_EQ(bad, 0u) << "widened patterns that differ";
  // ... and float32 bit patterns rounded: every exponent, mantissas at and around the ties.
  std::vector<uint32_t> bits;
  for (uint32_t e = 0; e < 256; ++e)
    for (uint32_t low : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0x18000u, 0x17fffu, 0x7fffffu, 0x7f8000u})
      for (uint32_t sign : {0u, 0x80000000u}) bits.push_back(sign | (e << 23) | low);
  std::vector<float> in(bits.size());
  std::memcpy(in.data(), bits.data(), bits.size() * sizeof(float));
  const auto r_gpu = convert_on<bf16>(*gpu, in), r_cpu = convert_on<bf16>(*cpu, in);
  bad = 0;
  for (size_t i = 0; i < in.size(); ++i) bad += r_gpu[i].bits != r_cpu[i].bits;
  EXPECT_EQ(bad, 0u) << "rounded patterns that differ, of " << in.size();
}

TEST_F(CudaBf16Storage, TinyModelTrainsLikeTheCpu) {
  ModelConfig mc;
  mc.n_layer = 2;
  mc.n_head = 2;
  mc.n_embd = 32;  // head size 16, the smallest the CUDA attention takes
  mc.vocab_size = 50;
  mc.context = 8;
  mc.position = "rope";
  const AttentionSpec spec = resolve_attention(AttentionConfig{}, mc);
  auto on_cpu = make_model(mc, spec, "cpu", "fp32", "bf16");
  auto on_gpu = make_model(mc, spec, "cuda", "fp32", "bf16");
  on_cpu->init(3);
  on_gpu->init(3);
  TrainConfig tc;
  tc.lr = 3e-3;
  Optimizer<float> opt_cpu(*on_cpu, tc), opt_gpu(*on_gpu, tc);
  const int B = 2, T = 8;
  std::vector<int32_t> t(B * T + 1);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 17 + 3) % mc.vocab_size);
  for (int step = 0; step < 5; ++step) {
    const double lc = on_cpu->forward(t.data(), t.data() + 1, B, T), lg = on_gpu->forward(t.data(), t.data() + 1, B, T);
    EXPECT_NEAR(lg, lc, 1e-2 * lc) << "step " << step;
    for (auto [m, o] : {std::pair{on_cpu.get(), &opt_cpu}, std::pair{on_gpu.get(), &opt_gpu}}) {
      m->zero_grad();
      m->backward();
      o->clip(1.0);
      o->step(tc.lr);
    }
  }
}

// Device memory (the emulator's allocation accounting; cudaMemGetInfo on a
// GPU), issue 19. bf16 storage: after a training step the adapter's float32
// scratch of chunked conversion is far below whole-tensor widening, whose
// largest operand is the logits (N·Vp floats), and the losses agree. fp32:
// an evaluation within the training tokens allocates nothing; a longer one
// frees the training activations for its own.
TEST_F(CudaBf16Storage, ChunkedScratchAndSharedActivationsOnTheDevice) {
  ModelConfig mc;
  mc.n_layer = 3;
  mc.n_head = 2;
  mc.n_embd = 32;
  mc.vocab_size = 1000;  // padded to 1024: logits of 32 tokens are 128 KiB in float32
  mc.context = 8;
  mc.max_position = 64;
  const AttentionSpec spec = resolve_attention(AttentionConfig{}, mc);
  const int B = 4, T = 8;
  std::vector<int32_t> t(8 * T + 1);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 37 + 5) % 50);  // valid in both vocabularies
  TrainConfig tc;
  auto step_in_use = [&](size_t chunk, double* loss) {
    const size_t base = cuda_memory_in_use();
    auto m = make_model(mc, spec, make_backend("cuda", "fp32"), "bf16", chunk);
    m->init(2);
    Optimizer<float> o(*m, tc);
    m->zero_grad();
    *loss = m->forward(t.data(), t.data() + 1, B, T);
    m->backward();
    o.step(tc.lr);
    return cuda_memory_in_use() - base;
  };
  double l_whole = 0, l_chunk = 0;
  const size_t whole = step_in_use(0, &l_whole), chunked = step_in_use(1024, &l_chunk);
  const size_t logits_f32 = size_t(B) * T * 1024 * sizeof(float);
  std::printf(
      "device memory after a bf16 step: whole-tensor widening %zu bytes, chunks of 1024 floats %zu bytes "
      "(logits in float32: %zu)\n",
      whole, chunked, logits_f32);
  EXPECT_LT(chunked + logits_f32 / 2, whole);
  EXPECT_NEAR(l_chunk, l_whole, 1e-3 * l_whole);

  // Fewer logits and more layers: one layer's inference buffers for 64
  // tokens take less than four layers' training buffers for 32.
  mc.vocab_size = 50;
  mc.n_layer = 4;
  auto m = make_model(mc, resolve_attention(AttentionConfig{}, mc), "cuda", "fp32", "fp32");
  m->init(2);
  m->forward(t.data(), t.data() + 1, B, T);
  const size_t trained = cuda_memory_in_use();
  std::vector<float> losses;
  m->forward_losses(t.data(), t.data() + 1, 2, T, losses);  // 16 of the 32 training tokens
  EXPECT_EQ(cuda_memory_in_use(), trained);
  m->forward_losses(t.data(), t.data() + 1, 1, 8 * T, losses);  // 64 tokens: its own buffers, one layer
  EXPECT_LT(cuda_memory_in_use(), trained);
}

}  // namespace
}  // namespace gpt
