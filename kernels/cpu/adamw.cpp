// AdamW (Loshchilov & Hutter 2019): Adam moments with bias correction and
// weight decay decoupled from the gradient.
#include "kernels/cpu/cpu_kernels.h"

#include <cmath>

#include "core/check.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, size_t n, double lr, double beta1, double beta2, double eps,
                  double weight_decay, long t) {
  GPT_CHECK(t >= 1, "adamw_update: step t must be >= 1 (1-based, for bias correction), got ", t);
  // Bias corrections 1 - beta^t in double: for beta2 = 0.999 and small t they
  // are tiny and float pow loses digits.
  const T b1 = T(beta1), b2 = T(beta2), one_m_b1 = T(1.0 - beta1), one_m_b2 = T(1.0 - beta2);
  const T inv_c1 = T(1.0 / (1.0 - std::pow(beta1, static_cast<double>(t))));
  const T inv_c2 = T(1.0 / (1.0 - std::pow(beta2, static_cast<double>(t))));
  const T lr_t = T(lr), eps_t = T(eps), wd = T(weight_decay);
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) {
    const T g = grad[i];
    m[i] = b1 * m[i] + one_m_b1 * g;
    v[i] = b2 * v[i] + one_m_b2 * g * g;
    const T mhat = m[i] * inv_c1;
    const T vhat = v[i] * inv_c2;
    param[i] -= lr_t * (mhat / (std::sqrt(vhat) + eps_t) + wd * param[i]);
  }
}

template void adamw_update<float>(float*, const float*, float*, float*, size_t, double, double, double, double, double,
                                  long);
template void adamw_update<double>(double*, const double*, double*, double*, size_t, double, double, double, double,
                                   double, long);

}  // namespace gpt::cpu
