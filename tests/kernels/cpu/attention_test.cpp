// Causal softmax attention (the default variant; the other variants are
// tested in attention_variants_test.cpp): gradients by finite differences, the streamed
// forward against an explicit T×T reference, the causal mask, stability at
// huge scores, and independence from the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "util/gradcheck.h"

namespace gpt::cpu {
namespace {

using gpt::test::cast;
using gpt::test::max_abs_diff;
using gpt::test::max_rel_error;
using gpt::test::numeric_gradient;
using gpt::test::random_vector;
using gpt::test::weighted_sum;

struct Shape {
  int B, T, C, NH;
  size_t qkv_size() const { return static_cast<size_t>(B) * T * 3 * C; }
  size_t out_size() const { return static_cast<size_t>(B) * T * C; }
  size_t stats_size() const { return static_cast<size_t>(B) * NH * T * AttentionSpec::kStatsPerRow; }
};

const AttentionSpec kSoftmax{};

template <typename T>
std::vector<T> forward(const std::vector<T>& qkv, const Shape& s, std::vector<T>* stats = nullptr) {
  std::vector<T> out(s.out_size());
  if (stats) stats->assign(s.stats_size(), T(0));
  attention_forward(out.data(), stats ? stats->data() : nullptr, qkv.data(), s.B, s.T, s.C, s.NH, kSoftmax,
                    static_cast<const T*>(nullptr), nullptr);
  return out;
}

// The softmax rows' log-sum-exp from the saved statistics (shift, Z, ...).
template <typename T>
std::vector<double> lse_of(const std::vector<T>& stats) {
  std::vector<double> lse;
  for (size_t r = 0; r < stats.size(); r += AttentionSpec::kStatsPerRow)
    lse.push_back(static_cast<double>(stats[r]) + std::log(static_cast<double>(stats[r + 1])));
  return lse;
}

// dqkv (zero-initialised) for the loss Σ out·w.
template <typename T>
std::vector<T> backward(const std::vector<T>& qkv, const std::vector<T>& w, const Shape& s) {
  std::vector<T> stats;
  std::vector<T> out = forward(qkv, s, &stats);
  std::vector<T> dqkv(s.qkv_size(), T(0));
  attention_backward(dqkv.data(), static_cast<T*>(nullptr), w.data(), out.data(), stats.data(), qkv.data(), s.B, s.T,
                     s.C, s.NH, kSoftmax, static_cast<const T*>(nullptr));
  return dqkv;
}

// The textbook formula with the whole masked T×T matrix, in double:
// out = softmax(QKᵀ/sqrt(D) + mask) V per (b,h). Also returns each row's lse.
std::vector<double> reference(const std::vector<double>& qkv, const Shape& s, std::vector<double>* lse) {
  const int D = s.C / s.NH;
  const size_t C3 = 3 * static_cast<size_t>(s.C);
  std::vector<double> out(s.out_size(), 0.0);
  lse->assign(static_cast<size_t>(s.B) * s.NH * s.T, 0.0);
  std::vector<double> P(static_cast<size_t>(s.T) * s.T);
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      auto at = [&](int t, int part, int d) {
        return qkv[(static_cast<size_t>(b) * s.T + t) * C3 + part * s.C + h * D + d];
      };
      for (int i = 0; i < s.T; ++i) {
        double m = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < s.T; ++j) {
          double sc = -std::numeric_limits<double>::infinity();
          if (j <= i) {
            sc = 0.0;
            for (int d = 0; d < D; ++d) sc += at(i, 0, d) * at(j, 1, d);
            sc /= std::sqrt(static_cast<double>(D));
          }
          P[i * s.T + j] = sc;
          m = std::max(m, sc);
        }
        double z = 0.0;
        for (int j = 0; j < s.T; ++j) z += (P[i * s.T + j] = std::exp(P[i * s.T + j] - m));
        for (int j = 0; j < s.T; ++j) P[i * s.T + j] /= z;
        (*lse)[(static_cast<size_t>(b) * s.NH + h) * s.T + i] = m + std::log(z);
      }
      for (int i = 0; i < s.T; ++i)
        for (int d = 0; d < D; ++d) {
          double acc = 0.0;
          for (int j = 0; j < s.T; ++j) acc += P[i * s.T + j] * at(j, 2, d);
          out[(static_cast<size_t>(b) * s.T + i) * s.C + h * D + d] = acc;
        }
    }
  }
  return out;
}

TEST(Attention, GradcheckAllOfQkv) {
  const Shape s{2, 7, 12, 3};
  std::vector<double> qkv = random_vector(s.qkv_size(), 1);
  const std::vector<double> w = random_vector(s.out_size(), 2);
  const std::vector<double> analytic = backward(qkv, w, s);
  // eps 1e-4, not the helper's 1e-6: at 1e-6 the loss's rounding (~1e-16·|L|
  // over 2·eps) already gives ~1e-6 relative error on the smallest entries
  // (~1e-5); at 1e-4 rounding and truncation both stay near 1e-8 relative.
  const std::vector<double> numeric = numeric_gradient(
      qkv, [&] { return weighted_sum(forward(qkv, s), w); }, 1e-4);
  const double err = max_rel_error(analytic, numeric);
  std::printf("[gradcheck] attention dqkv max_rel_err=%.3e\n", err);
  EXPECT_LT(err, 1e-6);
}

// T = 35 crosses the kernel's 32-row block boundary, so keys are shared
// between blocks and dk/dv collect terms from both.
TEST(Attention, GradcheckAcrossRowBlocks) {
  const Shape s{1, 35, 6, 2};
  std::vector<double> qkv = random_vector(s.qkv_size(), 15);
  const std::vector<double> w = random_vector(s.out_size(), 16);
  const std::vector<double> analytic = backward(qkv, w, s);
  const std::vector<double> numeric = numeric_gradient(
      qkv, [&] { return weighted_sum(forward(qkv, s), w); }, 1e-4);
  EXPECT_LT(max_rel_error(analytic, numeric), 1e-6);
}

TEST(Attention, BackwardAccumulates) {
  const Shape s{2, 5, 8, 2};
  const std::vector<double> qkv = random_vector(s.qkv_size(), 3);
  const std::vector<double> w = random_vector(s.out_size(), 4);
  const std::vector<double> g = backward(qkv, w, s);
  std::vector<double> stats;
  const std::vector<double> out = forward(qkv, s, &stats);
  const std::vector<double> prior = random_vector(s.qkv_size(), 5);
  std::vector<double> dqkv = prior;
  attention_backward(dqkv.data(), static_cast<double*>(nullptr), w.data(), out.data(), stats.data(), qkv.data(), s.B,
                     s.T, s.C, s.NH, kSoftmax, static_cast<const double*>(nullptr));
  for (size_t i = 0; i < dqkv.size(); ++i) ASSERT_NEAR(dqkv[i], prior[i] + g[i], 1e-12) << "index " << i;
}

TEST(Attention, ForwardMatchesExplicitReference) {
  const Shape s{2, 131, 32, 4};
  const std::vector<double> qkv = random_vector(s.qkv_size(), 6);
  std::vector<double> ref_lse;
  const std::vector<double> ref = reference(qkv, s, &ref_lse);

  std::vector<double> stats;
  EXPECT_LT(max_abs_diff(forward(qkv, s, &stats), ref), 1e-12);
  EXPECT_LT(max_abs_diff(lse_of(stats), ref_lse), 1e-12);

  std::vector<float> stats_f;
  EXPECT_LT(max_abs_diff(forward(cast<float>(qkv), s, &stats_f), ref), 2e-6);
  EXPECT_LT(max_abs_diff(lse_of(stats_f), ref_lse), 2e-5);
}

TEST(Attention, NullStatsGivesSameOutput) {
  const Shape s{2, 33, 16, 2};
  const std::vector<float> qkv = cast<float>(random_vector(s.qkv_size(), 7));
  std::vector<float> stats;
  EXPECT_EQ(forward(qkv, s, &stats), forward(qkv, s));
}

TEST(Attention, FutureDoesNotLeakIntoThePast) {
  const Shape s{2, 9, 12, 3};
  const int t = 5;
  const std::vector<double> qkv = random_vector(s.qkv_size(), 8);
  const std::vector<double> base = forward(qkv, s);
  for (int part = 0; part < 3; ++part) {
    std::vector<double> moved = qkv;
    // (B,T,3C): row (b=0, t), the q, k or v block
    for (int c = 0; c < s.C; ++c) moved[static_cast<size_t>(t) * 3 * s.C + part * s.C + c] += 0.5;
    const std::vector<double> out = forward(moved, s);
    for (int tt = 0; tt < s.T; ++tt)
      for (int c = 0; c < s.C; ++c) {
        const size_t idx = static_cast<size_t>(tt) * s.C + c;
        if (tt < t) {
          EXPECT_EQ(out[idx], base[idx]) << "part " << part << " t " << tt;
        }
      }
    // The perturbed row itself must change, or the test proves nothing.
    EXPECT_NE(out[static_cast<size_t>(t) * s.C], base[static_cast<size_t>(t) * s.C]) << "part " << part;
    for (size_t idx = static_cast<size_t>(s.T) * s.C; idx < out.size(); ++idx) EXPECT_EQ(out[idx], base[idx]);
  }
}

TEST(Attention, NoGradientBeyondTheLastLossPosition) {
  const Shape s{2, 9, 12, 3};
  const int last = 3;
  const std::vector<double> qkv = random_vector(s.qkv_size(), 9);
  std::vector<double> w = random_vector(s.out_size(), 10);
  for (int b = 0; b < s.B; ++b)
    for (int t = last + 1; t < s.T; ++t)
      for (int c = 0; c < s.C; ++c) w[(static_cast<size_t>(b) * s.T + t) * s.C + c] = 0.0;
  const std::vector<double> g = backward(qkv, w, s);
  double before = 0.0;
  for (int b = 0; b < s.B; ++b)
    for (int t = 0; t < s.T; ++t)
      for (int c = 0; c < 3 * s.C; ++c) {
        const double v = g[(static_cast<size_t>(b) * s.T + t) * 3 * s.C + c];
        if (t > last) {
          EXPECT_EQ(v, 0.0) << "b " << b << " t " << t << " c " << c;
        } else {
          before = std::max(before, std::abs(v));
        }
      }
  EXPECT_GT(before, 1e-3);
}

TEST(Attention, HugeScoresStayFiniteAndCorrect) {
  const Shape s{1, 64, 32, 2};
  std::vector<double> qkv = random_vector(s.qkv_size(), 11);
  // Scale q and k by 300 each: |scores| reach ~1e4.
  for (int t = 0; t < s.T; ++t)
    for (int c = 0; c < 2 * s.C; ++c) qkv[static_cast<size_t>(t) * 3 * s.C + c] *= 300.0;
  std::vector<double> ref_lse;
  const std::vector<double> ref = reference(qkv, s, &ref_lse);
  double max_lse = 0.0;
  for (double l : ref_lse) max_lse = std::max(max_lse, std::abs(l));
  EXPECT_GT(max_lse, 5e3);

  std::vector<double> stats;
  EXPECT_LT(max_abs_diff(forward(qkv, s, &stats), ref), 1e-9);
  EXPECT_LT(max_abs_diff(lse_of(stats), ref_lse), 1e-9);

  // Float: scores carry an absolute error of ~1e-3 at this magnitude.
  const std::vector<float> qkv_f = cast<float>(qkv);
  std::vector<float> stats_f;
  const std::vector<float> out_f = forward(qkv_f, s, &stats_f);
  for (float x : out_f) ASSERT_TRUE(std::isfinite(x));
  EXPECT_LT(max_abs_diff(out_f, ref), 1e-2);
  const std::vector<float> g = backward(qkv_f, cast<float>(random_vector(s.out_size(), 12)), s);
  for (float x : g) ASSERT_TRUE(std::isfinite(x));
}

TEST(Attention, ThreadCountDoesNotChangeResults) {
  // Large enough (~1.6e5 score multiply-adds) that the kernel goes parallel.
  const Shape s{2, 70, 32, 4};
  const std::vector<float> qkv = cast<float>(random_vector(s.qkv_size(), 13));
  const std::vector<float> w = cast<float>(random_vector(s.out_size(), 14));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> out1 = forward(qkv, s);
  const std::vector<float> g1 = backward(qkv, w, s);
  omp_set_num_threads(2);
  const std::vector<float> out2 = forward(qkv, s);
  const std::vector<float> g2 = backward(qkv, w, s);
  omp_set_num_threads(saved);
  EXPECT_EQ(out1, out2);
  EXPECT_EQ(g1, g2);
}

TEST(Attention, RejectsHeadsThatDoNotDivideC) {
  std::vector<float> qkv(3 * 10), out(10), stats(3 * AttentionSpec::kStatsPerRow);
  EXPECT_THROW(attention_forward(out.data(), stats.data(), qkv.data(), 1, 1, 10, 3, kSoftmax,
                                 static_cast<const float*>(nullptr), nullptr),
               gpt::Error);
}

}  // namespace
}  // namespace gpt::cpu
