// GPT-2's pre-tokenisation: text is cut into pieces by the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (matches taken left to right), and BPE merges never cross a piece. PCRE2
// matches it with Unicode letter and number classes. Two choices GPT-2 leaves
// open are fixed here:
// - \s is Unicode's White_Space property, spelled out (Python's `regex`
//   module and tiktoken use the same set), so the result does not depend on
//   how a PCRE2 version defines \s.
// - GPT-2 only ever sees valid UTF-8. Here invalid bytes match no part of the
//   pattern (PCRE2_MATCH_INVALID_UTF); each maximal run of bytes between two
//   matches becomes one piece, so every byte lands in exactly one piece.
#pragma once
#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;

namespace gpt {

class Pretokenizer {
 public:
  Pretokenizer();  // compiles the pattern (JIT where PCRE2 has it)
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Calls piece(std::string_view) for each piece of text, in order; the
  // pieces concatenate to text. Thread-safe.
  template <typename F>
  void for_each_piece(std::string_view text, F&& piece) const {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t begin = 0, end = 0;
      if (!next_match(text, pos, begin, end)) begin = end = text.size();
      if (begin > pos) piece(text.substr(pos, begin - pos));  // bytes no part of the pattern matches
      if (end > begin) piece(text.substr(begin, end - begin));
      pos = end;
    }
  }

 private:
  // The first match at or after pos: [begin, end). False if none.
  bool next_match(std::string_view text, size_t pos, size_t& begin, size_t& end) const;

  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

// The first position p >= from where text may be cut into text[..p) and
// text[p..) and each part pre-tokenised on its own gives the same pieces as
// the whole: a lone "\n" between two printable ASCII characters other than
// space (no piece contains "\n" next to a non-space, and the lookahead of
// \s+(?!\S) sees the same thing at the cut). text.size() if there is none.
size_t next_independent_cut(std::string_view text, size_t from);

// text cut at independent cuts into consecutive [begin, end) ranges of about
// target bytes or more (a range grows until a cut comes), for encoding the
// ranges in parallel with the same result as encoding text whole.
std::vector<std::pair<size_t, size_t>> independent_chunks(std::string_view text, size_t target);

}  // namespace gpt
