// Token shards in llm.c's format (../shared/docs/formats.md): a 256-int32
// header (magic, version, token count), then uint16 (magic 20240520, version 1)
// or uint32 (magic 20240801, version 7) token ids. 64-bit offsets throughout.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gpt {

struct ShardInfo {
  std::string path;
  int width = 2;        // bytes per token: 2 or 4
  uint64_t ntokens = 0;
};

// Reads and validates a shard header: file exists and is readable, magic and
// version match one of the two formats, the size equals 1024 + width*n.
// Throws gpt::Error naming the file and what is wrong.
ShardInfo read_shard_header(const std::string& path);

// Writes a shard (width 2 needs every id < 65536), to path.tmp then renamed.
void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, int width);

// Files matching a glob pattern, sorted. Throws if none matches.
std::vector<std::string> glob_files(const std::string& pattern);

class ShardFiles;  // open descriptors of a stream's shards (shard.cpp)

// All shards matching a pattern, seen as one stream of tokens. Shards are
// opened on first use and kept open; copies share them. read() is thread-safe.
class TokenStream {
 public:
  // Validates every shard header; vocab_size bounds the ids (checked on read).
  TokenStream(const std::string& pattern, int vocab_size);
  uint64_t size() const { return total_; }
  const std::vector<ShardInfo>& shards() const { return shards_; }
  // Copies tokens [offset, offset+n) of the stream into out (may cross shard
  // boundaries). Throws if out of range or if an id >= vocab_size (naming the
  // shard, the position and the id).
  void read(uint64_t offset, uint64_t n, int32_t* out) const;
  // Tokens [begin, end) of this stream as a stream of its own (the same
  // files; offsets start at 0). Throws if the range is outside the stream.
  TokenStream slice(uint64_t begin, uint64_t end) const;

 private:
  uint64_t base_ = 0;  // offset of this stream's token 0 in the shards (slices)
  std::vector<ShardInfo> shards_;
  std::vector<uint64_t> starts_;  // stream offset of each shard's first token
  uint64_t total_ = 0;
  int vocab_size_;
  std::shared_ptr<ShardFiles> files_;
};

}  // namespace gpt
