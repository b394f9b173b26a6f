// `gpt data text`: turns a text file into train/val token shards.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

// Byte-level tokenizer: ids 0..255 are bytes, 256 is end-of-text. Vocab 257.
struct ByteTokenizer {
  static constexpr int kEndOfText = 256;
  static constexpr int kVocabSize = 257;
  std::vector<uint32_t> encode(const std::string& bytes) const;
  // Ids >= 256 decode to nothing (end-of-text) ; throws on ids >= 257.
  std::string decode(const std::vector<int32_t>& ids) const;
};

struct TextToShardsOptions {
  std::string tokenizer = "byte";  // only "byte" in issue "Core"
  double val_fraction = 0.1;       // (0, 1): the last fraction of the text, cut at a line boundary
  std::string name;                // file prefix; empty = basename of out_dir
  uint64_t shard_tokens = 100'000'000;  // tokens per shard at most
};

struct TextToShardsResult {
  uint64_t train_tokens = 0, val_tokens = 0;
  std::vector<std::string> files;
};

// Writes OUT/NAME_val_000000.bin and OUT/NAME_train_000001.bin (and further
// train shards past shard_tokens), each document preceded by end-of-text
// (the whole file is one document in issue "Core"). Creates out_dir.
TextToShardsResult text_to_shards(const std::string& in_path, const std::string& out_dir,
                                  const TextToShardsOptions& opt);

}  // namespace gpt
