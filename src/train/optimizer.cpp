#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

#include <spdlog/fmt/fmt.h>

#include "core/check.h"
#include "kernels/muon_spec.h"

namespace gpt {
namespace {

bool shards(const TrainConfig& cfg, dist::Communicator* comm) { return comm && comm->size() > 1 && cfg.zero == 1; }

dist::Shard whole_or_shard(size_t n, const TrainConfig& cfg, dist::Communicator* comm) {
  if (shards(cfg, comm)) return dist::shard_of(n, comm->rank(), comm->size());
  return dist::Shard{0, n};
}

// Scratch for the largest matrix Muon orthogonalises (none for AdamW).
size_t muon_work(const ParamLayout& layout, const TrainConfig& cfg) {
  size_t most = 0;
  if (cfg.optimizer != "muon") return most;
  for (const ParamSpec& s : layout.specs)
    for (int64_t rows : s.row_blocks)
      most = std::max(most, muon::work_size(static_cast<int>(rows), static_cast<int>(s.shape[2])));
  return most;
}

}  // namespace

template <typename T>
Optimizer<T>::Optimizer(Model<T>& model, const TrainConfig& cfg, dist::Communicator* comm)
    : model_(model),
      cfg_(cfg),
      comm_(comm),
      sharded_(shards(cfg, comm)),
      shard_(whole_or_shard(model.num_params(), cfg, comm)),
      m_(model.backend(), shard_.size()),
      v_(model.backend(), shard_.size()),
      work_(model.backend(), muon_work(model.layout(), cfg)) {
  GPT_CHECK(cfg.optimizer == "adamw" || cfg.optimizer == "muon", "train.optimizer must be adamw or muon, got \"",
            cfg.optimizer, "\"");
}

template <typename T>
std::string Optimizer<T>::summary() const {
  const std::string adamw = fmt::format("AdamW (lr {:g}, betas {:g}/{:g}, eps {:g}, weight decay {:g})", cfg_.lr,
                                        cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay);
  if (cfg_.optimizer != "muon") return "optimizer adamw: " + adamw + " on every tensor";
  int matrices = 0;
  std::string names;
  for (const ParamSpec& s : model_.layout().specs)
    if (s.hidden_matrix()) {
      matrices += static_cast<int>(s.shape[0] * static_cast<int64_t>(s.row_blocks.size()));
      names += (names.empty() ? "" : ", ") + s.name;
    }
  return fmt::format(
      "optimizer muon: Muon (lr {:g}, Nesterov momentum {:g}, weight decay {:g}, {} Newton-Schulz steps) on {} "
      "hidden matrices ({}), {} on the rest",
      cfg_.muon_lr, cfg_.muon_momentum, cfg_.muon_weight_decay, muon::kSteps, matrices, names, adamw);
}

template <typename T>
double Optimizer<T>::grad_norm() {
  return std::sqrt(model_.backend().sum_squares(model_.grads(), model_.num_params()));
}

template <typename T>
double Optimizer<T>::clip(double max_norm) {
  const double norm = grad_norm();
  if (max_norm > 0 && norm > max_norm)
    model_.backend().scale_inplace(model_.grads(), static_cast<T>(max_norm / norm), model_.num_params());
  return norm;
}

template <typename T>
void Optimizer<T>::step(double lr) {
  ++t_;
  // Each AdamW tensor's part within this rank's shard (the whole tensor unsharded).
  for (const ParamSpec& s : model_.layout().specs) {
    if (muon(s)) continue;
    const size_t lo = std::max(s.offset, shard_.begin), hi = std::min(s.offset + s.numel(), shard_.end);
    if (lo >= hi) continue;
    const size_t o = lo - shard_.begin;
    model_.backend().adamw_update(model_.params() + lo, model_.grads() + lo, m_.get() + o, v_.get() + o, hi - lo, lr,
                                  cfg_.beta1, cfg_.beta2, cfg_.eps, s.decay ? cfg_.weight_decay : 0.0, t_);
  }
  if (cfg_.optimizer == "muon") muon_step(lr);
  if (sharded_) comm_->allgather(model_.params(), dist::shard_counts(model_.num_params(), comm_->size()));
}

// Muon (docs/optimizers.md): momentum on this rank's shard, the updates
// gathered whole, then each matrix overlapping the shard orthogonalised in
// the gradient buffer and applied to the shard's part of it.
template <typename T>
void Optimizer<T>::muon_step(double lr) {
  ParamBackend<T>& be = model_.backend();
  for (const ParamSpec& s : model_.layout().specs) {
    if (!muon(s)) continue;
    const size_t lo = std::max(s.offset, shard_.begin), hi = std::min(s.offset + s.numel(), shard_.end);
    if (lo < hi) be.muon_momentum(model_.grads() + lo, m_.get() + (lo - shard_.begin), hi - lo, cfg_.muon_momentum);
  }
  if (sharded_) comm_->allgather(model_.grads(), dist::shard_counts(model_.num_params(), comm_->size()));
  const double muon_lr = cfg_.muon_lr * lr / cfg_.lr;
  for (const ParamSpec& s : model_.layout().specs) {
    if (!muon(s)) continue;
    const int cols = static_cast<int>(s.shape[2]);
    size_t begin = s.offset;
    for (int64_t l = 0; l < s.shape[0]; ++l)
      for (int64_t rows : s.row_blocks) {
        const size_t end = begin + static_cast<size_t>(rows) * cols;
        const size_t lo = std::max(begin, shard_.begin), hi = std::min(end, shard_.end);
        if (lo < hi) {
          be.newton_schulz(model_.grads() + begin, static_cast<int>(rows), cols, muon::kSteps, work_.get());
          be.muon_apply(model_.params() + lo, model_.grads() + lo, hi - lo, muon_lr,
                        muon::update_scale(static_cast<int>(rows), cols), cfg_.muon_weight_decay);
        }
        begin = end;
      }
  }
}

template <typename T>
void Optimizer<T>::download_moments(std::vector<T>& m, std::vector<T>& v) {
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
void Optimizer<T>::upload_moments(const T* m, const T* v) {
  model_.backend().upload(m_.get(), m + shard_.begin, shard_.size());
  model_.backend().upload(v_.get(), v + shard_.begin, shard_.size());
}

template class Optimizer<float>;
template class Optimizer<double>;

}  // namespace gpt
