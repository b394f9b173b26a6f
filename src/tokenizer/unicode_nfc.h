// Unicode normalisation form C (NFC), for Hugging Face tokenizers whose
// tokenizer.json asks for it (docs/hf_models.md §7): canonical decomposition,
// canonical ordering of combining marks, canonical composition, as Unicode
// Standard Annex #15 defines them; Hangul syllables by their arithmetic. The
// data tables come from scripts/make_unicode_tables.py (unicode_nfc_data.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gpt::unicode {

struct CombiningRange {
  uint32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp;
  uint8_t n;
  uint32_t to[4];
};
struct Composition {
  uint32_t first, second, composite;
};
extern const CombiningRange kCombiningClass[];
extern const size_t kCombiningClassCount;
extern const Decomposition kDecomposition[];  // sorted by cp
extern const size_t kDecompositionCount;
extern const Composition kComposition[];  // sorted by (first, second)
extern const size_t kCompositionCount;

// The canonical combining class of a code point (0 for starters).
uint8_t combining_class(uint32_t cp);

// text in NFC. Bytes that are not valid UTF-8 are kept as they are, and
// normalisation restarts after them. Text whose code points are all below
// U+0300 is returned unchanged without further work (nothing there
// decomposes into or composes with a combining mark).
std::string nfc(std::string_view text);

}  // namespace gpt::unicode
