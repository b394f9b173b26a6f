// `gpt data text`: text files become a validation shard (their last part) and
// training shards (the rest), with any tokenizer, each document (and each
// part of a document the validation cut splits) opened by end-of-text.
#include "data/text_to_shards.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <spdlog/spdlog.h>

#include "core/check.h"
#include "data/documents.h"
#include "data/shard.h"
#include "tokenizer/parallel_encode.h"
#include "tokenizer/tokenizer.h"

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

}  // namespace

void split_train_val(const DocumentSet& set, double val_fraction, const std::string& path, std::vector<TextSpan>& train,
                     std::vector<TextSpan>& val, uint64_t& bytes) {
  uint64_t n = 0;
  for (const auto& d : set.docs) n += d.end - d.begin;
  bytes = n;
  const auto val_bytes = static_cast<uint64_t>(static_cast<double>(n) * val_fraction);
  if (val_bytes == 0)
    fail("text file '", path, "': val_fraction ", val_fraction, " of its ", n,
         " bytes leaves the validation part empty; use a larger val_fraction or a longer text");
  if (val_bytes >= n)
    fail("text file '", path, "': val_fraction ", val_fraction, " of its ", n, " bytes leaves the training part empty");
  const uint64_t cut = n - val_bytes;
  uint64_t at = 0;  // document bytes before docs[k]
  size_t k = 0;
  while (k < set.docs.size() && at < cut) at += set.docs[k].end - set.docs[k].begin, ++k;
  if (at >= cut && k < set.docs.size()) {
    // The cut moves forward to a document boundary.
    for (size_t i = 0; i < set.docs.size(); ++i)
      (i < k ? train : val).push_back({set.docs[i].begin, set.docs[i].end, true});
    return;
  }
  // The cut lies inside the last document.
  const auto& last = set.docs.back();
  const uint64_t last_len = last.end - last.begin;
  uint64_t local = cut - (n - last_len);
  const std::string_view doc(set.text.data() + last.begin, last_len);
  if (doc[local - 1] != '\n') {
    const size_t nl = doc.find('\n', local);
    if (nl != std::string_view::npos && nl + 1 < last_len) local = nl + 1;
  }
  for (size_t i = 0; i + 1 < set.docs.size(); ++i) train.push_back({set.docs[i].begin, set.docs[i].end, true});
  train.push_back({last.begin, last.begin + local, true});
  val.push_back({last.begin + local, last.end, true});
}

TextToShardsResult text_to_shards(const std::string& in_path, const std::string& out_dir,
                                  const TextToShardsOptions& opt) {
  if (!(opt.val_fraction > 0.0 && opt.val_fraction < 1.0))
    fail("val_fraction ", opt.val_fraction, " must be in (0, 1), exclusive");
  if (opt.shard_tokens == 0) fail("shard_tokens must be > 0");
  const std::string name = dataset_name(out_dir, opt.name);
  const std::unique_ptr<Tokenizer> tok = make_tokenizer(opt.tokenizer);

  const DocumentSet set = read_documents(in_path, opt.doc_sep);
  TextToShardsResult result;
  std::vector<TextSpan> train_spans, val_spans;
  split_train_val(set, opt.val_fraction, in_path, train_spans, val_spans, result.bytes);
  result.documents = set.docs.size();
  result.train_documents = train_spans.size();
  result.val_documents = val_spans.size();
  result.vocab_size = tok->vocab_size();
  result.width = tok->vocab_size() > 65536 ? 4 : 2;

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) fail("output folder '", out_dir, "': cannot create (", ec.message(), ")");

  // Progress lines at every tenth of a long encode.
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t all = result.bytes;
  uint64_t base = 0;  // bytes of the parts encoded before this one
  int reported = 0;
  const EncodeProgress progress = [&](uint64_t done, uint64_t) {
    if (!opt.log_progress || all < (uint64_t{8} << 20)) return;
    const uint64_t now = base + done;
    if (now * 10 < static_cast<uint64_t>(reported + 1) * all) return;
    reported = static_cast<int>(now * 10 / all);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    spdlog::info("encoding: {:3d}% of {:.1f} MB, {:.1f} MB/s", static_cast<int>(100 * now / all), all / 1e6,
                 now / 1e6 / std::max(s, 1e-9));
  };
  const std::vector<uint32_t> val = encode_spans(*tok, set.text, val_spans, progress);
  for (const auto& s : val_spans) base += s.end - s.begin;
  const std::vector<uint32_t> train = encode_spans(*tok, set.text, train_spans, progress);
  result.encode_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // The validation part is one shard, as llm.c's scripts make it.
  result.files.push_back(shard_path(out_dir, name, "val", 0));
  write_shard(result.files.back(), val, result.width);
  result.val_tokens = val.size();

  int index = 1;
  for (uint64_t a = 0; a < train.size(); a += opt.shard_tokens, ++index) {
    const uint64_t b = std::min<uint64_t>(train.size(), a + opt.shard_tokens);
    result.files.push_back(shard_path(out_dir, name, "train", index));
    write_shard(result.files.back(), std::vector<uint32_t>(train.begin() + a, train.begin() + b), result.width);
  }
  result.train_tokens = train.size();
  return result;
}

}  // namespace gpt
