#include "train/optimizer.h"

#include <cmath>

namespace gpt {

template <typename T>
AdamW<T>::AdamW(GPT<T>& model, const TrainConfig& cfg)
    : model_(model), cfg_(cfg), m_(model.backend(), model.num_params()), v_(model.backend(), model.num_params()) {}

template <typename T>
double AdamW<T>::grad_norm() {
  return std::sqrt(model_.backend().sum_squares(model_.grads(), model_.num_params()));
}

template <typename T>
double AdamW<T>::clip(double max_norm) {
  const double norm = grad_norm();
  if (max_norm > 0 && norm > max_norm)
    model_.backend().scale_inplace(model_.grads(), static_cast<T>(max_norm / norm), model_.num_params());
  return norm;
}

template <typename T>
void AdamW<T>::step(double lr) {
  ++t_;
  for (const ParamSpec& s : model_.layout().specs) {
    const size_t o = s.offset;
    model_.backend().adamw_update(model_.params() + o, model_.grads() + o, m_.get() + o, v_.get() + o, s.numel(), lr,
                                  cfg_.beta1, cfg_.beta2, cfg_.eps, s.decay ? cfg_.weight_decay : 0.0, t_);
  }
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace gpt
