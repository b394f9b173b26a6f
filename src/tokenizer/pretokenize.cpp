// GPT-2's pre-tokenisation pattern on PCRE2 (see pretokenize.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenize.h"

#include <pcre2.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "core/check.h"

namespace gpt {

namespace {

// Unicode's White_Space property: what GPT-2's \s matches.
#define GPT_WS \
  "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

constexpr const char* kPattern =
    "'(?:[sdmt]|ll|ve|re)"
    "|\\x20?\\p{L}+"
    "|\\x20?\\p{N}+"
    "|\\x20?[^" GPT_WS
    "\\p{L}\\p{N}]+"
    "|[" GPT_WS "]+(?![^" GPT_WS
    "])"
    "|[" GPT_WS "]+";

#undef GPT_WS

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

bool printable_non_space(char c) { return c > 0x20 && c < 0x7f; }

}  // namespace

const char* const kGpt2SplitPattern = kPattern;

Pretokenizer::Pretokenizer() : Pretokenizer({kPattern}, "GPT-2's pre-tokenisation") {}

Pretokenizer::Pretokenizer(const std::vector<std::string>& patterns, const std::string& source) {
  for (const std::string& p : patterns) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.c_str()), p.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_offset, nullptr);
    if (!code) {
      for (pcre2_code* c : codes_) pcre2_code_free(c);
      fail(source, ": the split pattern ", p, " does not compile at offset ", err_offset, ": ", pcre2_message(err));
    }
    codes_.push_back(code);
    jit_.push_back(pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0);
  }
  gpt2_ = patterns.size() == 1 && patterns[0] == kPattern;
}

Pretokenizer::~Pretokenizer() {
  for (pcre2_code* c : codes_) pcre2_code_free(c);
}

bool Pretokenizer::next_match(size_t level, std::string_view text, size_t pos, size_t& begin, size_t& end) const {
  pcre2_code* code = codes_[level];
  // One match block per thread, reused; it only holds the two offsets we read.
  thread_local std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(pcre2_match_data_create(4, nullptr));
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (true) {
    const int rc = jit_[level] ? pcre2_jit_match(code, subject, text.size(), pos, 0, md.get(), nullptr)
                               : pcre2_match(code, subject, text.size(), pos, 0, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    GPT_CHECK(rc > 0, "pre-tokenisation: PCRE2 match failed at byte ", pos, ": ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    begin = ov[0];
    end = ov[1];
    GPT_CHECK(begin >= pos, "pre-tokenisation: match before byte ", pos);
    // GPT-2's alternatives each consume at least one character; another
    // pattern's empty match is passed over (as Hugging Face's splits do):
    // search again from the next character.
    if (end > begin) return true;
    pos = begin + 1;
    while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    if (pos >= text.size()) return false;
  }
}

size_t next_independent_cut(std::string_view text, size_t from) {
  size_t p = std::max<size_t>(from, 2);
  while (p < text.size()) {
    const void* nl = std::memchr(text.data() + p - 1, '\n', text.size() - p);
    if (!nl) break;
    p = static_cast<size_t>(static_cast<const char*>(nl) - text.data()) + 1;  // just after the '\n'
    if (p >= 2 && printable_non_space(text[p - 2]) && printable_non_space(text[p])) return p;
    ++p;
  }
  return text.size();
}

std::vector<std::pair<size_t, size_t>> independent_chunks(std::string_view text, size_t target) {
  std::vector<std::pair<size_t, size_t>> chunks;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = next_independent_cut(text, begin + std::max<size_t>(target, 1));
    chunks.emplace_back(begin, end);
    begin = end;
  }
  return chunks;
}

}  // namespace gpt
