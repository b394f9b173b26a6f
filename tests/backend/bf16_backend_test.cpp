// The bf16-storage adapter (src/backend/bf16_backend.cpp) over the CPU
// backend: every op gives exactly the float32 op on the same values, its
// bf16 outputs rounded once (bf16_ops_check.h), for every attention preset.
#include <gtest/gtest.h>

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
  for (const AttentionPreset& p : kAttentionPresets) {
    AttentionConfig ac;
    ac.preset = p.name;
    testing_bf16::Bf16OpsCheck check(*subject, *ref, {});
    const AttentionSpec spec = resolve_attention(ac, mc);
    check.run_all(spec, p.name);
    if (HasFailure()) FAIL() << "preset " << p.name;
    EXPECT_EQ(check.checked(), testing_bf16::Bf16OpsCheck::expected_checks(spec));  // every comparison ran
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
