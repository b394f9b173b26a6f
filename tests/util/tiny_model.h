// The tiny model of the whole-model tests (gradient checks in double): 2
// layers, 2 heads, C = 8, a vocabulary of 11, context 5, and an init_std
// larger than GPT-2's so that every path carries signal.
#pragma once
#include <string>

#include "config/config.h"

namespace gpt::test {

inline ModelConfig tiny_model_config(const std::string& position) {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 8;
  m.vocab_size = 11;
  m.vocab_pad_multiple = 64;
  m.context = 5;
  m.position = position;
  m.init_std = 0.3;
  return m;
}

}  // namespace gpt::test
