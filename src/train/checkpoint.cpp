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

void write_checkpoint(const std::string& path, const nlohmann::json& meta_in, const std::vector<TensorSource>& tensors,
                      size_t buffer_bytes) {
  nlohmann::json meta = meta_in;
  nlohmann::json table = nlohmann::json::array();
  uint64_t offset = 0, largest = 0;
  for (const auto& t : tensors) {
    uint64_t numel = 1;
    for (auto d : t.shape) numel *= static_cast<uint64_t>(d);
    const uint64_t bytes = numel * sizeof(float);
    largest = std::max(largest, numel);
    table.push_back({{"name", t.name}, {"dtype", "f32"}, {"shape", t.shape}, {"offset", offset}, {"bytes", bytes}});
    offset += round_up64(bytes);
  }
  meta["tensors"] = table;
  const std::string json = meta.dump();
  const size_t chunk = std::max<size_t>(buffer_bytes, 64) / sizeof(float);

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
    // The one buffer every tensor passes through.
    std::vector<float> buf(std::min<uint64_t>(chunk, largest));
    for (size_t k = 0; k < tensors.size(); ++k) {
      const uint64_t numel = table[k]["bytes"].get<uint64_t>() / sizeof(float);
      for (uint64_t first = 0; first < numel; first += buf.size()) {
        const uint64_t n = std::min<uint64_t>(numel - first, buf.size());
        tensors[k].read(first, n, buf.data());
        w.write(buf.data(), n * sizeof(float));
      }
      const size_t bytes = numel * sizeof(float);
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

void save_checkpoint(const std::string& path, const Checkpoint& ckpt) {
  std::vector<TensorSource> sources;
  for (const auto& t : ckpt.tensors) {
    uint64_t numel = 1;
    for (auto d : t.shape) numel *= static_cast<uint64_t>(d);
    GPT_CHECK(numel == t.data.size(), "checkpoint: tensor ", t.name, " has ", t.data.size(),
              " values but its shape says ", numel);
    const float* data = t.data.data();
    sources.push_back({t.name, t.shape, [data](uint64_t first, uint64_t n, float* out) {
                         std::memcpy(out, data + first, n * sizeof(float));
                       }});
  }
  write_checkpoint(path, ckpt.meta, sources);
}

namespace {

nlohmann::json parse_header_json(const std::string& path, const char* data, size_t len) {
  try {
    return parse_json(std::string_view(data, len), "header", {.comments = false});
  } catch (const Error& e) {
    fail("checkpoint: ", path, " has a corrupt JSON header: ", e.what());
  }
}

}  // namespace

CheckpointReader::CheckpointReader(const std::string& path, size_t buffer_bytes) : path_(path) {
  // A regular file that starts like a checkpoint, before anything is read in
  // bulk (so that a wrong path never reads a huge or endless input).
  std::error_code ec;
  GPT_CHECK(std::filesystem::exists(path, ec), "checkpoint: cannot open ", path, ": no such file");
  GPT_CHECK(std::filesystem::is_regular_file(path, ec), "checkpoint: ", path, " is not a regular file");
  f_ = std::fopen(path.c_str(), "rb");
  GPT_CHECK(f_, "checkpoint: cannot open ", path, ": ", std::strerror(errno));
  try {
    const uint64_t size = std::filesystem::file_size(path, ec);
    GPT_CHECK(!ec && size >= kFixedHeader + 8, "checkpoint: ", path, " is too short (", size,
              " bytes) to be a checkpoint");
    char fixed[kFixedHeader];
    GPT_CHECK(std::fread(fixed, 1, kFixedHeader, f_) == kFixedHeader, "checkpoint: cannot read ", path);
    GPT_CHECK(std::memcmp(fixed, kMagic, 8) == 0, "checkpoint: ", path,
              " is not a gpt checkpoint (bad magic; expected \"GPTCKPT\")");
    uint32_t version;
    std::memcpy(&version, fixed + 8, 4);
    GPT_CHECK(version == kCheckpointVersion, "checkpoint: ", path, " has format version ", version,
              "; this build reads version ", kCheckpointVersion);
    uint64_t json_len;
    std::memcpy(&json_len, fixed + 16, 8);
    GPT_CHECK(json_len <= size - kFixedHeader - 8, "checkpoint: ", path, " is truncated (header length ", json_len,
              " exceeds the file)");
    // The checksum over every byte before the last 8, streamed; the header's
    // bytes are kept as they pass.
    std::string header(json_len, '\0');
    Fnv1a hash;
    hash.update(fixed, kFixedHeader);
    buf_.resize(std::min<uint64_t>(std::max<size_t>(buffer_bytes, 64) / sizeof(float), (size + 3) / 4));
    char* buf = reinterpret_cast<char*>(buf_.data());
    const size_t buf_bytes = buf_.size() * sizeof(float);
    uint64_t pos = kFixedHeader;
    const uint64_t hashed_end = size - 8;
    while (pos < hashed_end) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf_bytes, hashed_end - pos));
      GPT_CHECK(std::fread(buf, 1, n, f_) == n, "checkpoint: cannot read ", path, " (it changed or shrank)");
      hash.update(buf, n);
      if (pos < kFixedHeader + json_len) {
        const uint64_t take = std::min<uint64_t>(n, kFixedHeader + json_len - pos);
        std::memcpy(header.data() + (pos - kFixedHeader), buf, take);
      }
      pos += n;
    }
    uint64_t stored;
    GPT_CHECK(std::fread(&stored, 1, 8, f_) == 8, "checkpoint: cannot read ", path);
    GPT_CHECK(stored == hash.h, "checkpoint: ", path, " is corrupt or truncated (checksum mismatch)");
    meta_ = parse_header_json(path, header.data(), header.size());
    payload_ = round_up64(kFixedHeader + json_len);
    GPT_CHECK(meta_.is_object() && meta_.contains("tensors") && meta_["tensors"].is_array(), "checkpoint: ", path,
              " has no tensor table");
    const uint64_t payload_end = size - 8;
    GPT_CHECK(payload_ <= payload_end, "checkpoint: ", path, " is truncated (no room for tensors)");
    const uint64_t room = payload_end - payload_;  // bytes available to the tensors
    // The whole table is checked before any tensor is read: every entry
    // inside the payload, no name twice, no two entries sharing bytes (a
    // small file whose entries alias one offset must not make a reader
    // allocate many times its size).
    try {
      for (const auto& e : meta_["tensors"]) {
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
        GPT_CHECK(t.bytes == numel * sizeof(float) && t.offset <= room && t.bytes <= room - t.offset,
                  "checkpoint: ", path, ": tensor ", t.name, " does not fit the file");
        entries_.push_back(std::move(t));
      }
    } catch (const nlohmann::json::exception& e) {
      fail("checkpoint: ", path, " has a malformed tensor table: ", e.what());
    }
    std::vector<const Entry*> by_offset;
    for (const Entry& e : entries_) by_offset.push_back(&e);
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
    meta_.erase("tensors");
  } catch (...) {
    std::fclose(f_);
    throw;
  }
}

CheckpointReader::~CheckpointReader() {
  if (f_) std::fclose(f_);
}

bool CheckpointReader::has(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return true;
  return false;
}

const CheckpointReader::Entry& CheckpointReader::entry(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return e;
  fail("checkpoint ", path_, " has no tensor \"", name, "\"");
}

void CheckpointReader::read(const Entry& e, uint64_t first, uint64_t n, float* out) {
  GPT_CHECK(first <= e.numel() && n <= e.numel() - first, "checkpoint ", path_, ": values ", first, "..", first + n,
            " of tensor ", e.name, " are outside its ", e.numel());
  if (n == 0) return;
  const uint64_t at = payload_ + e.offset + first * sizeof(float);
  GPT_CHECK(::fseeko(f_, static_cast<off_t>(at), SEEK_SET) == 0 && std::fread(out, sizeof(float), n, f_) == n,
            "checkpoint: cannot read tensor ", e.name, " of ", path_, " (the file changed or shrank)");
}

void CheckpointReader::for_each_piece(const Entry& e,
                                      const std::function<void(uint64_t first, uint64_t n, const float* v)>& f) {
  for (uint64_t first = 0; first < e.numel(); first += buf_.size()) {
    const uint64_t n = std::min<uint64_t>(buf_.size(), e.numel() - first);
    read(e, first, n, buf_.data());
    f(first, n, buf_.data());
  }
}

std::vector<float> CheckpointReader::tensor(const std::string& name) {
  const Entry& e = entry(name);
  std::vector<float> v(e.numel());
  read(e, 0, v.size(), v.data());
  return v;
}

Checkpoint load_checkpoint(const std::string& path) {
  CheckpointReader r(path);
  Checkpoint ckpt;
  ckpt.meta = r.meta();
  for (const auto& e : r.entries()) ckpt.tensors.push_back({e.name, e.shape, r.tensor(e.name)});
  return ckpt;
}

}  // namespace gpt
