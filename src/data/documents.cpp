// Text files to documents (documents.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/documents.h"

#include <pcre2.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/check.h"

namespace fs = std::filesystem;

namespace gpt {

namespace {

void append_file(const std::string& path, std::string& text) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail("text file '", path, "': cannot open");
  const auto size = static_cast<size_t>(in.tellg());
  in.seekg(0);
  const size_t at = text.size();
  text.resize(at + size);
  if (size > 0 && !in.read(text.data() + at, static_cast<std::streamsize>(size)))
    fail("text file '", path, "': read failed");
}

std::vector<std::string> input_files(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return {path};
  if (!fs::is_directory(path, ec)) fail("text file '", path, "': does not exist or is not a regular file or folder");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.is_regular_file() && e.path().filename().string().front() != '.') files.push_back(e.path().string());
  if (ec) fail("text folder '", path, "': cannot list (", ec.message(), ")");
  if (files.empty()) fail("text folder '", path, "': holds no regular files");
  std::sort(files.begin(), files.end());
  return files;
}

// Separators in text[begin, end) as [b, e) ranges.
using Ranges = std::vector<std::pair<size_t, size_t>>;

Ranges blank_line_separators(const std::string& text, size_t begin, size_t end) {
  Ranges seps;
  for (size_t line = begin; line < end;) {
    size_t nl = text.find('\n', line);
    const size_t next = nl == std::string::npos || nl >= end ? end : nl + 1;
    const bool blank = std::all_of(text.begin() + line, text.begin() + next,
                                   [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
    if (blank) {
      if (!seps.empty() && seps.back().second == line) {
        seps.back().second = next;
      } else {
        seps.emplace_back(line, next);
      }
    }
    line = next;
  }
  return seps;
}

struct CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

class SeparatorRegex {
 public:
  explicit SeparatorRegex(const std::string& re) : re_(re) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.data()), re.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_MULTILINE, &err, &off, nullptr));
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail("--doc-sep regex '", re, "': does not compile at offset ", off, ": ", reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is missing
    md_.reset(pcre2_match_data_create_from_pattern(code_.get(), nullptr));
  }

  Ranges separators(const std::string& text, size_t begin, size_t end, const std::string& file) const {
    Ranges seps;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + begin);
    const size_t n = end - begin;
    for (size_t pos = 0; pos < n;) {
      const int rc = pcre2_match(code_.get(), subject, n, pos, 0, md_.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0)
        fail("--doc-sep regex '", re_, "': matching failed in '", file, "' at byte ", pos, " (error ", rc, ")");
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md_.get());
      if (ov[1] == ov[0])
        fail("--doc-sep regex '", re_, "' matches the empty string (at byte ", ov[0], " of '", file,
             "'); a separator must match at least one character");
      seps.emplace_back(begin + ov[0], begin + ov[1]);
      pos = ov[1];
    }
    return seps;
  }

 private:
  std::string re_;
  std::unique_ptr<pcre2_code, CodeDeleter> code_;
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md_;
};

}  // namespace

DocumentSet read_documents(const std::string& path, const std::string& doc_sep) {
  std::unique_ptr<SeparatorRegex> regex;
  if (doc_sep.rfind("regex:", 0) == 0) {
    if (doc_sep.size() == 6) fail("--doc-sep 'regex:': give a pattern after 'regex:'");
    regex = std::make_unique<SeparatorRegex>(doc_sep.substr(6));
  } else if (doc_sep != "none" && doc_sep != "blank") {
    fail("--doc-sep '", doc_sep, "': allowed: ", kDocSepHelp);
  }
  DocumentSet set;
  set.files = input_files(path);
  for (const std::string& file : set.files) {
    const size_t begin = set.text.size();
    append_file(file, set.text);
    const size_t end = set.text.size();
    Ranges seps;
    if (doc_sep == "blank") seps = blank_line_separators(set.text, begin, end);
    if (regex) seps = regex->separators(set.text, begin, end, file);
    size_t doc = begin;
    seps.emplace_back(end, end);
    for (auto [b, e] : seps) {
      if (b > doc) set.docs.push_back({doc, b});
      doc = e;
    }
  }
  if (set.docs.empty())
    fail("text ", set.files.size() == 1 ? "file" : "folder", " '", path, "': is empty",
         doc_sep == "none" ? "" : " (or holds only document separators)");
  return set;
}

}  // namespace gpt
