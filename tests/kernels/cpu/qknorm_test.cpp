// QK-norm (docs/blocks.md; Qwen3's q_norm/k_norm: RMSNorm over each head's
// head_dim channels, weight of head_dim shared by the heads, applied before
// RoPE; Llama 4's L2 norm: x·rsqrt(mean(x²) + eps), no weight): the forward
// against that formula per head in double, values untouched, the backward
// against finite differences (with and without gains, with and without the
// learned logit scale per query head), and float against double.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "util/gradcheck.h"

namespace {

using gpt::test::numeric_gradient;
using gpt::test::random_vector;
using gpt::test::weighted_sum;

constexpr int N = 3, NH = 2, D = 5, C = NH * D;

TEST(QkNorm, EachQueryAndKeyHeadIsRmsNormalisedValuesCopied) {
  const auto x = random_vector(N * 3 * C, 1, -2.0, 2.0), wq = random_vector(D, 2), wk = random_vector(D, 3),
             sq = random_vector(NH, 12, 0.5, 2.0);
  for (auto [gains, scale] : {std::pair{true, false}, std::pair{false, false}, std::pair{true, true},
                              std::pair{false, true}}) {
    std::vector<double> y(N * 3 * C), r(N * 2 * NH);
    gpt::cpu::qknorm_forward(y.data(), r.data(), x.data(), gains ? wq.data() : nullptr, gains ? wk.data() : nullptr,
                             scale ? sq.data() : nullptr, N, NH, D, 1e-6);
    for (int n = 0; n < N; ++n) {
      for (int part = 0; part < 2; ++part)
        for (int h = 0; h < NH; ++h) {
          const int o = n * 3 * C + part * C + h * D;
          double ms = 0;
          for (int d = 0; d < D; ++d) ms += x[o + d] * x[o + d] / D;
          const double rms = std::sqrt(ms + 1e-6);
          EXPECT_NEAR(r[(n * 2 + part) * NH + h], 1 / rms, 1e-13);
          for (int d = 0; d < D; ++d) {
            const double w = gains ? (part ? wk[d] : wq[d]) : 1.0;
            const double sh = scale && part == 0 ? sq[h] : 1.0;  // queries only: σ = (s_h q̂)·k̂ f
            EXPECT_NEAR(y[o + d], x[o + d] / rms * w * sh, 1e-13);
          }
        }
      for (int c = 2 * C; c < 3 * C; ++c) EXPECT_EQ(y[n * 3 * C + c], x[n * 3 * C + c]);
    }
  }
}

// OLMo 2's form (model.qk_norm rms_full): q_norm and k_norm over the whole
// projections (C channels, C gains each), which the op is with one group of
// C channels: the formula per token in double.
TEST(QkNorm, WholeProjectionIsOneGroupOfAllChannels) {
  const auto x = random_vector(N * 3 * C, 15, -2.0, 2.0), wq = random_vector(C, 16), wk = random_vector(C, 17);
  std::vector<double> y(N * 3 * C), r(N * 2);
  gpt::cpu::qknorm_forward(y.data(), r.data(), x.data(), wq.data(), wk.data(), static_cast<const double*>(nullptr), N,
                           1, C, 1e-6);
  for (int n = 0; n < N; ++n)
    for (int part = 0; part < 2; ++part) {
      const int o = n * 3 * C + part * C;
      double ms = 0;
      for (int c = 0; c < C; ++c) ms += x[o + c] * x[o + c] / C;
      for (int c = 0; c < C; ++c)
        EXPECT_NEAR(y[o + c], x[o + c] / std::sqrt(ms + 1e-6) * (part ? wk[c] : wq[c]), 1e-13);
    }
}

TEST(QkNorm, GradientMatchesFiniteDifferences) {
  for (auto [gains, scale] : {std::pair{true, false}, std::pair{false, false}, std::pair{true, true},
                              std::pair{false, true}}) {
    auto x = random_vector(N * 3 * C, 4, -2.0, 2.0), wq = random_vector(D, 5), wk = random_vector(D, 6),
         sq = random_vector(NH, 13, 0.5, 2.0);
    const auto w = random_vector(N * 3 * C, 7);
    std::vector<double> y(N * 3 * C), r(N * 2 * NH);
    auto loss = [&] {
      gpt::cpu::qknorm_forward(y.data(), r.data(), x.data(), gains ? wq.data() : nullptr, gains ? wk.data() : nullptr,
                               scale ? sq.data() : nullptr, N, NH, D, 1e-6);
      return weighted_sum(y, w);
    };
    loss();
    std::vector<double> dx(N * 3 * C, 0.0), dwq(D, 0.0), dwk(D, 0.0), dsq(NH, 0.0);
    gpt::cpu::qknorm_backward(dx.data(), gains ? dwq.data() : nullptr, gains ? dwk.data() : nullptr,
                              scale ? dsq.data() : nullptr, w.data(), x.data(), gains ? wq.data() : nullptr,
                              gains ? wk.data() : nullptr, scale ? sq.data() : nullptr, r.data(), N, NH, D);
    gpt::test::expect_gradient("qknorm", "dinp", dx, numeric_gradient(x, loss));
    if (gains) {
      gpt::test::expect_gradient("qknorm", "dwq", dwq, numeric_gradient(wq, loss));
      gpt::test::expect_gradient("qknorm", "dwk", dwk, numeric_gradient(wk, loss));
    }
    if (scale) gpt::test::expect_gradient("qknorm", "dsq", dsq, numeric_gradient(sq, loss));
  }
}

TEST(QkNorm, FloatMatchesDouble) {
  const int n = 17, nh = 4, d = 32, c = nh * d;
  const auto x = random_vector(n * 3 * c, 8, -3.0, 3.0), wq = random_vector(d, 9), wk = random_vector(d, 10),
             dy = random_vector(n * 3 * c, 11), sq = random_vector(nh, 14, 0.5, 2.0);
  std::vector<double> y(n * 3 * c), r(n * 2 * nh), dx(n * 3 * c, 0.0), dwq(d, 0.0), dwk(d, 0.0), dsq(nh, 0.0);
  gpt::cpu::qknorm_forward(y.data(), r.data(), x.data(), wq.data(), wk.data(), sq.data(), n, nh, d, 1e-6);
  gpt::cpu::qknorm_backward(dx.data(), dwq.data(), dwk.data(), dsq.data(), dy.data(), x.data(), wq.data(), wk.data(),
                            sq.data(), r.data(), n, nh, d);
  std::vector<float> fx(x.begin(), x.end()), fq(wq.begin(), wq.end()), fk(wk.begin(), wk.end()),
      fs(sq.begin(), sq.end()), fdy(dy.begin(), dy.end()), fy(n * 3 * c), fr(n * 2 * nh), fdx(n * 3 * c, 0.f),
      fdq(d, 0.f), fdk(d, 0.f), fds(nh, 0.f);
  gpt::cpu::qknorm_forward(fy.data(), fr.data(), fx.data(), fq.data(), fk.data(), fs.data(), n, nh, d, 1e-6);
  gpt::cpu::qknorm_backward(fdx.data(), fdq.data(), fdk.data(), fds.data(), fdy.data(), fx.data(), fq.data(), fk.data(),
                            fs.data(), fr.data(), n, nh, d);
  for (int h = 0; h < nh; ++h) EXPECT_NEAR(fds[h], dsq[h], 1e-4 * (1 + std::abs(dsq[h])));
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_NEAR(fy[i], y[i], 1e-5 * (1 + std::abs(y[i])));
    EXPECT_NEAR(fdx[i], dx[i], 1e-4 * (1 + std::abs(dx[i])));
  }
  for (int j = 0; j < d; ++j) {
    EXPECT_NEAR(fdq[j], dwq[j], 1e-4 * (1 + std::abs(dwq[j])));
    EXPECT_NEAR(fdk[j], dwk[j], 1e-4 * (1 + std::abs(dwk[j])));
  }
}

}  // namespace
