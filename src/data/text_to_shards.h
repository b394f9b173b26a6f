// `gpt data text`: turns a text file into train/val token shards.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/documents.h"
#include "tokenizer/parallel_encode.h"

namespace gpt {

// Byte-level tokenizer: ids 0..255 are bytes, 256 is end-of-text. Vocab 257.
// (Kept for `gpt sample`; the same ids as make_tokenizer("byte") in
// tokenizer/tokenizer.h, which new code uses.)
struct ByteTokenizer {
  static constexpr int kEndOfText = 256;
  static constexpr int kVocabSize = 257;
  std::vector<uint32_t> encode(const std::string& bytes) const;
  // Ids >= 256 decode to nothing (end-of-text) ; throws on ids >= 257.
  std::string decode(const std::vector<int32_t>& ids) const;
};

struct TextToShardsOptions {
  std::string tokenizer = "byte";       // a tokenizer spec: byte, gpt2:DIR or a vocabulary file (tokenizer/tokenizer.h)
  double val_fraction = 0.1;            // (0, 1): about this much of the text, at its end, is validation
  std::string name;                     // file prefix; empty = basename of out_dir
  uint64_t shard_tokens = 100'000'000;  // tokens per shard at most
  // How a file splits into documents: "none" (each file is one document),
  // "blank" (blank lines separate documents) or "regex:RE" (each match of the
  // PCRE2 pattern RE, multi-line mode, separates documents).
  std::string doc_sep = "none";
  bool log_progress = false;  // progress lines (spdlog) while encoding more than 8 MB
};

struct TextToShardsResult {
  uint64_t train_tokens = 0, val_tokens = 0;
  uint64_t bytes = 0;  // document bytes encoded (separators excluded)
  uint64_t documents = 0;
  uint64_t train_documents = 0, val_documents = 0;  // a document split by the cut counts in both
  uint32_t vocab_size = 0;
  int width = 2;              // bytes per token in the shards
  double encode_seconds = 0;  // time spent encoding
  std::vector<std::string> files;
};

// The documents as train and val spans of set.text, each opened by
// end-of-text, cut as text_to_shards describes below; bytes = the documents'
// total. Throws if either part would be empty (errors name path).
void split_train_val(const DocumentSet& set, double val_fraction, const std::string& path, std::vector<TextSpan>& train,
                     std::vector<TextSpan>& val, uint64_t& bytes);

// in_path is a text file, or a folder whose regular files (in name order,
// hidden ones skipped) are read one after another; no document spans two
// files. Every document is preceded by end-of-text. Validation is a tail of
// whole documents, those starting at or after the point val_fraction of the
// bytes from the end; if that point lies in the last document, that
// document is cut at the next line boundary instead (val keeps at least a
// byte) and the tail is opened by its own end-of-text. Writes
// OUT/NAME_val_000000.bin and OUT/NAME_train_000001.bin (and further train
// shards past shard_tokens), uint16 ids for vocabularies up to 65536 and
// uint32 above. Creates out_dir. Encodes on all OpenMP threads.
TextToShardsResult text_to_shards(const std::string& in_path, const std::string& out_dir,
                                  const TextToShardsOptions& opt);

}  // namespace gpt
