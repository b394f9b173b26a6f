// AdamW over the model's flat parameter buffer. Weight decay applies to the
// tensors the parameter table marks as decaying (the weight matrices), and the
// moments live in flat buffers with the parameters' layout, so checkpoint I/O
// and sharding follow the same table.
//
// With a communicator of several ranks and train.zero = 1 (ZeRO-1) each rank
// keeps the moments of its shard of the flat buffer only (dist::shard_of),
// updates that shard of the parameters, and the ranks then all-gather the
// parameters. The gradients must already be the same on every rank (averaged
// across ranks), so the global norm and the clipping are too.
#pragma once
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "dist/communicator.h"
#include "model/gpt.h"

namespace gpt {

template <typename T>  // the float32 side: Model<T>::params()
class AdamW {
 public:
  // comm: null or one rank means one process holding all of the state.
  AdamW(Model<T>& model, const TrainConfig& cfg, dist::Communicator* comm = nullptr);
  // Global L2 norm of the gradients (before clipping).
  double grad_norm();
  // Scales gradients so that their global norm is at most max_norm (no-op if
  // max_norm <= 0). Returns the norm before clipping.
  double clip(double max_norm);
  // One update with learning rate lr; advances the step counter. Collective
  // when sharded (the parameters are all-gathered).
  void step(double lr);
  long steps_taken() const { return t_; }
  void set_steps_taken(long t) { t_ = t; }

  bool sharded() const { return sharded_; }
  // The part of the flat buffer whose moments this rank holds (all of it
  // unless sharded).
  dist::Shard shard() const { return shard_; }
  // This rank's moments (backend memory, shard().size() elements each).
  T* m() { return m_.get(); }
  T* v() { return v_.get(); }
  // The whole moments on the host, in the parameters' layout. Collective when
  // sharded (every rank must call it; every rank gets them).
  void download_moments(std::vector<T>& m, std::vector<T>& v);
  // Sets the moments from whole host arrays in the parameters' layout (each
  // rank keeps its shard).
  void upload_moments(const T* m, const T* v);

 private:
  Model<T>& model_;
  TrainConfig cfg_;
  dist::Communicator* comm_;
  bool sharded_;
  dist::Shard shard_;
  Buffer<T> m_, v_;  // shard_.size() elements each
  long t_ = 0;
};

}  // namespace gpt
