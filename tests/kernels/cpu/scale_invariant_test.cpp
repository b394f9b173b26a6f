// Scale-invariant attention (Anson, Wang, Aitchison 2025, arXiv 2505.17083;
// attn::si_*): the kernels against the paper's logits written out here in
// double with T×T loops (§3 Eq. 16: L_t = a_t S_t + m_t, S_t = q·k/sqrt(d),
// t = i − j counted back from the query, a_t = sqrt(2[ln(t/τ + 1) − ln α +
// β/α]), m_t = −a_t² + β/α, with α = β = e^½ from a_0 = 1, m_0 = 0), for
// softmax and softplus with l1 normalisation and with a window; finite
// differences of the backward for softmax, lssar and stick-breaking.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "config/attention.h"
#include "kernels/cpu/cpu_kernels.h"
#include "util/attention_reference.h"
#include "util/gradcheck.h"

namespace gpt::cpu {
namespace {

using gpt::test::numeric_gradient;
using gpt::test::random_vector;
using gpt::test::weighted_sum;

AttentionSpec si_spec(const std::string& preset, double tau, int N, const std::string& mask = "none") {
  AttentionConfig a;
  a.preset = preset;
  a.scale = "scale_invariant";
  a.tau = tau;
  ModelConfig m;
  m.context = N;
  ContextConfig c;
  c.mask = mask;
  if (mask != "none") c.window = 9;
  return resolve_attention(a, m, c);
}

// The paper's a_t and m_t from α and β (Eq. 16), not from the simplified form.
double paper_a(double t, double tau) {
  const double alpha = std::exp(0.5), beta = std::exp(0.5);
  return std::sqrt(2 * (std::log(t / tau + 1) - std::log(alpha) + beta / alpha));
}
double paper_m(double t, double tau) {
  const double alpha = std::exp(0.5), beta = std::exp(0.5);
  return -paper_a(t, tau) * paper_a(t, tau) + beta / alpha;
}

// softmax (exp, l1) or softplus with l1, no re-weighting; keys inside the
// window w (0: all).
std::vector<double> reference(const std::vector<double>& qkv, int B, int T, int C, int NH, const AttentionSpec& s,
                              int w) {
  const int d = C / NH;
  std::vector<double> out(static_cast<size_t>(B) * T * C, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        std::vector<double> u(i + 1, 0.0);
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          if (w > 0 && j <= i - w) continue;
          double qk = 0;
          for (int c = 0; c < d; ++c)
            qk += qkv[(static_cast<size_t>(b) * T + i) * 3 * C + h * d + c] *
                  qkv[(static_cast<size_t>(b) * T + j) * 3 * C + C + h * d + c];
          const double S = qk / std::sqrt(static_cast<double>(d));
          u[j] = paper_a(i - j, s.tau) * S + paper_m(i - j, s.tau) + s.bias;
          mx = std::max(mx, u[j]);
        }
        double z = 0;
        for (int j = 0; j <= i; ++j) {
          if (w > 0 && j <= i - w) continue;
          u[j] = s.positivity == Positivity::Exp ? std::exp(u[j] - mx) : test::ref_phi(s.positivity, u[j]);
          z += u[j];
        }
        for (int c = 0; c < d; ++c) {
          double acc = 0;
          for (int j = 0; j <= i; ++j) acc += u[j] / z * qkv[(static_cast<size_t>(b) * T + j) * 3 * C + 2 * C + h * d + c];
          out[(static_cast<size_t>(b) * T + i) * C + h * d + c] = acc;
        }
      }
  return out;
}

template <typename T>
std::vector<T> forward(const std::vector<T>& qkv, int B, int Tn, int C, int NH, const AttentionSpec& s,
                       std::vector<T>* stats = nullptr) {
  std::vector<T> out(static_cast<size_t>(B) * Tn * C);
  if (stats) stats->assign(static_cast<size_t>(B) * NH * Tn * AttentionSpec::kStatsPerRow, T(0));
  attention_forward(out.data(), stats ? stats->data() : nullptr, qkv.data(), B, Tn, C, NH, s, HeadParams<T>{},
                    nullptr);
  return out;
}

TEST(ScaleInvariant, MatchesThePapersLogits) {
  // T = 150 spans three row blocks of 64; τ = 10 (the paper's best) and 2.
  const int B = 2, T = 150, C = 32, NH = 4;
  const std::vector<double> qkv = random_vector(static_cast<size_t>(B) * T * 3 * C, 41, -1.5, 1.5);
  for (const auto& [preset, tau, mask] :
       {std::tuple<const char*, double, const char*>{"softmax", 10.0, "none"}, {"softmax", 2.0, "none"},
        {"softmax", 10.0, "window"}, {"softplus", 10.0, "none"}}) {
    AttentionSpec s = si_spec("softmax", tau, 37, mask);
    if (std::string(preset) == "softplus") s.positivity = Positivity::Softplus;  // with l1, as LSSA
    const std::vector<double> ref = reference(qkv, B, T, C, NH, s, s.window);
    const double e = test::max_abs_diff(forward(qkv, B, T, C, NH, s), ref);
    const double ef = test::max_abs_diff(forward(test::cast<float>(qkv), B, T, C, NH, s), ref);
    std::printf("[scale_invariant] %s tau=%g mask=%s: max abs difference %.2e (double) %.2e (float)\n", preset, tau,
                mask, e, ef);
    EXPECT_LT(e, 1e-12) << preset;
    EXPECT_LT(ef, 1e-5) << preset;
  }
  // At τ → ∞ every a_t → 1 and m_t → 0: the plain preset.
  AttentionSpec flat = si_spec("softmax", 1e15, 37);
  AttentionSpec plain = flat;
  plain.scale = Scale::None;
  EXPECT_LT(test::max_abs_diff(forward(qkv, B, T, C, NH, flat), forward(qkv, B, T, C, NH, plain)), 1e-12);
}

TEST(ScaleInvariant, BackwardMatchesFiniteDifferences) {
  const int B = 1, T = 70, C = 16, NH = 2;
  for (const char* preset : {"softmax", "lssar", "stick_breaking"}) {
    const AttentionSpec s = si_spec(preset, 3.0, 11);
    std::vector<double> qkv = random_vector(static_cast<size_t>(B) * T * 3 * C, 42, -1.5, 1.5);
    const std::vector<double> w = random_vector(static_cast<size_t>(B) * T * C, 43);
    std::vector<double> stats;
    const std::vector<double> out = forward(qkv, B, T, C, NH, s, &stats);
    std::vector<double> dqkv(qkv.size(), 0.0);
    attention_backward(dqkv.data(), HeadGrads<double>{}, w.data(), out.data(), stats.data(), qkv.data(), B, T, C, NH,
                       s, HeadParams<double>{});
    auto loss = [&] { return weighted_sum(forward(qkv, B, T, C, NH, s), w); };
    // lssar (cosine ×32, p = 15): h = 3e-4; its error falls as h grows from
    // 5e-5 (1.5e-6) through 1e-4 (1.1e-6) to 3e-4 (5.8e-7): rounding, not truncation.
    test::expect_gradient_scaled("attention", (std::string(preset) + "+scale_invariant dqkv").c_str(), dqkv,
                                 numeric_gradient(qkv, loss, std::string(preset) == "lssar" ? 3e-4 : 1e-3));
  }
}

}  // namespace
}  // namespace gpt::cpu
