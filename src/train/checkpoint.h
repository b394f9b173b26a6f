// The project's checkpoint format (version 1), little-endian:
//
//   offset 0   char[8]  magic "GPTCKPT\0"
//          8   uint32   format version (1)
//         12   uint32   reserved (0)
//         16   uint64   J: byte length of the JSON header
//         24   J bytes  JSON header (UTF-8): {"config": resolved config,
//                       "step", "loader": {"seed","epoch","index"}, "adam_steps",
//                       "tensors": [{"name","dtype":"f32","shape","offset","bytes"}], ...}
//          …   zero padding to a multiple of 64
//          D   tensor payload; each tensor's "offset" is relative to D
//   end - 8    uint64   FNV-1a 64 checksum of every byte before it
//
// Files are written to PATH.tmp, flushed to disk, then renamed over PATH, so a
// crash leaves either the old checkpoint or the new one, never half of one.
//
// Both directions stream: the writer pulls each tensor through one bounded
// buffer from wherever it lives (host or backend memory, TensorSource), and
// the reader (CheckpointReader) checks the whole file, then hands out each
// tensor piece by piece, so neither ever holds a whole copy of the file.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpt {

struct CheckpointTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

struct Checkpoint {
  nlohmann::json meta;  // everything but the tensors (the "tensors" table is managed here)
  std::vector<CheckpointTensor> tensors;
  const CheckpointTensor& tensor(const std::string& name) const;  // throws naming the file's content
  bool has(const std::string& name) const;
};

constexpr uint32_t kCheckpointVersion = 1;
// The streaming writer's and reader's buffer (4 MiB).
constexpr size_t kCheckpointBufferBytes = size_t{4} << 20;

// One tensor as the streaming writer sees it: its name and shape, and a
// function that copies its values [first, first + n) to out (n is at most
// the writer's buffer; it may throw, e.g. on a value it refuses to save).
struct TensorSource {
  std::string name;
  std::vector<int64_t> shape;
  std::function<void(uint64_t first, uint64_t n, float* out)> read;
};

// Writes meta (everything but "tensors", which is made here) and the tensors
// in the format above, pulling each through one buffer of buffer_bytes
// (rounded down to whole floats; at least 64 bytes). Atomic as described
// above: on any error, including one thrown by a source, PATH.tmp is removed
// and PATH is untouched.
void write_checkpoint(const std::string& path, const nlohmann::json& meta, const std::vector<TensorSource>& tensors,
                      size_t buffer_bytes = kCheckpointBufferBytes);
// write_checkpoint of ckpt's tensors (the same bytes).
void save_checkpoint(const std::string& path, const Checkpoint& ckpt);

// A checkpoint file, checked whole on opening (magic, version, header, the
// tensor table against the file's size, and the checksum, computed by
// streaming the file through a bounded buffer) and then read tensor by
// tensor. Errors name the file.
class CheckpointReader {
 public:
  struct Entry {
    std::string name;
    std::vector<int64_t> shape;
    uint64_t offset = 0, bytes = 0;  // offset from the payload's start
    uint64_t numel() const { return bytes / sizeof(float); }
  };
  explicit CheckpointReader(const std::string& path, size_t buffer_bytes = kCheckpointBufferBytes);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& path() const { return path_; }
  const nlohmann::json& meta() const { return meta_; }  // without "tensors"
  const std::vector<Entry>& entries() const { return entries_; }
  bool has(const std::string& name) const;
  const Entry& entry(const std::string& name) const;  // throws naming the file's content
  // Values [first, first + n) of the tensor into out.
  void read(const Entry& e, uint64_t first, uint64_t n, float* out);
  // The tensor in pieces of at most the buffer: f(first, n, values), values
  // valid during the call (the reader's one buffer: f must not read through
  // this reader).
  void for_each_piece(const Entry& e, const std::function<void(uint64_t first, uint64_t n, const float* v)>& f);
  // The whole tensor.
  std::vector<float> tensor(const std::string& name);

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  std::vector<float> buf_;  // the one buffer: checksum pass and pieces
  uint64_t payload_ = 0;
  nlohmann::json meta_;
  std::vector<Entry> entries_;
};

// Every tensor of the file in memory (CheckpointReader, tensor by tensor).
Checkpoint load_checkpoint(const std::string& path);

}  // namespace gpt
