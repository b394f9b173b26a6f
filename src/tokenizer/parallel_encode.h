// Encoding large texts on all cores: spans of a text are cut at independent
// cuts (pretokenize.h) into ~1 MB chunks that threads encode at once; the
// result is the same ids as encoding each span whole, for any thread count.
#pragma once
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace gpt {

struct TextSpan {
  size_t begin = 0, end = 0;  // bytes [begin, end) of the text
  bool end_of_text_before = false;
};

// (bytes encoded so far, bytes in all), called now and then from one thread at a time.
using EncodeProgress = std::function<void(uint64_t done, uint64_t total)>;

// The ids of the spans in order, concatenated; end-of-text before each span
// that asks for it. Uses omp_get_max_threads() threads.
std::vector<uint32_t> encode_spans(const Tokenizer& tok, std::string_view text, const std::vector<TextSpan>& spans,
                                   const EncodeProgress& progress = {});

// The spans of text around each "<|endoftext|>" (each span after one asks for
// end-of-text before it), for encoding with special tokens.
std::vector<TextSpan> spans_around_end_of_text(std::string_view text);

}  // namespace gpt
