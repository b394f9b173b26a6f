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
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;

namespace gpt {

// The pattern above, for a Pretokenizer built from a list of patterns.
extern const char* const kGpt2SplitPattern;

class Pretokenizer {
 public:
  Pretokenizer();  // GPT-2's pattern (JIT where PCRE2 has it)
  // Several splits in turn (Hugging Face's Sequence of Split pre-tokenizers,
  // each "Isolated"): the text is cut by the first pattern, each piece by the
  // second, and so on. Patterns are PCRE2 syntax with Unicode classes; an
  // error names `source` and the pattern.
  Pretokenizer(const std::vector<std::string>& patterns, const std::string& source);
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Calls piece(std::string_view) for each piece of text, in order; the
  // pieces concatenate to text. Thread-safe.
  template <typename F>
  void for_each_piece(std::string_view text, F&& piece) const {
    for_each_piece_at(0, text, piece);
  }
  // Whether the pieces are GPT-2's (one split, its pattern), for which
  // next_independent_cut holds.
  bool gpt2() const { return gpt2_; }

 private:
  template <typename F>
  void for_each_piece_at(size_t level, std::string_view text, F& piece) const {
    if (level == codes_.size()) {
      if (!text.empty()) piece(text);
      return;
    }
    size_t pos = 0;
    while (pos < text.size()) {
      size_t begin = 0, end = 0;
      if (!next_match(level, text, pos, begin, end)) begin = end = text.size();
      if (begin > pos) for_each_piece_at(level + 1, text.substr(pos, begin - pos), piece);  // unmatched bytes
      if (end > begin) for_each_piece_at(level + 1, text.substr(begin, end - begin), piece);
      pos = end;
    }
  }
  // The first match of pattern `level` at or after pos: [begin, end). False if none.
  bool next_match(size_t level, std::string_view text, size_t pos, size_t& begin, size_t& end) const;

  std::vector<pcre2_real_code_8*> codes_;
  std::vector<bool> jit_;
  bool gpt2_ = false;
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
