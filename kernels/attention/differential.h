// Differential attention's λ and its gradient, and the kernel-head layout.
// (Part of kernels/attention_spec.h, which includes it; GPT_HD functions that
// both backends compile.)
#pragma once
#include "kernels/attention_spec.h"

namespace gpt {
namespace attn {

// Differential attention (Ye et al. 2024, "Differential Transformer", arXiv
// 2410.05258; microsoft/unilm Diff-Transformer/multihead_diffattn.py;
// docs/contenders.md). Each of the NH heads (head size D) splits its query and
// key into halves q¹, q², k¹, k² of d = D/2 channels and keeps its value
// whole: z_h = (A(q¹, k¹) − λ·A(q², k²))·v_h, A any variant of the
// pipeline; the head's output is RMSNorm(z_h)·g·(1 − λ_init), the RMS over
// its D channels (ε = 1e-5) and the gain g (D values) shared by the heads, as
// the reference's subln. Per layer λ = e^(λ_q1·λ_k1) − e^(λ_q2·λ_k2) +
// λ_init, the four vectors learned (d values each, N(0, 0.1)), and
// λ_init = 0.8 − 0.6·e^(−0.3·l) for layer l, 0-based (the paper's l − 1).
// The kernels run a head as kHeads kernel heads of d channels (the
// reference's multihead_flashdiff_2 layout, for kernels whose value head is
// as wide as the query's): kernel head kHeads·h + 2m + u scores q^(m+1)
// against k^(m+1) and reads the value half u; the model splits qkv into
// that layout and combines the outputs (cpu::diff_*).
namespace diff {
inline constexpr int kHeads = 4;
inline constexpr double kEps = 1e-5;
inline constexpr double kInitStd = 0.1;
GPT_HD inline double lambda_init(int layer) { return 0.8 - 0.6 * exp(-0.3 * layer); }
struct Lambda {
  double value = 0, e1 = 0, e2 = 0;  // λ, e^(λ_q1·λ_k1), e^(λ_q2·λ_k2)
};
// λ of a layer's block p = [λ_q1 | λ_k1 | λ_q2 | λ_k2] (d values each).
template <typename P>
GPT_HD inline Lambda lambda(const P* p, int d, double init) {
  double s1 = 0, s2 = 0;
  for (int i = 0; i < d; ++i) {
    s1 += static_cast<double>(p[i]) * static_cast<double>(p[d + i]);
    s2 += static_cast<double>(p[2 * d + i]) * static_cast<double>(p[3 * d + i]);
  }
  Lambda l;
  l.e1 = exp(s1);
  l.e2 = exp(s2);
  l.value = l.e1 - l.e2 + init;
  return l;
}
// dλ/dp_k of the block's entry k (0 <= k < 4d).
template <typename P>
GPT_HD inline double lambda_grad(const P* p, int d, const Lambda& l, int k) {
  const int i = k % d;
  switch (k / d) {
    case 0:
      return l.e1 * static_cast<double>(p[d + i]);
    case 1:
      return l.e1 * static_cast<double>(p[i]);
    case 2:
      return -l.e2 * static_cast<double>(p[3 * d + i]);
    default:
      return -l.e2 * static_cast<double>(p[2 * d + i]);
  }
}
}  // namespace diff

}  // namespace attn
}  // namespace gpt
