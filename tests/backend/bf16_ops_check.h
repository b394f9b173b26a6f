// Checks every op of a Backend<bf16> (the bf16-storage adapter over some
// float32 backend) against the CPU float32 backend run on the same values:
// inputs are random bf16 values (so float32 holds them exactly), and each op
// must give
//   * bf16 outputs: the float32 reference output rounded to bf16;
//   * float32 outputs (parameter gradients, statistics, losses): the
//     reference output.
// Outputs the ops accumulate into start from random bf16 values too.
// With tolerance 0 (the adapter over the CPU backend) both must be equal bit
// for bit; otherwise (over CUDA, whose float32 kernels round differently)
// within the tolerances. Used by tests/backend/bf16_backend_test.cpp and
// tests/kernels/cuda/cuda_bf16_storage_test.cpp.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "config/attention.h"
#include "kernels/attention_spec.h"
#include "kernels/bf16_round.h"

namespace gpt::testing_bf16 {

// The attention variants the bf16 checks run: every preset, and KERPLE's two
// learned biases (on softmax and on the learned sink), at model context mc.
inline std::vector<std::pair<std::string, AttentionSpec>> check_variants(const ModelConfig& mc) {
  std::vector<std::pair<std::string, AttentionSpec>> v;
  for (const AttentionPreset& p : kAttentionPresets) {
    AttentionConfig ac;
    ac.preset = p.name;
    v.emplace_back(p.name, resolve_attention(ac, mc));
  }
  for (const auto& [preset, bias] : {std::pair<const char*, const char*>{"softmax", "kerple_log"},
                                     std::pair<const char*, const char*>{"sink", "kerple_power"},
                                     std::pair<const char*, const char*>{"softmax", "forget"}}) {
    AttentionConfig ac;
    ac.preset = preset;
    ac.position_bias = bias;
    v.emplace_back(std::string(preset) + "+" + bias, resolve_attention(ac, mc));
  }
  return v;
}

struct Tolerance {
  double storage = 0;  // bf16 outputs: |got - want| <= storage * |want| + abs
  double acc = 0;      // float32 outputs: |got - want| <= acc * (|want| + 1)
  double abs = 0;
};

class Bf16OpsCheck {
 public:
  Bf16OpsCheck(Backend<bf16>& subject, Backend<float>& ref, Tolerance tol) : s_(subject), r_(ref), tol_(tol) {}

  // n random bf16 values in [-scale, scale), as float32.
  static std::vector<float> values(size_t n, uint64_t seed, float scale = 1.0f) {
    std::vector<float> v(n);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (auto& e : v) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const double u = static_cast<double>(x >> 11) / 9007199254740992.0;
      e = round_to_bf16(static_cast<float>((2 * u - 1) * scale));
    }
    return v;
  }

  // One tensor on both sides: bf16 on the subject, float32 on the reference.
  struct Pair {
    Buffer<bf16> s;
    Buffer<float> r;
    size_t n = 0;
  };
  Pair pair(const std::vector<float>& v) {
    Pair p{Buffer<bf16>(s_, v.size()), Buffer<float>(r_, v.size()), v.size()};
    std::vector<bf16> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i].bits = round_to_bf16_bits(v[i]);
    s_.upload(p.s.get(), h.data(), h.size());
    r_.upload(p.r.get(), v.data(), v.size());
    return p;
  }
  // A float32 tensor on both sides.
  struct AccPair {
    Buffer<float> s, r;
    size_t n = 0;
  };
  AccPair acc_pair(const std::vector<float>& v) {
    AccPair p{Buffer<float>(s_, v.size()), Buffer<float>(r_, v.size()), v.size()};
    s_.upload(p.s.get(), v.data(), v.size());
    r_.upload(p.r.get(), v.data(), v.size());
    return p;
  }
  TokenBuffer tokens_s(const std::vector<int32_t>& ids) { return tokens(s_, ids); }
  TokenBuffer tokens_r(const std::vector<int32_t>& ids) { return tokens(r_, ids); }

  // The subject's bf16 output against the reference's float32 output rounded.
  void expect_storage(const Pair& p, const std::string& what) {
    std::vector<bf16> got(p.n);
    std::vector<float> want(p.n);
    s_.download(got.data(), p.s.get(), p.n);
    r_.download(want.data(), p.r.get(), p.n);
    size_t bad = 0;
    for (size_t i = 0; i < p.n; ++i) {
      const float w = round_to_bf16(want[i]), g = bf16_bits_to_float(got[i].bits);
      const bool ok = tol_.storage == 0 ? got[i].bits == round_to_bf16_bits(want[i])
                                        : std::abs(g - w) <= tol_.storage * std::abs(w) + tol_.abs;
      if (!ok && bad++ < 3)
        ADD_FAILURE() << what << "[" << i << "]: got " << g << " (bits " << got[i].bits << "), want " << w
                      << " (float32 reference " << want[i] << ")";
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << p.n << " differ";
    ++checked_;
  }
  void expect_acc(const AccPair& p, const std::string& what) {
    std::vector<float> got(p.n), want(p.n);
    s_.download(got.data(), p.s.get(), p.n);
    r_.download(want.data(), p.r.get(), p.n);
    size_t bad = 0;
    for (size_t i = 0; i < p.n; ++i) {
      const bool ok =
          tol_.acc == 0 ? got[i] == want[i] : std::abs(got[i] - want[i]) <= tol_.acc * (std::abs(want[i]) + 1);
      if (!ok && bad++ < 3) ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << p.n << " differ";
    ++checked_;
  }
  int checked() const { return checked_; }
  static int expected_checks(const AttentionSpec& spec) {
    return 63 + (spec.scale == Scale::Ssmax ? 1 : 0) + (spec.learned_sink() ? 1 : 0) + (spec.kerple() ? 1 : 0) +
           (spec.forget() ? 1 : 0);
  }

  // Every op once (attention with `spec`; head_scale used when the spec
  // learns its scales). Returns after the first op whose check failed.
  // Makes expected_checks(spec) comparisons.
  // IC, OC: input and output widths of the linear layer (CUDA reads bf16
  // operands directly when both are multiples of 8, and widens them otherwise).
  void run_all(const AttentionSpec& spec, const std::string& label, int OC = 24, int IC = 32) {
    const int B = 2, T = 7, C = 32, NH = 2, V = 13, Vp = 16;
    const size_t N = static_cast<size_t>(B) * T, NC = N * C;
    uint64_t seed = 100;
    auto next = [&] { return ++seed; };
    const std::vector<int32_t> ids = {0, 3, 12, 5, 5, 7, 1, 2, 9, 11, 4, 6, 8, 10};

    {  // embedding
      auto wte = pair(values(size_t(V) * C, next())), wpe = pair(values(size_t(T) * C, next()));
      auto out = pair(std::vector<float>(NC));
      auto ts = tokens_s(ids), tr = tokens_r(ids);
      s_.encoder_forward(out.s.get(), ts.get(), wte.s.get(), wpe.s.get(), B, T, C, V);
      r_.encoder_forward(out.r.get(), tr.get(), wte.r.get(), wpe.r.get(), B, T, C, V);
      expect_storage(out, "encoder_forward");
      s_.encoder_forward(out.s.get(), ts.get(), wte.s.get(), nullptr, B, T, C, V);
      r_.encoder_forward(out.r.get(), tr.get(), wte.r.get(), nullptr, B, T, C, V);
      expect_storage(out, "encoder_forward without wpe");
      auto dout = pair(values(NC, next()));
      auto dwte = acc_pair(values(size_t(V) * C, next())), dwpe = acc_pair(values(size_t(T) * C, next()));
      s_.encoder_backward(dwte.s.get(), dwpe.s.get(), dout.s.get(), ts.get(), B, T, C);
      r_.encoder_backward(dwte.r.get(), dwpe.r.get(), dout.r.get(), tr.get(), B, T, C);
      expect_acc(dwte, "encoder_backward dwte");
      expect_acc(dwpe, "encoder_backward dwpe");
    }
    if (::testing::Test::HasFailure()) return;
    {  // LayerNorm
      auto inp = pair(values(NC, next(), 3.0f)), w = pair(values(C, next())), b = pair(values(C, next()));
      auto out = pair(std::vector<float>(NC));
      auto mean = acc_pair(std::vector<float>(N)), rstd = acc_pair(std::vector<float>(N));
      s_.layernorm_forward(out.s.get(), mean.s.get(), rstd.s.get(), inp.s.get(), w.s.get(), b.s.get(), N, C);
      r_.layernorm_forward(out.r.get(), mean.r.get(), rstd.r.get(), inp.r.get(), w.r.get(), b.r.get(), N, C);
      expect_storage(out, "layernorm_forward");
      expect_acc(mean, "layernorm_forward mean");
      expect_acc(rstd, "layernorm_forward rstd");
      auto dinp = pair(values(NC, next())), dout = pair(values(NC, next()));
      auto dw = acc_pair(values(C, next())), db = acc_pair(values(C, next()));
      s_.layernorm_backward(dinp.s.get(), dw.s.get(), db.s.get(), dout.s.get(), inp.s.get(), w.s.get(), mean.s.get(),
                            rstd.s.get(), N, C);
      r_.layernorm_backward(dinp.r.get(), dw.r.get(), db.r.get(), dout.r.get(), inp.r.get(), w.r.get(), mean.r.get(),
                            rstd.r.get(), N, C);
      expect_storage(dinp, "layernorm_backward dinp");
      expect_acc(dw, "layernorm_backward dw");
      expect_acc(db, "layernorm_backward db");
    }
    if (::testing::Test::HasFailure()) return;
    // The linear layer with and without a bias, with and without dinp (null).
    for (auto [bias, with_dinp] : {std::pair{true, true}, {true, false}, {false, true}, {false, false}}) {
      const std::string tag = std::string(bias ? "" : " without bias") + (with_dinp ? "" : " without dinp");
      const size_t NI = N * IC;
      auto inp = pair(values(NI, next())), w = pair(values(size_t(OC) * IC, next())), b = pair(values(OC, next()));
      auto out = pair(std::vector<float>(N * OC));
      s_.matmul_forward(out.s.get(), inp.s.get(), w.s.get(), bias ? b.s.get() : nullptr, N, IC, OC);
      r_.matmul_forward(out.r.get(), inp.r.get(), w.r.get(), bias ? b.r.get() : nullptr, N, IC, OC);
      expect_storage(out, "matmul_forward" + tag);
      auto dinp = pair(values(NI, next())), dout = pair(values(N * OC, next()));
      auto dw = acc_pair(values(size_t(OC) * IC, next())), db = acc_pair(values(OC, next()));
      s_.matmul_backward(with_dinp ? dinp.s.get() : nullptr, dw.s.get(), bias ? db.s.get() : nullptr, dout.s.get(),
                         inp.s.get(), w.s.get(), N, IC, OC);
      r_.matmul_backward(with_dinp ? dinp.r.get() : nullptr, dw.r.get(), bias ? db.r.get() : nullptr, dout.r.get(),
                         inp.r.get(), w.r.get(), N, IC, OC);
      expect_acc(dw, "matmul_backward dw" + tag);
      if (with_dinp) expect_storage(dinp, "matmul_backward dinp" + tag);
      if (bias) expect_acc(db, "matmul_backward dbias" + tag);
    }
    if (::testing::Test::HasFailure()) return;
    {  // RMSNorm
      auto inp = pair(values(NC, next(), 3.0f)), w = pair(values(C, next()));
      auto out = pair(std::vector<float>(NC));
      auto rstd = acc_pair(std::vector<float>(N));
      s_.rmsnorm_forward(out.s.get(), rstd.s.get(), inp.s.get(), w.s.get(), N, C, 1e-6);
      r_.rmsnorm_forward(out.r.get(), rstd.r.get(), inp.r.get(), w.r.get(), N, C, 1e-6);
      expect_storage(out, "rmsnorm_forward");
      expect_acc(rstd, "rmsnorm_forward rstd");
      auto dinp = pair(values(NC, next())), dout = pair(values(NC, next()));
      auto dw = acc_pair(values(C, next()));
      s_.rmsnorm_backward(dinp.s.get(), dw.s.get(), dout.s.get(), inp.s.get(), w.s.get(), rstd.s.get(), N, C);
      r_.rmsnorm_backward(dinp.r.get(), dw.r.get(), dout.r.get(), inp.r.get(), w.r.get(), rstd.r.get(), N, C);
      expect_storage(dinp, "rmsnorm_backward dinp");
      expect_acc(dw, "rmsnorm_backward dw");
    }
    if (::testing::Test::HasFailure()) return;
    {  // grouped-query attention: NH = 2 query heads of D = C/2 over one key/value head
      const int D = C / 2, W = C + 2 * D;
      auto g = pair(values(N * W, next())), dqkv = pair(values(NC * 3, next()));
      auto qkv = pair(std::vector<float>(NC * 3)), dg = pair(values(N * W, next()));
      s_.gqa_expand(qkv.s.get(), g.s.get(), N, 2, 1, D);
      r_.gqa_expand(qkv.r.get(), g.r.get(), N, 2, 1, D);
      expect_storage(qkv, "gqa_expand");
      s_.gqa_reduce(dg.s.get(), dqkv.s.get(), N, 2, 1, D);
      r_.gqa_reduce(dg.r.get(), dqkv.r.get(), N, 2, 1, D);
      expect_storage(dg, "gqa_reduce");
    }
    if (::testing::Test::HasFailure()) return;
    {  // QK-norm: 2 heads of C/2 channels, with the learned logit scale
      const int D = C / 2;
      auto inp = pair(values(NC * 3, next(), 3.0f)), wq = pair(values(D, next())), wk = pair(values(D, next()));
      auto sq = pair(values(2, next()));
      auto out = pair(std::vector<float>(NC * 3));
      auto rstd = acc_pair(std::vector<float>(N * 4));
      s_.qknorm_forward(out.s.get(), rstd.s.get(), inp.s.get(), wq.s.get(), wk.s.get(), sq.s.get(), N, 2, D, 1e-6);
      r_.qknorm_forward(out.r.get(), rstd.r.get(), inp.r.get(), wq.r.get(), wk.r.get(), sq.r.get(), N, 2, D, 1e-6);
      expect_storage(out, "qknorm_forward");
      expect_acc(rstd, "qknorm_forward rstd");
      auto dinp = pair(values(NC * 3, next())), dout = pair(values(NC * 3, next()));
      auto dwq = acc_pair(values(D, next())), dwk = acc_pair(values(D, next())), dsq = acc_pair(values(2, next()));
      s_.qknorm_backward(dinp.s.get(), dwq.s.get(), dwk.s.get(), dsq.s.get(), dout.s.get(), inp.s.get(), wq.s.get(),
                         wk.s.get(), sq.s.get(), rstd.s.get(), N, 2, D);
      r_.qknorm_backward(dinp.r.get(), dwq.r.get(), dwk.r.get(), dsq.r.get(), dout.r.get(), inp.r.get(), wq.r.get(),
                         wk.r.get(), sq.r.get(), rstd.r.get(), N, 2, D);
      expect_storage(dinp, "qknorm_backward dinp");
      expect_acc(dwq, "qknorm_backward dwq");
      expect_acc(dwk, "qknorm_backward dwk");
      expect_acc(dsq, "qknorm_backward dsq");
    }
    if (::testing::Test::HasFailure()) return;
    {  // SwiGLU: rows of 2F = C inputs, F outputs
      const int F = C / 2;
      auto inp = pair(values(NC, next(), 3.0f)), dout = pair(values(N * F, next()));
      auto out = pair(std::vector<float>(N * F)), dinp = pair(values(NC, next()));
      s_.swiglu_forward(out.s.get(), inp.s.get(), N, F);
      r_.swiglu_forward(out.r.get(), inp.r.get(), N, F);
      expect_storage(out, "swiglu_forward");
      s_.swiglu_backward(dinp.s.get(), inp.s.get(), dout.s.get(), N, F);
      r_.swiglu_backward(dinp.r.get(), inp.r.get(), dout.r.get(), N, F);
      expect_storage(dinp, "swiglu_backward");
    }
    if (::testing::Test::HasFailure()) return;
    {  // element-wise
      auto inp = pair(values(NC, next(), 3.0f)), other = pair(values(NC, next()));
      auto out = pair(std::vector<float>(NC));
      s_.relu2_forward(out.s.get(), inp.s.get(), NC);
      r_.relu2_forward(out.r.get(), inp.r.get(), NC);
      expect_storage(out, "relu2_forward");
      auto dinp = pair(values(NC, next()));
      s_.relu2_backward(dinp.s.get(), inp.s.get(), other.s.get(), NC);
      r_.relu2_backward(dinp.r.get(), inp.r.get(), other.r.get(), NC);
      expect_storage(dinp, "relu2_backward");
      s_.gelu_erf_forward(out.s.get(), inp.s.get(), NC);
      r_.gelu_erf_forward(out.r.get(), inp.r.get(), NC);
      expect_storage(out, "gelu_erf_forward");
      auto dgelu = pair(values(NC, next()));
      s_.gelu_erf_backward(dgelu.s.get(), inp.s.get(), other.s.get(), NC);
      r_.gelu_erf_backward(dgelu.r.get(), inp.r.get(), other.r.get(), NC);
      expect_storage(dgelu, "gelu_erf_backward");
    }
    if (::testing::Test::HasFailure()) return;
    {  // element-wise
      auto inp = pair(values(NC, next(), 3.0f)), other = pair(values(NC, next()));
      auto out = pair(std::vector<float>(NC));
      s_.gelu_forward(out.s.get(), inp.s.get(), NC);
      r_.gelu_forward(out.r.get(), inp.r.get(), NC);
      expect_storage(out, "gelu_forward");
      auto dinp = pair(values(NC, next()));
      s_.gelu_backward(dinp.s.get(), inp.s.get(), other.s.get(), NC);
      r_.gelu_backward(dinp.r.get(), inp.r.get(), other.r.get(), NC);
      expect_storage(dinp, "gelu_backward");
      s_.residual_forward(out.s.get(), inp.s.get(), other.s.get(), NC);
      r_.residual_forward(out.r.get(), inp.r.get(), other.r.get(), NC);
      expect_storage(out, "residual_forward");
      auto dst = pair(values(NC, next()));
      s_.add_inplace(dst.s.get(), other.s.get(), NC);
      r_.add_inplace(dst.r.get(), other.r.get(), NC);
      expect_storage(dst, "add_inplace");
    }
    if (::testing::Test::HasFailure()) return;
    {  // the output gate y·σ(g)
      auto y = pair(values(NC, next())), g = pair(values(NC, next(), 6.0f)), out = pair(std::vector<float>(NC));
      s_.sigmoid_gate_forward(out.s.get(), y.s.get(), g.s.get(), NC);
      r_.sigmoid_gate_forward(out.r.get(), y.r.get(), g.r.get(), NC);
      expect_storage(out, "sigmoid_gate_forward");
      auto dout = pair(values(NC, next())), dy = pair(values(NC, next())), dg = pair(values(NC, next()));
      s_.sigmoid_gate_backward(dy.s.get(), dg.s.get(), dout.s.get(), y.s.get(), g.s.get(), NC);
      r_.sigmoid_gate_backward(dy.r.get(), dg.r.get(), dout.r.get(), y.r.get(), g.r.get(), NC);
      expect_storage(dy, "sigmoid_gate_backward dy");
      expect_storage(dg, "sigmoid_gate_backward dg");
    }
    if (::testing::Test::HasFailure()) return;
    {  // the forget gate's prefix sums of ln σ(g), g (B,T,NH) in storage, c float32
      const size_t nf = N * NH;
      auto g = pair(values(nf, next(), 3.0f)), dg = pair(values(nf, next()));
      auto c = acc_pair(std::vector<float>(nf)), dc = acc_pair(values(nf, next()));
      s_.forget_forward(c.s.get(), g.s.get(), B, T, NH);
      r_.forget_forward(c.r.get(), g.r.get(), B, T, NH);
      expect_acc(c, "forget_forward");
      s_.forget_backward(dg.s.get(), dc.s.get(), g.s.get(), B, T, NH);
      r_.forget_backward(dg.r.get(), dc.r.get(), g.r.get(), B, T, NH);
      expect_storage(dg, "forget_backward");
    }
    if (::testing::Test::HasFailure()) return;
    {  // RoPE on (N, 3C)
      auto inp = pair(values(3 * NC, next())), out = pair(std::vector<float>(3 * NC));
      s_.rope_forward(out.s.get(), inp.s.get(), B, T, C, NH, RopeSpec{10000.0}, 2);
      r_.rope_forward(out.r.get(), inp.r.get(), B, T, C, NH, RopeSpec{10000.0}, 2);
      expect_storage(out, "rope_forward");
      auto dinp = pair(values(3 * NC, next()));
      s_.rope_backward(dinp.s.get(), inp.s.get(), B, T, C, NH, RopeSpec{10000.0}, 2);
      r_.rope_backward(dinp.r.get(), inp.r.get(), B, T, C, NH, RopeSpec{10000.0}, 2);
      expect_storage(dinp, "rope_backward");
    }
    if (::testing::Test::HasFailure()) return;
    {  // attention
      auto qkv = pair(values(3 * NC, next())), out = pair(std::vector<float>(NC));
      auto scale = pair({0.375f, 0.25f});                // NH positive head scales (read when the spec learns them)
      auto sink = pair({0.5f, -0.75f});                  // NH sink logits (read under normalisation sink)
      auto kerple = pair({-0.5f, 0.25f, 0.75f, -1.0f});  // KERPLE's raw (ρ₁, ρ₂) of the NH heads
      std::vector<float> fc(N * NH);                     // the forget gate's c (B,NH,T): decreasing along t
      for (size_t k = 0; k < fc.size(); ++k) fc[k] = -0.3f * static_cast<float>(k % T) - 0.01f * static_cast<float>(k);
      auto fcum = acc_pair(fc);
      const size_t nstats = N * NH * spec.stats_per_row();
      auto stats = acc_pair(std::vector<float>(nstats));
      std::vector<double> diag_s(static_cast<size_t>(NH) * kAttentionDiagStats),
          diag_r(static_cast<size_t>(NH) * kAttentionDiagStats);
      s_.attention_forward(out.s.get(), stats.s.get(), qkv.s.get(), B, T, C, NH, spec,
                           {scale.s.get(), sink.s.get(), kerple.s.get(), fcum.s.get()}, diag_s.data());
      r_.attention_forward(out.r.get(), stats.r.get(), qkv.r.get(), B, T, C, NH, spec,
                           {scale.r.get(), sink.r.get(), kerple.r.get(), fcum.r.get()}, diag_r.data());
      expect_storage(out, "attention_forward " + label);
      expect_acc(stats, "attention_forward stats " + label);
      for (size_t i = 0; i < diag_s.size(); ++i)
        EXPECT_NEAR(diag_s[i], diag_r[i], tol_.acc * (std::abs(diag_r[i]) + 1)) << "attention diagnostics " << i;
      // The backward pass reads the subject's own (bf16) output on both sides.
      std::vector<bf16> o16(NC);
      s_.download(o16.data(), out.s.get(), NC);
      std::vector<float> o(NC);
      for (size_t i = 0; i < NC; ++i) o[i] = bf16_bits_to_float(o16[i].bits);
      auto outp = pair(o), dout = pair(values(NC, next())), dqkv = pair(values(3 * NC, next()));
      auto dscale = acc_pair(values(NH, next())), dsink = acc_pair(values(NH, next())),
           dkerple = acc_pair(values(2 * NH, next())), dfcum = acc_pair(values(N * NH, next()));
      s_.attention_backward(dqkv.s.get(), {dscale.s.get(), dsink.s.get(), dkerple.s.get(), dfcum.s.get()}, dout.s.get(),
                            outp.s.get(), stats.s.get(), qkv.s.get(), B, T, C, NH, spec,
                            {scale.s.get(), sink.s.get(), kerple.s.get(), fcum.s.get()});
      r_.attention_backward(dqkv.r.get(), {dscale.r.get(), dsink.r.get(), dkerple.r.get(), dfcum.r.get()}, dout.r.get(),
                            outp.r.get(), stats.r.get(), qkv.r.get(), B, T, C, NH, spec,
                            {scale.r.get(), sink.r.get(), kerple.r.get(), fcum.r.get()});
      expect_storage(dqkv, "attention_backward dqkv " + label);
      if (spec.scale == Scale::Ssmax) expect_acc(dscale, "attention_backward dhead_scale " + label);
      if (spec.learned_sink()) expect_acc(dsink, "attention_backward dsink " + label);
      if (spec.kerple()) expect_acc(dkerple, "attention_backward dkerple " + label);
      if (spec.forget()) expect_acc(dfcum, "attention_backward dc " + label);
    }
    if (::testing::Test::HasFailure()) return;
    {  // classifier; the backward pass in place, as the model calls it
      auto logits = pair(values(N * Vp, next(), 4.0f));
      auto losses = acc_pair(std::vector<float>(N)), dloss = acc_pair(values(N, next()));
      auto ts = tokens_s(ids), tr = tokens_r(ids);
      s_.crossentropy_forward(losses.s.get(), logits.s.get(), ts.get(), N, V, Vp);
      r_.crossentropy_forward(losses.r.get(), logits.r.get(), tr.get(), N, V, Vp);
      expect_acc(losses, "crossentropy_forward");
      s_.crossentropy_backward(logits.s.get(), logits.s.get(), ts.get(), dloss.s.get(), N, V, Vp);
      r_.crossentropy_backward(logits.r.get(), logits.r.get(), tr.get(), dloss.r.get(), N, V, Vp);
      expect_storage(logits, "crossentropy_backward (in place)");
    }
    if (::testing::Test::HasFailure()) return;
    {  // the float32 side: norms, clipping, AdamW
      const size_t n = 300;
      auto x = acc_pair(values(n, next())), g = acc_pair(values(n, next()));
      auto m = acc_pair(values(n, next(), 0.1f)), v = acc_pair(values(n, next(), 0.01f));
      for (auto* p : {&m, &v}) {  // v must be >= 0
        std::vector<float> h(n);
        s_.download(h.data(), p->s.get(), n);
        for (float& e : h) e = std::abs(e);
        s_.upload(p->s.get(), h.data(), n);
        r_.upload(p->r.get(), h.data(), n);
      }
      EXPECT_NEAR(s_.sum_squares(x.s.get(), n), r_.sum_squares(x.r.get(), n),
                  tol_.acc * r_.sum_squares(x.r.get(), n) + 1e-300);
      s_.scale_inplace(g.s.get(), 0.5f, n);
      r_.scale_inplace(g.r.get(), 0.5f, n);
      expect_acc(g, "scale_inplace");
      s_.adamw_update(x.s.get(), g.s.get(), m.s.get(), v.s.get(), n, 1e-2, 0.9, 0.95, 1e-8, 0.1, 3);
      r_.adamw_update(x.r.get(), g.r.get(), m.r.get(), v.r.get(), n, 1e-2, 0.9, 0.95, 1e-8, 0.1, 3);
      expect_acc(x, "adamw_update param");
      expect_acc(m, "adamw_update m");
      expect_acc(v, "adamw_update v");
      s_.muon_momentum(g.s.get(), m.s.get(), n, 0.95);
      r_.muon_momentum(g.r.get(), m.r.get(), n, 0.95);
      expect_acc(g, "muon_momentum update");
      expect_acc(m, "muon_momentum m");
      s_.muon_apply(x.s.get(), g.s.get(), n, 0.02, 1.5, 0.1);
      r_.muon_apply(x.r.get(), g.r.get(), n, 0.02, 1.5, 0.1);
      expect_acc(x, "muon_apply");
    }
  }

 private:
  static TokenBuffer tokens(Device& d, const std::vector<int32_t>& ids) {
    TokenBuffer b(d, ids.size());
    d.upload_tokens(b.get(), ids.data(), ids.size());
    return b;
  }
  Backend<bf16>& s_;
  Backend<float>& r_;
  Tolerance tol_;
  int checked_ = 0;
};

}  // namespace gpt::testing_bf16
