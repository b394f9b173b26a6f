// PoPE (Gopalakrishnan et al. 2025, arXiv 2509.10534; attn::pope): the
// kernel heads of cpu::pope_forward scored by the attention kernels' dot
// product against the paper's score written out here in double (§3 Eq. 6,
// with Eqs. 3–4 and θ_c = θ^(−(c−1)/d), c = 1..d), the clamp of δ to
// [−2π, 0], the value and output layout, and the gradients of q, k, v and δ
// by finite differences; a whole attention layer against a T×T reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "config/attention.h"
#include "kernels/cpu/cpu_kernels.h"
#include "util/gradcheck.h"

namespace gpt::cpu {
namespace {

using gpt::test::numeric_gradient;
using gpt::test::random_vector;
using gpt::test::weighted_sum;

constexpr double kPi = 3.14159265358979323846;

double softplus_ref(double x) { return std::log1p(std::exp(x)); }

// The paper's score of query t and key s of head h, before the softmax:
// Σ_c softplus(q_c) softplus(k_c) cos((s − t)θ_c + δ_c) / sqrt(d), with δ
// clamped to [−2π, 0] (its §3) and 1/sqrt(d) the reference code's scale.
// ids, when given: the tokens' position ids (rows bt0 + t), whose
// difference replaces s − t in the phase.
double paper_score(const std::vector<double>& qkv, const std::vector<double>& delta, int C, int D, int h, int bt0,
                   int t, int s, double base, const int32_t* ids = nullptr) {
  const double dist = ids ? static_cast<double>(ids[bt0 + s]) - ids[bt0 + t] : static_cast<double>(s - t);
  double sum = 0;
  for (int c = 1; c <= D; ++c) {
    const double theta = std::pow(base, -(c - 1.0) / D);
    const double dl = std::min(0.0, std::max(-2 * kPi, delta[h * D + c - 1]));
    const double mq = softplus_ref(qkv[(bt0 + t) * 3 * C + h * D + c - 1]);
    const double mk = softplus_ref(qkv[(bt0 + s) * 3 * C + C + h * D + c - 1]);
    sum += mq * mk * std::cos(dist * theta + dl);
  }
  return sum / std::sqrt(static_cast<double>(D));
}

// The largest difference between the attention kernels' dot score on the
// kernel heads of qkv2 (dot / sqrt(2D)) and the paper's score, over every
// causal pair of every sequence and head.
double worst_score_error(const std::vector<double>& qkv2, const std::vector<double>& qkv,
                         const std::vector<double>& delta, int B, int Tn, int C, int NH, double base,
                         const int32_t* ids = nullptr) {
  const int D = C / NH;
  double worst = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < Tn; ++t)
        for (int s = 0; s <= t; ++s) {
          const double* q = &qkv2[size_t(b * Tn + t) * 6 * C + h * 2 * D];
          const double* k = &qkv2[size_t(b * Tn + s) * 6 * C + 2 * C + h * 2 * D];
          double dot = 0;
          for (int j = 0; j < 2 * D; ++j) dot += q[j] * k[j];
          const double ref = paper_score(qkv, delta, C, D, h, b * Tn, t, s, base, ids);
          worst = std::max(worst, std::abs(dot / std::sqrt(2.0 * D) - ref));
        }
  return worst;
}

TEST(Pope, KernelHeadsScoreAsThePapersFormula) {
  const int B = 2, Tn = 11, NH = 2, D = 6, C = NH * D, N = B * Tn;
  const double base = 10000;
  const std::vector<double> qkv = random_vector(size_t(N) * 3 * C, 3, -2.0, 2.0);
  // δ inside [−2π, 0] and outside it on both sides (the clamp).
  std::vector<double> delta = random_vector(C, 4, -7.5, 1.0);
  std::vector<double> qkv2(size_t(N) * 6 * C, 0.0), y(size_t(N) * C, 0.0);
  pope_forward(qkv2.data(), qkv.data(), delta.data(), B, Tn, C, NH, base);
  const double worst = worst_score_error(qkv2, qkv, delta, B, Tn, C, NH, base);
  std::printf("[pope] max |kernel-head score - paper's Eq. 6| = %.3e\n", worst);
  EXPECT_LT(worst, 1e-12);
  // Values: [v | 0] per head; the output keeps the first D channels.
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < NH; ++h)
      for (int c = 0; c < D; ++c) {
        EXPECT_EQ(qkv2[size_t(n) * 6 * C + 4 * C + h * 2 * D + c], qkv[size_t(n) * 3 * C + 2 * C + h * D + c]);
        EXPECT_EQ(qkv2[size_t(n) * 6 * C + 4 * C + h * 2 * D + D + c], 0.0);
      }
  const std::vector<double> y2 = random_vector(size_t(N) * 2 * C, 5);  // outputs of heads of 2D
  pope_output_forward(y.data(), y2.data(), N, C, NH);
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < NH; ++h)
      for (int c = 0; c < D; ++c) EXPECT_EQ(y[size_t(n) * C + h * D + c], y2[size_t(n) * 2 * C + h * 2 * D + c]);
}

// A causal softmax layer on the kernel heads equals softmax over the paper's
// scores, the values averaged with those weights (T×T loops in double).
TEST(Pope, AttentionLayerMatchesReference) {
  const int B = 1, Tn = 70, NH = 2, D = 8, C = NH * D, N = B * Tn;
  const std::vector<double> qkv = random_vector(size_t(N) * 3 * C, 5, -1.5, 1.5);
  const std::vector<double> delta = random_vector(C, 6, -6.0, -0.1);
  std::vector<double> qkv2(size_t(N) * 6 * C), y2(size_t(N) * 2 * C), y(size_t(N) * C);
  pope_forward(qkv2.data(), qkv.data(), delta.data(), B, Tn, C, NH, 10000.0);
  AttentionConfig a;
  a.preset = "softmax";
  ModelConfig m;
  m.context = Tn;
  const AttentionSpec spec = resolve_attention(a, m);
  attention_forward(y2.data(), static_cast<double*>(nullptr), qkv2.data(), B, Tn, 2 * C, NH, spec, HeadParams<double>{},
                    nullptr);
  pope_output_forward(y.data(), y2.data(), N, C, NH);
  double worst = 0;
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < Tn; ++t) {
      std::vector<double> w(t + 1);
      double mx = -1e300, z = 0;
      for (int s = 0; s <= t; ++s) mx = std::max(mx, w[s] = paper_score(qkv, delta, C, D, h, 0, t, s, 10000.0));
      for (int s = 0; s <= t; ++s) z += (w[s] = std::exp(w[s] - mx));
      for (int c = 0; c < D; ++c) {
        double acc = 0;
        for (int s = 0; s <= t; ++s) acc += w[s] / z * qkv[size_t(s) * 3 * C + 2 * C + h * D + c];
        worst = std::max(worst, std::abs(acc - y[size_t(t) * C + h * D + c]));
      }
    }
  std::printf("[pope] softmax layer: max |kernel - reference| = %.3e\n", worst);
  EXPECT_LT(worst, 1e-12);
}

TEST(Pope, BackwardMatchesFiniteDifferences) {
  const int B = 2, Tn = 9, NH = 2, D = 4, C = NH * D, N = B * Tn;
  const double base = 100;  // faster turning channels than 10000 at these lengths
  std::vector<double> qkv = random_vector(size_t(N) * 3 * C, 7, -2.0, 2.0);
  std::vector<double> delta = random_vector(C, 8, -6.0, -0.2);  // inside (−2π, 0), away from the ends
  const std::vector<double> w = random_vector(size_t(N) * 6 * C, 9);
  auto loss = [&] {
    std::vector<double> out(size_t(N) * 6 * C);
    pope_forward(out.data(), qkv.data(), delta.data(), B, Tn, C, NH, base);
    return weighted_sum(out, w);
  };
  std::vector<double> dqkv(qkv.size(), 0.0), ddelta(C, 0.0);
  pope_backward(dqkv.data(), ddelta.data(), w.data(), qkv.data(), delta.data(), B, Tn, C, NH, base);
  test::expect_gradient("pope", "dqkv", dqkv, numeric_gradient(qkv, loss));
  test::expect_gradient("pope", "ddelta", ddelta, numeric_gradient(delta, loss));
  // The backward adds (+=) to what dqkv and ddelta hold.
  std::vector<double> twice = dqkv, twice_d = ddelta;
  pope_backward(twice.data(), twice_d.data(), w.data(), qkv.data(), delta.data(), B, Tn, C, NH, base);
  for (size_t i = 0; i < dqkv.size(); ++i) EXPECT_NEAR(twice[i], 2 * dqkv[i], 1e-12);
  // δ clamped at either end gets no gradient; the others are unchanged.
  delta[0] = 0.5, delta[1] = -7.0;
  std::vector<double> dclamped(C, 0.0), dq2(qkv.size(), 0.0);
  pope_backward(dq2.data(), dclamped.data(), w.data(), qkv.data(), delta.data(), B, Tn, C, NH, base);
  EXPECT_EQ(dclamped[0], 0.0);
  EXPECT_EQ(dclamped[1], 0.0);
  EXPECT_EQ(dclamped[2], ddelta[2]);
  test::expect_gradient("pope", "ddelta clamped", dclamped, numeric_gradient(delta, loss));

  // The output slice: dy2 holds dy in each head's first D channels, 0 after.
  const std::vector<double> dy = random_vector(size_t(N) * C, 10);
  std::vector<double> dy2(size_t(N) * 2 * C, 5.0);
  pope_output_backward(dy2.data(), dy.data(), N, C, NH);
  std::vector<double> y2 = random_vector(size_t(N) * 2 * C, 11);
  auto out_loss = [&] {
    std::vector<double> y(size_t(N) * C);
    pope_output_forward(y.data(), y2.data(), N, C, NH);
    return weighted_sum(y, dy);
  };
  test::expect_gradient("pope", "output dy2", dy2, numeric_gradient(y2, out_loss));
}

// Position ids (training-time PoSE, randomised positions): the phases are
// taken at each token's id, so the kernel heads score as Eq. 6 with the ids'
// difference; ids 0..T-1 give the plain transform bit for bit; the backward
// with ids against finite differences.
TEST(Pope, PositionIdsSetThePhases) {
  const int B = 2, Tn = 6, NH = 2, D = 4, C = NH * D, N = B * Tn;
  const double base = 100;
  const std::vector<int32_t> ids = {0, 1, 7, 8, 30, 31, 2, 50, 51, 52, 99, 120};
  std::vector<double> qkv = random_vector(size_t(N) * 3 * C, 31, -2.0, 2.0);
  std::vector<double> delta = random_vector(C, 32, -6.0, -0.2);
  std::vector<double> qkv2(size_t(N) * 6 * C);
  pope_forward(qkv2.data(), qkv.data(), delta.data(), B, Tn, C, NH, base, ids.data());
  const double worst = worst_score_error(qkv2, qkv, delta, B, Tn, C, NH, base, ids.data());
  std::printf("[pope] with position ids: max |kernel-head score - Eq. 6 at the ids| = %.3e\n", worst);
  EXPECT_LT(worst, 1e-12);
  std::vector<int32_t> plain(N);
  for (int n = 0; n < N; ++n) plain[n] = n % Tn;
  std::vector<double> a(qkv2.size()), b(qkv2.size());
  pope_forward(a.data(), qkv.data(), delta.data(), B, Tn, C, NH, base);
  pope_forward(b.data(), qkv.data(), delta.data(), B, Tn, C, NH, base, plain.data());
  EXPECT_EQ(a, b);
  const std::vector<double> w = random_vector(size_t(N) * 6 * C, 33);
  auto loss = [&] {
    std::vector<double> out(size_t(N) * 6 * C);
    pope_forward(out.data(), qkv.data(), delta.data(), B, Tn, C, NH, base, ids.data());
    return weighted_sum(out, w);
  };
  std::vector<double> dqkv(qkv.size(), 0.0), ddelta(C, 0.0);
  pope_backward(dqkv.data(), ddelta.data(), w.data(), qkv.data(), delta.data(), B, Tn, C, NH, base, ids.data());
  test::expect_gradient("pope ids", "dqkv", dqkv, numeric_gradient(qkv, loss));
  test::expect_gradient("pope ids", "ddelta", ddelta, numeric_gradient(delta, loss));
}

// float and double kernels agree to float rounding.
TEST(Pope, FloatKernelsMatchDouble) {
  const int B = 2, Tn = 13, NH = 3, D = 8, C = NH * D, N = B * Tn;
  const std::vector<double> qkv = random_vector(size_t(N) * 3 * C, 12, -2.0, 2.0);
  const std::vector<double> delta = random_vector(C, 13, -6.0, 0.0), g = random_vector(size_t(N) * 6 * C, 14);
  std::vector<double> out(size_t(N) * 6 * C), dq(qkv.size(), 0.0), dd(C, 0.0);
  std::vector<float> outf(out.size()), dqf(qkv.size(), 0.0f), ddf(C, 0.0f);
  const auto qf = test::cast<float>(qkv), df = test::cast<float>(delta), gf = test::cast<float>(g);
  pope_forward(out.data(), qkv.data(), delta.data(), B, Tn, C, NH, 10000.0);
  pope_forward(outf.data(), qf.data(), df.data(), B, Tn, C, NH, 10000.0);
  pope_backward(dq.data(), dd.data(), g.data(), qkv.data(), delta.data(), B, Tn, C, NH, 10000.0);
  pope_backward(dqf.data(), ddf.data(), gf.data(), qf.data(), df.data(), B, Tn, C, NH, 10000.0);
  EXPECT_LT(test::max_abs_diff(outf, out), 1e-5);
  EXPECT_LT(test::max_abs_diff(dqf, dq), 1e-5);
  EXPECT_LT(test::max_abs_diff(ddf, dd), 1e-4);
}

}  // namespace
}  // namespace gpt::cpu
