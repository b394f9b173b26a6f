// Token shards in llm.c's format (docs/formats.md): a 256-int32
// header (magic, version, token count), then uint16 (magic 20240520, version 1)
// or uint32 (magic 20240801, version 7) token ids. 64-bit offsets throughout.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tokens.h"

namespace gpt {

struct ShardInfo {
  std::string path;
  int width = 2;  // bytes per token: 2 or 4
  uint64_t ntokens = 0;
};

// Reads and validates a shard header: file exists and is readable, magic and
// version match one of the two formats, the size equals 1024 + width*n.
// Throws gpt::Error naming the file and what is wrong.
ShardInfo read_shard_header(const std::string& path);

// Writes a shard (width 2 needs every id < 65536), to path.tmp then renamed.
void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, int width);

// Loss masks (docs in README "Loss masks"): a mask shard beside a token shard
// says which of its tokens are scored as targets. Same 256-int32 header
// (magic 20261202, version 1, count n), then n bytes, each 0 (not scored) or
// 1 (scored). Byte i belongs to token i of the shard: when token i is the
// target of position i-1, that position's loss counts iff byte i is 1. The
// mask of SHARD.bin is SHARD.mask (SHARD + ".mask" for other names), so a
// "*.bin" pattern never takes a mask for a token shard.
std::string mask_path_for(const std::string& shard_path);
// Validates a mask shard's header against its token shard's count; returns n.
uint64_t read_mask_header(const std::string& path, uint64_t expected_tokens);
// Writes a mask shard (every byte 0 or 1), to path.tmp then renamed.
void write_mask_shard(const std::string& path, const std::vector<uint8_t>& mask);

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
  // Whether the shards carry loss masks (all of them or none: a stream where
  // only some do is refused at construction, naming the first without).
  bool has_masks() const { return mask_files_ != nullptr; }
  // Mask bytes [offset, offset+n) (1 = scored); all 1 when there are no
  // masks. Throws on a byte other than 0 or 1, naming the file and position.
  void read_mask(uint64_t offset, uint64_t n, uint8_t* out) const;
  // Reads tokens [offset, offset+n+1) and writes the n inputs and n targets
  // they make, each target that the mask does not score replaced by
  // kIgnoreTarget. Returns the number of scored targets.
  uint64_t read_example(uint64_t offset, uint64_t n, int32_t* inputs, int32_t* targets) const;

 private:
  uint64_t base_ = 0;  // offset of this stream's token 0 in the shards (slices)
  std::vector<ShardInfo> shards_;
  std::vector<uint64_t> starts_;  // stream offset of each shard's first token
  uint64_t total_ = 0;
  int vocab_size_;
  std::shared_ptr<ShardFiles> files_;
  std::shared_ptr<ShardFiles> mask_files_;  // null without masks
};

}  // namespace gpt
