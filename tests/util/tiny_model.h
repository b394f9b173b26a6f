// The tiny model of the whole-model tests (gradient checks in double): 2
// layers, 2 heads, C = 8, a vocabulary of 11, context 5, and an init_std
// larger than GPT-2's so that every path carries signal; and the per-tensor
// check of such a model's gradient against finite differences.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/params.h"
#include "util/gradcheck.h"

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

// The whole model's analytic gradient against the numeric one, tensor by
// tensor of the layout: prints "[gradcheck] model(LABEL) NAME max_rel_err=..."
// and asserts each error is below 1e-6. The floor of the relative error is
// 1e-6, or 1e-5 of the tensor's largest numeric entry if that is more
// (entries far below the largest are compared absolutely; gradcheck.h).
inline void expect_model_gradient(const std::string& label, const ParamLayout& layout,
                                  const std::vector<double>& analytic, const std::vector<double>& numeric) {
  for (const ParamSpec& s : layout.specs) {
    const std::vector<double> a(analytic.begin() + s.offset, analytic.begin() + s.offset + s.numel());
    const std::vector<double> n(numeric.begin() + s.offset, numeric.begin() + s.offset + s.numel());
    double largest = 0;
    for (double x : n) largest = std::max(largest, std::abs(x));
    const double err = max_rel_error(a, n, std::max(1e-5 * largest, 1e-6));
    std::printf("[gradcheck] model(%s) %-9s max_rel_err=%.2e\n", label.c_str(), s.name.c_str(), err);
    EXPECT_LT(err, 1e-6) << label << " " << s.name;
  }
}

}  // namespace gpt::test
