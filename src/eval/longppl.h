// LongPPL's key tokens (Fang et al., ICLR 2025, "What is Wrong with
// Perplexity for Long-context Language Modeling?", arXiv 2410.23771;
// docs/evaluation.md, "LongPPL"): the tokens whose prediction depends on
// long context, found by an evaluator model that reads the long context.
// For each scored token x of the evaluation layout's windows:
//   LSD(x) = ln P(x | long context) − ln P(x | short context)
//   LCL(x) = ln P(x | long context)
// under the evaluator; x is a key token when LSD > α and LCL > β (the
// authors' defaults α = 2, β = −2). The long context of the token at offset
// j of a window is the window from the start of its sequence of L_long
// tokens (⌊j / L_long⌋·L_long); its short context ends S_short = ⌈T/2⌉ tokens
// past a block boundary: blocks of S_short tokens, each scored in a sequence
// of at most T tokens ending with it, so a token sees between T − S_short
// and T tokens (fewer only within the window's first T tokens, where it
// sees what the long context sees and LSD = 0). The evaluated model's
// LongPPL at a multiple is then exp(mean loss over the key tokens).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/shard.h"
#include "eval/extrapolation.h"
#include "model/gpt.h"

namespace gpt {

struct KeyTokens {
  // mask[k·span + j]: offset j of window k of the layout is a key token.
  std::vector<uint8_t> mask;
  int64_t span = 0;
  int64_t count = 0;          // key tokens
  int64_t candidates = 0;     // tokens with both losses (offsets inside a whole sequence of long_context)
  double alpha = 2, beta = -2;
  int long_context = 0, short_context = 0, short_stride = 0;
  std::string evaluator;  // what judged (for reports)
  bool is_key(size_t window, int64_t offset) const {
    return offset >= 0 && offset < span && mask[window * static_cast<size_t>(span) + static_cast<size_t>(offset)];
  }
  nlohmann::json to_json() const;
};

// The key tokens of `layout` (chunks or documents: windows read from their
// start) under `evaluator`, whose long context is long_context (the longest
// evaluated multiple's m·T) and short context T. Throws when the layout is
// sliding (its windows are scored with context from before them) or
// long_context does not fit a window.
KeyTokens select_key_tokens(Model<float>& evaluator, const TokenStream& val, const EvalLayout& layout, int T,
                            int long_context, double alpha, double beta);

}  // namespace gpt
