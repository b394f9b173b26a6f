// Token ids shared by the data layer, the model and the kernels.
#pragma once

#include <cstdint>

namespace gpt {

// The target id of a position whose loss is not scored (a loss mask's 0,
// PyTorch's ignore_index): cross-entropy gives it loss 0 and a zero
// gradient row, and a mean loss is over the scored positions only.
constexpr int32_t kIgnoreTarget = -1;

}  // namespace gpt
