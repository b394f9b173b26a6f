// AdamW over the model's flat parameter buffer. Weight decay applies to the
// tensors the parameter table marks as decaying (the weight matrices), and the
// moments live in two flat buffers with the parameters' layout, so checkpoint
// I/O and (later) sharding follow the same table.
#pragma once
#include "backend/backend.h"
#include "config/config.h"
#include "model/gpt.h"

namespace gpt {

template <typename T>
class AdamW {
 public:
  AdamW(GPT<T>& model, const TrainConfig& cfg);
  // Global L2 norm of the gradients (before clipping).
  double grad_norm();
  // Scales gradients so that their global norm is at most max_norm (no-op if
  // max_norm <= 0). Returns the norm before clipping.
  double clip(double max_norm);
  // One update with learning rate lr; advances the step counter.
  void step(double lr);
  long steps_taken() const { return t_; }
  void set_steps_taken(long t) { t_ = t; }
  T* m() { return m_.get(); }
  T* v() { return v_.get(); }

 private:
  GPT<T>& model_;
  TrainConfig cfg_;
  Buffer<T> m_, v_;
  long t_ = 0;
};

}  // namespace gpt
