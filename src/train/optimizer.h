// The optimizer over the model's flat parameter buffer: AdamW for every
// tensor (train.optimizer "adamw"), or Muon for the hidden weight matrices
// and AdamW for the rest ("muon"; docs/optimizers.md). Weight decay applies
// to the tensors the parameter table marks as decaying (the weight matrices),
// and the state lives in two flat buffers with the parameters' layout, so
// checkpoint I/O and sharding follow the same table: AdamW's moments m and v,
// or for a Muon matrix its momentum in m (v stays zero).
//
// With a communicator of several ranks and train.zero = 1 (ZeRO-1) each rank
// keeps the state of its shard of the flat buffer only (dist::shard_of),
// updates that shard of the parameters, and the ranks then all-gather the
// parameters. Muon needs whole matrices: each rank forms the momentum update
// of its shard, the ranks all-gather those updates, and each rank
// orthogonalises the matrices that overlap its shard (a matrix across a
// shard boundary on both ranks, identically). The gradients must already be
// the same on every rank (averaged across ranks), so the global norm and the
// clipping are too.
#pragma once
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "dist/communicator.h"
#include "model/gpt.h"

namespace gpt {

template <typename T>  // the float32 side: Model<T>::params()
class Optimizer {
 public:
  // comm: null or one rank means one process holding all of the state.
  Optimizer(Model<T>& model, const TrainConfig& cfg, dist::Communicator* comm = nullptr);
  // "adamw" or "muon" (train.optimizer).
  const std::string& kind() const { return cfg_.optimizer; }
  // For the log: "optimizer muon: Muon (lr 0.02, …) on 16 hidden matrices (…), AdamW (…) on the rest".
  std::string summary() const;
  // Global L2 norm of the gradients (before clipping).
  double grad_norm();
  // Scales gradients so that their global norm is at most max_norm (no-op if
  // max_norm <= 0). Returns the norm before clipping.
  double clip(double max_norm);
  // One update with learning rate lr (Muon's matrices: train.muon_lr scaled by
  // lr / train.lr, so both follow the schedule); advances the step counter.
  // Collective when sharded (the parameters are all-gathered). Muon leaves its
  // updates in the gradient buffer (the trainer zeroes it before the next step).
  void step(double lr);
  long steps_taken() const { return t_; }
  void set_steps_taken(long t) { t_ = t; }

  bool sharded() const { return sharded_; }
  // The part of the flat buffer whose state this rank holds (all of it
  // unless sharded).
  dist::Shard shard() const { return shard_; }
  // This rank's state (backend memory, shard().size() elements each).
  T* m() { return m_.get(); }
  T* v() { return v_.get(); }
  // The whole state on the host, in the parameters' layout. Collective when
  // sharded (every rank must call it; every rank gets them).
  void download_moments(std::vector<T>& m, std::vector<T>& v);
  // Sets the state from whole host arrays in the parameters' layout (each
  // rank keeps its shard).
  void upload_moments(const T* m, const T* v);

 private:
  void muon_step(double lr);
  bool muon(const ParamSpec& s) const { return cfg_.optimizer == "muon" && s.hidden_matrix(); }

  Model<T>& model_;
  TrainConfig cfg_;
  dist::Communicator* comm_;
  bool sharded_;
  dist::Shard shard_;
  Buffer<T> m_, v_;  // shard_.size() elements each
  Buffer<T> work_;   // Newton–Schulz scratch for the largest Muon matrix (muon only)
  long t_ = 0;
};

}  // namespace gpt
