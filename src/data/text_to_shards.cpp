// `gpt data text`: a text file becomes a validation shard (its last part) and
// training shards (the rest), byte-tokenized, each part opened by end-of-text.
#include "data/text_to_shards.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "core/check.h"
#include "data/shard.h"

namespace fs = std::filesystem;

namespace gpt {

std::vector<uint32_t> ByteTokenizer::encode(const std::string& bytes) const {
  std::vector<uint32_t> ids(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) ids[i] = static_cast<unsigned char>(bytes[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= kVocabSize)
      fail("byte tokenizer: id ", id, " at position ", i, " is outside the vocabulary [0, ", kVocabSize, ")");
    if (id < kEndOfText) out.push_back(static_cast<char>(id));
  }
  return out;
}

namespace {

std::string read_text(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) fail("text file '", path, "': does not exist or is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("text file '", path, "': cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail("text file '", path, "': read failed");
  std::string s = std::move(text).str();
  if (s.empty()) fail("text file '", path, "': is empty");
  return s;
}

// Where validation starts: the last val_fraction of the bytes, the cut moved
// forward to just after the next newline so no line is split between train
// and val. If the only newline left is the final byte, moving there would empty
// the validation part, so the cut stays mid-line.
uint64_t val_cut(const std::string& text, double val_fraction, const std::string& path) {
  const uint64_t n = text.size();
  const auto val_bytes = static_cast<uint64_t>(static_cast<double>(n) * val_fraction);
  if (val_bytes == 0)
    fail("text file '", path, "': val_fraction ", val_fraction, " of its ", n,
         " bytes leaves the validation part empty; use a larger val_fraction or a longer text");
  if (val_bytes >= n)
    fail("text file '", path, "': val_fraction ", val_fraction, " of its ", n,
         " bytes leaves the training part empty");
  uint64_t cut = n - val_bytes;
  if (text[cut - 1] != '\n') {
    const size_t nl = text.find('\n', cut);
    if (nl != std::string::npos && nl + 1 < n) cut = nl + 1;
  }
  return cut;
}

std::string dataset_name(const std::string& out_dir, const std::string& name) {
  if (!name.empty()) return name;
  // "data/kjv/" and "data/kjv" both name "kjv"; "." names the current folder.
  fs::path p = fs::absolute(out_dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  const std::string base = p.filename().string();
  if (base.empty() || base == "." || base == "..")
    fail("output folder '", out_dir, "': cannot derive a dataset name from it; give a name");
  return base;
}

std::string shard_path(const std::string& out_dir, const std::string& name, const char* split, int index) {
  std::ostringstream file;
  file << name << '_' << split << '_' << std::setw(6) << std::setfill('0') << index << ".bin";
  return (fs::path(out_dir) / file.str()).string();
}

// Tokens [a, b) of the stream [end-of-text] + text[begin, end).
std::vector<uint32_t> document_slice(const ByteTokenizer& tok, const std::string& text, uint64_t begin,
                                     uint64_t a, uint64_t b) {
  std::vector<uint32_t> tokens;
  tokens.reserve(b - a);
  if (a == 0) tokens.push_back(ByteTokenizer::kEndOfText);
  // stream position p >= 1 holds text byte begin + p - 1
  const uint64_t from = begin + std::max<uint64_t>(a, 1) - 1, to = begin + b - 1;
  const std::vector<uint32_t> bytes = tok.encode(text.substr(from, to - from));
  tokens.insert(tokens.end(), bytes.begin(), bytes.end());
  return tokens;
}

}  // namespace

TextToShardsResult text_to_shards(const std::string& in_path, const std::string& out_dir,
                                  const TextToShardsOptions& opt) {
  if (opt.tokenizer != "byte") fail("tokenizer '", opt.tokenizer, "' is not supported (allowed: byte)");
  if (!(opt.val_fraction > 0.0 && opt.val_fraction < 1.0))
    fail("val_fraction ", opt.val_fraction, " must be in (0, 1), exclusive");
  if (opt.shard_tokens == 0) fail("shard_tokens must be > 0");
  const std::string name = dataset_name(out_dir, opt.name);

  const std::string text = read_text(in_path);
  const uint64_t cut = val_cut(text, opt.val_fraction, in_path);

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) fail("output folder '", out_dir, "': cannot create (", ec.message(), ")");

  const ByteTokenizer tok;
  constexpr int kWidth = 2;  // vocab 257 fits in uint16
  TextToShardsResult result;

  // The validation part is one shard, as llm.c's scripts make it.
  const uint64_t val_len = text.size() - cut + 1;
  result.files.push_back(shard_path(out_dir, name, "val", 0));
  write_shard(result.files.back(), document_slice(tok, text, cut, 0, val_len), kWidth);
  result.val_tokens = val_len;

  const uint64_t train_len = cut + 1;
  int index = 1;
  for (uint64_t a = 0; a < train_len; a += opt.shard_tokens, ++index) {
    const uint64_t b = std::min(train_len, a + opt.shard_tokens);
    result.files.push_back(shard_path(out_dir, name, "train", index));
    write_shard(result.files.back(), document_slice(tok, text, 0, a, b), kWidth);
  }
  result.train_tokens = train_len;
  return result;
}

}  // namespace gpt
