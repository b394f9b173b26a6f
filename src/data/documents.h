// Reading text datasets as documents: one file or a folder of files, each
// split by a document separator (none, blank lines, or a regex).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace gpt {

struct DocumentSet {
  std::string text;  // every file's bytes, one after another
  struct Range {
    size_t begin, end;  // a document: text[begin, end), never empty
  };
  std::vector<Range> docs;
  std::vector<std::string> files;  // the files read, in order
};

// doc_sep: "none" (a file is one document), "blank" (runs of blank lines,
// i.e. lines of only spaces, tabs and '\r', separate documents; a document
// keeps its last newline), or "regex:RE" (every match of the PCRE2 pattern
// RE separates documents; compiled with UTF, UCP and multi-line ^ and $;
// invalid UTF-8 in the text is allowed). Separators are dropped, empty
// documents skipped. Throws gpt::Error naming the path or the separator.
DocumentSet read_documents(const std::string& path, const std::string& doc_sep);

// What --doc-sep accepts.
inline constexpr const char* kDocSepHelp =
    "none (each input file is one document), blank (blank lines separate documents), or regex:RE "
    "(each match of the PCRE2 pattern RE separates documents; ^ and $ match at line starts and ends)";

}  // namespace gpt
