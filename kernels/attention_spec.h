// The choice of attention variant, as passed to the kernels of every backend.
// Plain data, no STL, so CUDA kernels can take it by value later.
//
// Issue "Core" implements softmax only; the attention-family issue extends
// this struct with the five pipeline stages of ../shared/docs/attention.md.
#pragma once

namespace gpt {

enum class AttentionKind : int { Softmax = 0 };

struct AttentionSpec {
  AttentionKind kind = AttentionKind::Softmax;
  int trained_context = 0;  // N: the context length the model was trained at

  // Number of per-row statistics the forward saves for the backward pass.
  constexpr int stats_per_row() const { return 1; }
};

// The variant's name as configs and results spell it.
constexpr const char* attention_name(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::Softmax:
      return "softmax";
  }
  return "unknown";
}

}  // namespace gpt
