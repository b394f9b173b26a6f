// Our byte-level BPE vocabulary file (docs/tokenizer.md):
//   gpt-bpe 1
//   pattern gpt2
//   vocab_size V
//   merges M               (V = 257 + M)
//   L R  # optional comment  (M lines: merge i makes id 257 + i from ids L and R)
// Ids 0..255 are the bytes, 256 is end-of-text. Lines starting with '#' and
// blank lines are skipped.
#include <charconv>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "core/files.h"
#include "tokenizer/bpe.h"
#include "tokenizer/bpe_train.h"

namespace gpt {

namespace {

constexpr const char* kMagic = "gpt-bpe 1";

// The bytes of a token for the comment of its line: printable ASCII as is,
// everything else (and '"', '\\') as \xHH.
std::string escaped(std::string_view bytes) { return quote_bytes(bytes, '"'); }

// Splits "key value" lines; the value parsed as a non-negative integer.
bool parse_uint(std::string_view s, uint64_t& v) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

BpeVocab bpe_vocab_from_merges(const std::vector<std::pair<uint32_t, uint32_t>>& merges) {
  BpeVocab v;
  v.tokens.resize(kBpeFirstMergeId + merges.size());
  for (int b = 0; b < 256; ++b) {
    v.tokens[b] = std::string(1, static_cast<char>(b));
    v.byte_id[b] = static_cast<uint32_t>(b);
  }
  v.end_of_text = kBpeEndOfText;
  v.tokens[kBpeEndOfText] = std::string(kEndOfTextText);
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto [l, r] = merges[i];
    const auto id = static_cast<uint32_t>(kBpeFirstMergeId + i);
    // Only ids made before this merge can be used (checked by the loader;
    // here an out-of-order id just leaves the bytes empty and the check in
    // BpeTokenizer catches it).
    if (l < id && r < id) v.tokens[id] = v.tokens[l] + v.tokens[r];
    v.merges.push_back({l, r, id});
  }
  return v;
}

void write_bpe_file(const std::string& path, const std::vector<std::pair<uint32_t, uint32_t>>& merges) {
  const BpeVocab v = bpe_vocab_from_merges(merges);
  std::ostringstream out;
  out << kMagic << "\npattern gpt2\nvocab_size " << v.tokens.size() << "\nmerges " << merges.size() << "\n";
  for (size_t i = 0; i < merges.size(); ++i)
    out << merges[i].first << ' ' << merges[i].second << "  # " << kBpeFirstMergeId + i << ' '
        << escaped(v.tokens[kBpeFirstMergeId + i]) << '\n';
  write_file_atomic(path, out.str());
}

std::unique_ptr<BpeTokenizer> load_bpe_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("vocabulary file '", path, "': cannot open (does it exist?)");
  std::string line;
  size_t line_no = 0;
  // The next line that is not blank or a comment; false at the end.
  auto next_line = [&](std::string_view& out) {
    while (std::getline(in, line)) {
      ++line_no;
      out = trim(line);
      if (!out.empty() && out.front() != '#') return true;
    }
    return false;
  };
  auto where = [&] { return "vocabulary file '" + path + "' line " + std::to_string(line_no); };

  std::string_view s;
  if (!next_line(s) || s != kMagic)
    fail("vocabulary file '", path, "': not a gpt BPE vocabulary (its first line must be \"", kMagic,
         "\"; GPT-2's files are loaded with --tokenizer gpt2:DIR)");
  uint64_t header[3] = {};
  const char* keys[3] = {"pattern", "vocab_size", "merges"};
  for (int k = 0; k < 3; ++k) {
    if (!next_line(s)) fail("vocabulary file '", path, "': truncated: the header ends before \"", keys[k], "\"");
    const size_t sp = s.find(' ');
    const std::string_view key = s.substr(0, sp), value = sp == std::string_view::npos ? "" : trim(s.substr(sp));
    if (key != keys[k]) fail(where(), ": expected \"", keys[k], " ...\", got \"", s, "\"");
    if (k == 0) {
      if (value != "gpt2") fail(where(), ": pattern \"", value, "\" is not supported (allowed: gpt2)");
    } else if (!parse_uint(value, header[k])) {
      fail(where(), ": ", keys[k], " \"", value, "\" is not a non-negative integer");
    }
  }
  const uint64_t vocab_size = header[1], n_merges = header[2];
  if (n_merges > (uint64_t{1} << 30)) fail("vocabulary file '", path, "': ", n_merges, " merges is implausibly many");
  if (vocab_size != kBpeFirstMergeId + n_merges)
    fail("vocabulary file '", path, "': vocab_size ", vocab_size,
         " must be 257 + merges = ", kBpeFirstMergeId + n_merges);

  std::vector<std::pair<uint32_t, uint32_t>> merges;
  merges.reserve(n_merges);
  std::vector<size_t> token_bytes(kBpeFirstMergeId, 1);  // bytes of each id so far (end-of-text is never merged)
  while (next_line(s)) {
    const std::string_view body = trim(s.substr(0, s.find('#')));
    const size_t sp = body.find_first_of(" \t");
    uint64_t l = 0, r = 0;
    if (sp == std::string_view::npos || !parse_uint(body.substr(0, sp), l) || !parse_uint(trim(body.substr(sp)), r))
      fail(where(), ": expected a merge \"LEFT RIGHT\" (two token ids), got \"", s, "\"");
    if (merges.size() == n_merges) fail(where(), ": more merges than the ", n_merges, " the header announces");
    const uint64_t id = kBpeFirstMergeId + merges.size();
    for (uint64_t x : {l, r}) {
      if (x == kBpeEndOfText) fail(where(), ": merge of id ", x, ", which is end-of-text (it cannot be merged)");
      if (x >= id)
        fail(where(), ": merge ", merges.size(), " (making id ", id, ") names id ", x,
             ", an unknown token (only ids below ", id, " exist at this point)");
    }
    // Lengths add up per merge; a chain of merges doubling a token would make
    // the tokenizer build strings of 2^n bytes.
    const size_t bytes = token_bytes[l] + token_bytes[r];
    if (bytes > kBpeMaxTokenBytes)
      fail(where(), ": merge ", merges.size(), " (making id ", id, " from ", l, " and ", r, ") makes a token of ",
           bytes, " bytes, longer than the ", kBpeMaxTokenBytes, " a vocabulary may hold");
    token_bytes.push_back(bytes);
    merges.emplace_back(static_cast<uint32_t>(l), static_cast<uint32_t>(r));
  }
  if (in.bad()) fail("vocabulary file '", path, "': read failed");
  if (merges.size() != n_merges)
    fail("vocabulary file '", path, "': truncated: the header announces ", n_merges, " merges but ", merges.size(),
         " follow");
  return std::make_unique<BpeTokenizer>(path, bpe_vocab_from_merges(merges), "vocabulary file '" + path + "'");
}

}  // namespace gpt
