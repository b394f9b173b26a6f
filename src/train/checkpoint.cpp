#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/check.h"
#include "core/json.h"

namespace gpt {
namespace {

constexpr char kMagic[8] = {'G', 'P', 'T', 'C', 'K', 'P', 'T', '\0'};
constexpr size_t kFixedHeader = 24;

struct Fnv1a {
  uint64_t h = 0xcbf29ce484222325ull;
  void update(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  }
};

size_t round_up64(size_t n) { return (n + 63) / 64 * 64; }

// Writes through a FILE*, hashing what it writes.
struct HashingWriter {
  FILE* f;
  std::string path;
  Fnv1a hash;
  void write(const void* data, size_t n) {
    if (n == 0) return;
    GPT_CHECK(std::fwrite(data, 1, n, f) == n, "checkpoint: write to ", path, " failed: ", std::strerror(errno));
    hash.update(data, n);
  }
};

void fsync_path(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

const CheckpointTensor& Checkpoint::tensor(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return t;
  fail("checkpoint has no tensor \"", name, "\"");
}

bool Checkpoint::has(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return true;
  return false;
}

void save_checkpoint(const std::string& path, const Checkpoint& ckpt) {
  nlohmann::json meta = ckpt.meta;
  nlohmann::json table = nlohmann::json::array();
  uint64_t offset = 0;
  for (const auto& t : ckpt.tensors) {
    uint64_t numel = 1;
    for (auto d : t.shape) numel *= static_cast<uint64_t>(d);
    GPT_CHECK(numel == t.data.size(), "checkpoint: tensor ", t.name, " has ", t.data.size(),
              " values but its shape says ", numel);
    const uint64_t bytes = numel * sizeof(float);
    table.push_back({{"name", t.name}, {"dtype", "f32"}, {"shape", t.shape}, {"offset", offset}, {"bytes", bytes}});
    offset += round_up64(bytes);
  }
  meta["tensors"] = table;
  const std::string json = meta.dump();

  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  GPT_CHECK(f, "checkpoint: cannot create ", tmp, ": ", std::strerror(errno));
  HashingWriter w{f, tmp, {}};
  try {
    const uint32_t version = kCheckpointVersion, reserved = 0;
    const uint64_t json_len = json.size();
    w.write(kMagic, 8);
    w.write(&version, 4);
    w.write(&reserved, 4);
    w.write(&json_len, 8);
    w.write(json.data(), json.size());
    static const char zeros[64] = {};
    w.write(zeros, round_up64(kFixedHeader + json.size()) - (kFixedHeader + json.size()));
    for (const auto& t : ckpt.tensors) {
      const size_t bytes = t.data.size() * sizeof(float);
      w.write(t.data.data(), bytes);
      w.write(zeros, round_up64(bytes) - bytes);
    }
    const uint64_t checksum = w.hash.h;
    GPT_CHECK(std::fwrite(&checksum, 1, 8, f) == 8, "checkpoint: write to ", tmp, " failed");
    GPT_CHECK(std::fflush(f) == 0, "checkpoint: flush of ", tmp, " failed: ", std::strerror(errno));
    ::fsync(::fileno(f));
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  GPT_CHECK(std::fclose(f) == 0, "checkpoint: closing ", tmp, " failed: ", std::strerror(errno));
  GPT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "checkpoint: rename ", tmp, " -> ", path,
            " failed: ", std::strerror(errno));
  fsync_path(target.has_parent_path() ? target.parent_path().string() : ".", O_RDONLY | O_DIRECTORY);
}

namespace {

// The whole file, after checking that it is a regular file that starts like
// a checkpoint (so that a wrong path never reads a huge or endless input).
std::vector<char> read_checkpoint_file(const std::string& path) {
  std::error_code ec;
  GPT_CHECK(std::filesystem::exists(path, ec), "checkpoint: cannot open ", path, ": no such file");
  GPT_CHECK(std::filesystem::is_regular_file(path, ec), "checkpoint: ", path, " is not a regular file");
  std::ifstream in(path, std::ios::binary);
  GPT_CHECK(in, "checkpoint: cannot open ", path, ": ", std::strerror(errno));
  const uint64_t size = std::filesystem::file_size(path, ec);
  GPT_CHECK(!ec && size >= kFixedHeader + 8, "checkpoint: ", path, " is too short (", size,
            " bytes) to be a checkpoint");
  std::vector<char> buf(kFixedHeader);
  in.read(buf.data(), kFixedHeader);
  GPT_CHECK(in, "checkpoint: cannot read ", path);
  GPT_CHECK(std::memcmp(buf.data(), kMagic, 8) == 0, "checkpoint: ", path,
            " is not a gpt checkpoint (bad magic; expected \"GPTCKPT\")");
  buf.resize(size);
  in.read(buf.data() + kFixedHeader, static_cast<std::streamsize>(size - kFixedHeader));
  GPT_CHECK(in, "checkpoint: cannot read ", path);
  return buf;
}

nlohmann::json parse_header(const std::string& path, const char* data, size_t size, size_t* payload_start) {
  GPT_CHECK(size >= kFixedHeader + 8, "checkpoint: ", path, " is too short (", size,
            " bytes) to be a checkpoint");
  GPT_CHECK(std::memcmp(data, kMagic, 8) == 0, "checkpoint: ", path,
            " is not a gpt checkpoint (bad magic; expected \"GPTCKPT\")");
  uint32_t version;
  std::memcpy(&version, data + 8, 4);
  GPT_CHECK(version == kCheckpointVersion, "checkpoint: ", path, " has format version ", version,
            "; this build reads version ", kCheckpointVersion);
  uint64_t json_len;
  std::memcpy(&json_len, data + 16, 8);
  GPT_CHECK(json_len <= size - kFixedHeader, "checkpoint: ", path, " is truncated (header length ", json_len,
            " exceeds the file)");
  nlohmann::json meta;
  try {
    meta = parse_json(std::string_view(data + kFixedHeader, json_len), "header", {.comments = false});
  } catch (const Error& e) {
    fail("checkpoint: ", path, " has a corrupt JSON header: ", e.what());
  }
  *payload_start = round_up64(kFixedHeader + json_len);
  return meta;
}

}  // namespace

Checkpoint load_checkpoint(const std::string& path) {
  const std::vector<char> buf = read_checkpoint_file(path);
  size_t payload = 0;
  Checkpoint ckpt;
  ckpt.meta = parse_header(path, buf.data(), buf.size(), &payload);
  Fnv1a hash;
  hash.update(buf.data(), buf.size() - 8);
  uint64_t stored;
  std::memcpy(&stored, buf.data() + buf.size() - 8, 8);
  GPT_CHECK(stored == hash.h, "checkpoint: ", path, " is corrupt or truncated (checksum mismatch)");
  GPT_CHECK(ckpt.meta.is_object() && ckpt.meta.contains("tensors") && ckpt.meta["tensors"].is_array(),
            "checkpoint: ", path, " has no tensor table");
  const uint64_t payload_end = buf.size() - 8;
  GPT_CHECK(payload <= payload_end, "checkpoint: ", path, " is truncated (no room for tensors)");
  const uint64_t room = payload_end - payload;  // bytes available to the tensors
  // The whole table is checked before any tensor is allocated: every entry
  // inside the payload, no name twice, no two entries sharing bytes (a small
  // file whose entries alias one offset must not make the reader allocate
  // many times its size).
  struct Entry {
    std::string name;
    std::vector<int64_t> shape;
    uint64_t offset, bytes;
  };
  std::vector<Entry> entries;
  try {
    for (const auto& e : ckpt.meta["tensors"]) {
      Entry t;
      t.name = e.at("name").get<std::string>();
      t.shape = e.at("shape").get<std::vector<int64_t>>();
      GPT_CHECK(e.at("dtype") == "f32", "checkpoint: ", path, ": tensor ", t.name, " has unsupported dtype ",
                e.at("dtype"));
      t.offset = e.at("offset").get<uint64_t>();
      t.bytes = e.at("bytes").get<uint64_t>();
      // Every bound is checked before it is multiplied or added, so a crafted
      // table can neither overflow the arithmetic nor point outside the file.
      uint64_t numel = 1;
      for (int64_t d : t.shape) {
        GPT_CHECK(d > 0 && static_cast<uint64_t>(d) <= room / sizeof(float) / numel, "checkpoint: ", path,
                  ": tensor ", t.name, " has an invalid shape");
        numel *= static_cast<uint64_t>(d);
      }
      GPT_CHECK(t.bytes == numel * sizeof(float) && t.offset <= room && t.bytes <= room - t.offset, "checkpoint: ",
                path, ": tensor ", t.name, " does not fit the file");
      entries.push_back(std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint: ", path, " has a malformed tensor table: ", e.what());
  }
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->name < b->name;
  });
  std::set<std::string> names;
  for (size_t i = 0; i < by_offset.size(); ++i) {
    GPT_CHECK(names.insert(by_offset[i]->name).second, "checkpoint: ", path, ": tensor ", by_offset[i]->name,
              " appears twice in the tensor table");
    if (i > 0)
      GPT_CHECK(by_offset[i - 1]->offset + by_offset[i - 1]->bytes <= by_offset[i]->offset, "checkpoint: ", path,
                ": tensors ", by_offset[i - 1]->name, " and ", by_offset[i]->name,
                " overlap in the file (a corrupt or crafted tensor table)");
  }
  for (Entry& e : entries) {
    CheckpointTensor t;
    t.name = std::move(e.name);
    t.shape = std::move(e.shape);
    t.data.resize(e.bytes / sizeof(float));
    std::memcpy(t.data.data(), buf.data() + payload + e.offset, e.bytes);
    ckpt.tensors.push_back(std::move(t));
  }
  ckpt.meta.erase("tensors");
  return ckpt;
}

}  // namespace gpt
