// The bf16-storage adapter (src/backend/bf16_backend.cpp) over the CPU
// backend: every op gives exactly the float32 op on the same values, its
// bf16 outputs rounded once (bf16_ops_check.h), for every attention preset.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "config/attention.h"
#include "backend/bf16_ops_check.h"

namespace gpt {
namespace {

TEST(Bf16Backend, EveryOpIsTheFloatOpOnTheSameValuesRoundedOnce) {
  auto subject = make_bf16_backend(make_cpu_backend<float>());
  auto ref = make_cpu_backend<float>();
  EXPECT_EQ(subject->name(), "cpu, bf16 storage");
  ModelConfig mc;
  mc.context = 7;
  for (const auto& [name, spec] : testing_bf16::check_variants(mc)) {
    testing_bf16::Bf16OpsCheck check(*subject, *ref, {});
    check.run_all(spec, name);
    if (HasFailure()) FAIL() << "variant " << name;
    EXPECT_EQ(check.checked(), testing_bf16::Bf16OpsCheck::expected_checks(spec));  // every comparison ran
  }
}

// Chunked conversion (issue 19): with any chunk size, from whole tensors (0)
// down to one unit per call (1: a row, a sequence or an element), every op
// still gives exactly the float32 op on the whole widened tensors, rounded
// once. The sums across units (parameter gradients, attention diagnostics)
// are compared bit for bit too.
TEST(Bf16Backend, ChunkedConversionIsBitIdenticalToWholeTensors) {
  auto ref = make_cpu_backend<float>();
  ModelConfig mc;
  mc.context = 7;
  for (size_t chunk : {size_t(0), size_t(1), size_t(50), size_t(200)}) {
    auto subject = make_bf16_backend(make_cpu_backend<float>(), chunk);
    for (const auto& [name, spec] : testing_bf16::check_variants(mc)) {
      testing_bf16::Bf16OpsCheck check(*subject, *ref, {});
      check.run_all(spec, name);
      if (HasFailure()) FAIL() << "variant " << name << ", chunk " << chunk;
      EXPECT_EQ(check.checked(), testing_bf16::Bf16OpsCheck::expected_checks(spec));
    }
  }
}

// The CPU float32 backend multiplies bf16 operands as they are, for every
// shape, bit for bit as on the operands widened (the GEMM widens what it
// packs): rows past one packing block (K = 300 > 256) and odd widths.
TEST(Bf16Backend, CpuLinearLayerReadsBf16OperandsBitForBit) {
  auto be = make_cpu_backend<float>();
  for (auto [N, C, OC] : {std::tuple{7, 5, 3}, {13, 300, 17}, {300, 24, 40}}) {
    const auto hv = [](size_t n, uint64_t seed) { return testing_bf16::Bf16OpsCheck::values(n, seed); };
    const auto inp = hv(size_t(N) * C, 1), w = hv(size_t(OC) * C, 2), dout = hv(size_t(N) * OC, 3);
    const auto bias = hv(OC, 4);
    auto up = [&](const std::vector<float>& v) {
      Buffer<float> f(*be, v.size());
      be->upload(f.get(), v.data(), v.size());
      return f;
    };
    auto up16 = [&](const std::vector<float>& v) {
      std::vector<bf16> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i].bits = round_to_bf16_bits(v[i]);
      Buffer<bf16> b(*be, v.size());
      be->upload(b.get(), h.data(), h.size());
      return b;
    };
    auto down = [&](const Buffer<float>& b) {
      std::vector<float> h(b.size());
      be->download(h.data(), b.get(), h.size());
      return h;
    };
    Buffer<float> fi = up(inp), fw = up(w), fd = up(dout), fb = up(bias);
    Buffer<bf16> bi = up16(inp), bw = up16(w), bd = up16(dout);
    Buffer<float> out_f(*be, size_t(N) * OC), out_b(*be, size_t(N) * OC);
    be->matmul_forward(out_f.get(), fi.get(), fw.get(), fb.get(), N, C, OC);
    ASSERT_TRUE(be->matmul_forward_bf16(out_b.get(), bi.get(), bw.get(), fb.get(), N, C, OC));
    EXPECT_EQ(down(out_b), down(out_f)) << N << "x" << C << "x" << OC;
    const auto start = hv(size_t(N) * C, 5), wstart = hv(size_t(OC) * C, 6), bstart = hv(OC, 7);
    Buffer<float> di_f = up(start), di_b = up(start), dw_f = up(wstart), dw_b = up(wstart), db_f = up(bstart),
                  db_b = up(bstart);
    be->matmul_backward(di_f.get(), dw_f.get(), db_f.get(), fd.get(), fi.get(), fw.get(), N, C, OC);
    ASSERT_TRUE(be->matmul_backward_bf16(di_b.get(), dw_b.get(), db_b.get(), bd.get(), bi.get(), bw.get(), N, C, OC));
    EXPECT_EQ(down(di_b), down(di_f));
    EXPECT_EQ(down(dw_b), down(dw_f));
    EXPECT_EQ(down(db_b), down(db_f));
    // Asked apart (as the adapter does), the same bits.
    Buffer<float> di_2 = up(start), dw_2 = up(wstart);
    ASSERT_TRUE(be->matmul_backward_bf16(nullptr, dw_2.get(), nullptr, bd.get(), bi.get(), bw.get(), N, C, OC));
    ASSERT_TRUE(be->matmul_backward_bf16(di_2.get(), nullptr, nullptr, bd.get(), bi.get(), bw.get(), N, C, OC));
    EXPECT_EQ(down(di_2), down(di_f));
    EXPECT_EQ(down(dw_2), down(dw_f));
  }
}

TEST(Bf16Backend, ConversionsRoundToNearestEvenAndWidenExactly) {
  auto be = make_cpu_backend<float>();
  // 1 + 2^-8 is half way between bf16 neighbours 1 and 1 + 2^-7: ties to even (1);
  // 1 + 3·2^-8 is half way between 1 + 2^-7 and 1 + 2^-6: to even (1 + 2^-6).
  const std::vector<float> in = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, 0.0f, 1e-40f};
  Buffer<float> f(*be, in.size()), back(*be, in.size());
  Buffer<bf16> h(*be, in.size());
  be->upload(f.get(), in.data(), in.size());
  be->convert(h.get(), f.get(), in.size());
  be->convert(back.get(), h.get(), in.size());
  std::vector<float> out(in.size());
  be->download(out.data(), back.get(), out.size());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 1.0f + 0x1p-6f);
  EXPECT_EQ(out[2], -2.5f);
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_EQ(out[4], round_to_bf16(1e-40f));  // subnormals are kept, not flushed
  EXPECT_NE(out[4], 0.0f);
}

}  // namespace
}  // namespace gpt
