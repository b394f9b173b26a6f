#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

namespace gpt {
namespace {

bool shards(const TrainConfig& cfg, dist::Communicator* comm) { return comm && comm->size() > 1 && cfg.zero == 1; }

dist::Shard whole_or_shard(size_t n, const TrainConfig& cfg, dist::Communicator* comm) {
  if (shards(cfg, comm)) return dist::shard_of(n, comm->rank(), comm->size());
  return dist::Shard{0, n};
}

}  // namespace

template <typename T>
AdamW<T>::AdamW(Model<T>& model, const TrainConfig& cfg, dist::Communicator* comm)
    : model_(model),
      cfg_(cfg),
      comm_(comm),
      sharded_(shards(cfg, comm)),
      shard_(whole_or_shard(model.num_params(), cfg, comm)),
      m_(model.backend(), shard_.size()),
      v_(model.backend(), shard_.size()) {}

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
  // Each tensor's part within this rank's shard (the whole tensor unsharded).
  for (const ParamSpec& s : model_.layout().specs) {
    const size_t lo = std::max(s.offset, shard_.begin), hi = std::min(s.offset + s.numel(), shard_.end);
    if (lo >= hi) continue;
    const size_t o = lo - shard_.begin;
    model_.backend().adamw_update(model_.params() + lo, model_.grads() + lo, m_.get() + o, v_.get() + o, hi - lo, lr,
                                  cfg_.beta1, cfg_.beta2, cfg_.eps, s.decay ? cfg_.weight_decay : 0.0, t_);
  }
  if (sharded_) comm_->allgather(model_.params(), dist::shard_counts(model_.num_params(), comm_->size()));
}

template <typename T>
void AdamW<T>::download_moments(std::vector<T>& m, std::vector<T>& v) {
  const size_t n = model_.num_params();
  m.assign(n, T(0));
  v.assign(n, T(0));
  if (!sharded_) {
    model_.backend().download(m.data(), m_.get(), n);
    model_.backend().download(v.data(), v_.get(), n);
    return;
  }
  // Gather through backend memory (the communicator's tensors live there).
  Buffer<T> full(model_.backend(), n);
  const std::vector<size_t> counts = dist::shard_counts(n, comm_->size());
  for (auto [own, host] : {std::pair{m_.get(), &m}, std::pair{v_.get(), &v}}) {
    // This rank's shard in place, through the host; the all-gather fills the rest.
    T* mine = host->data() + shard_.begin;
    model_.backend().download(mine, own, shard_.size());
    model_.backend().upload(full.get() + shard_.begin, mine, shard_.size());
    comm_->allgather(full.get(), counts);
    model_.backend().download(host->data(), full.get(), n);
  }
}

template <typename T>
void AdamW<T>::upload_moments(const T* m, const T* v) {
  model_.backend().upload(m_.get(), m + shard_.begin, shard_.size());
  model_.backend().upload(v_.get(), v + shard_.begin, shard_.size());
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace gpt
