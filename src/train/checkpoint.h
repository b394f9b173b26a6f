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
#pragma once
#include <cstdint>
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

void save_checkpoint(const std::string& path, const Checkpoint& ckpt);
// Validates magic, version, sizes and checksum; errors name the file.
Checkpoint load_checkpoint(const std::string& path);

}  // namespace gpt
