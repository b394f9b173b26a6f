// Token shards: header validation, writing, and reading a set of shards as one
// stream. POSIX open/pread/fstat give 64-bit offsets on every 64-bit Linux, so
// shards over 2 GiB read correctly (llm.c's fseek with long int does not).
#include "data/shard.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "core/check.h"

namespace gpt {

static_assert(std::endian::native == std::endian::little, "shards are little-endian and read without byte swapping");

namespace {

constexpr int kHeaderInts = 256;
constexpr uint64_t kHeaderBytes = kHeaderInts * sizeof(int32_t);
constexpr int32_t kMagic16 = 20240520, kVersion16 = 1;      // uint16 tokens
constexpr int32_t kMagic32 = 20240801, kVersion32 = 7;      // uint32 tokens
constexpr int32_t kMaskMagic = 20261202, kMaskVersion = 1;  // loss masks, one byte per token

// Reads exactly len bytes at off; pread may return fewer, and EINTR retries.
void pread_exact(int fd, void* dst, size_t len, uint64_t off, const std::string& path) {
  auto* p = static_cast<char*>(dst);
  while (len > 0) {
    const ssize_t got = ::pread(fd, p, len, static_cast<off_t>(off));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail("shard '", path, "': read failed at byte ", off, " (", std::strerror(errno), ")");
    if (got == 0) fail("shard '", path, "': unexpected end of file at byte ", off, " (was it changed while in use?)");
    p += got;
    len -= static_cast<size_t>(got);
    off += static_cast<uint64_t>(got);
  }
}

int open_shard(const std::string& path) {
  // O_NONBLOCK: a FIFO named by a glob must not block the open (fstat then refuses it).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("shard '", path, "': cannot open (", std::strerror(errno), ")");
  return fd;
}

}  // namespace

// One descriptor per shard, opened on first use. A cap on open descriptors
// keeps a dataset of thousands of shards under the process's file limit.
class ShardFiles {
 public:
  explicit ShardFiles(std::vector<std::string> paths) : paths_(std::move(paths)), fds_(paths_.size(), -1) {}
  ~ShardFiles() { close_all(); }
  ShardFiles(const ShardFiles&) = delete;
  ShardFiles& operator=(const ShardFiles&) = delete;

  void read(size_t shard, uint64_t byte_offset, size_t len, void* dst) {
    std::lock_guard<std::mutex> lock(mu_);
    pread_exact(fd(shard), dst, len, byte_offset, paths_[shard]);
  }

 private:
  static constexpr size_t kMaxOpen = 64;

  int fd(size_t shard) {
    if (fds_[shard] < 0) {
      if (nopen_ >= kMaxOpen) close_all();
      fds_[shard] = open_shard(paths_[shard]);
      ++nopen_;
    }
    return fds_[shard];
  }
  void close_all() {
    for (int& f : fds_)
      if (f >= 0) ::close(f), f = -1;
    nopen_ = 0;
  }

  std::vector<std::string> paths_;
  std::vector<int> fds_;
  size_t nopen_ = 0;
  std::mutex mu_;
};

namespace {

// Opens a regular file of at least the header's size and reads the header;
// returns the file's size. `kind` names the file in errors ("shard", "mask").
uint64_t read_header(const std::string& path, const char* kind, int32_t (&header)[kHeaderInts]) {
  const int fd = open_shard(path);
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(kind, " '", path, "': cannot stat (", std::strerror(errno), ")");
  if (!S_ISREG(st.st_mode)) fail(kind, " '", path, "': not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes)
    fail(kind, " '", path, "': file is ", size, " bytes, shorter than the ", kHeaderBytes, "-byte header");
  pread_exact(fd, header, sizeof(header), 0, path);
  return size;
}

}  // namespace

ShardInfo read_shard_header(const std::string& path) {
  int32_t header[kHeaderInts];
  const uint64_t size = read_header(path, "shard", header);
  const int32_t magic = header[0], version = header[1], count = header[2];

  ShardInfo info;
  info.path = path;
  int32_t want_version = 0;
  if (magic == kMagic16) {
    info.width = 2, want_version = kVersion16;
  } else if (magic == kMagic32) {
    info.width = 4, want_version = kVersion32;
  } else if (magic == kMaskMagic) {
    fail("shard '", path,
         "' is a loss mask, not a token shard: name the token shards (a pattern such as "
         "'DIR/*.bin'); each one's mask is found beside it");
  } else {
    fail("shard '", path, "': magic ", magic, " is not a token shard (expected ", kMagic16, " for uint16 tokens or ",
         kMagic32, " for uint32 tokens)");
  }
  if (version != want_version)
    fail("shard '", path, "': version ", version, " does not match magic ", magic, " (expected version ", want_version,
         ")");
  if (count <= 0) fail("shard '", path, "': token count ", count, " in the header must be > 0");

  info.ntokens = static_cast<uint64_t>(count);
  const uint64_t expected = kHeaderBytes + static_cast<uint64_t>(info.width) * info.ntokens;
  if (size != expected)
    fail("shard '", path, "': file size is ", size, " bytes but the header's ", info.ntokens, " tokens of ", info.width,
         " bytes need ", kHeaderBytes, " + ", info.width, "*", info.ntokens, " = ", expected, " bytes");
  return info;
}

namespace {

void check_writable(const std::string& path, const std::vector<uint32_t>& tokens, int width) {
  if (width != 2 && width != 4) fail("write_shard '", path, "': width ", width, " must be 2 or 4");
  if (tokens.empty()) fail("write_shard '", path, "': no tokens (a shard holds at least one)");
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    fail("write_shard '", path, "': ", tokens.size(), " tokens exceed the header's limit of ", INT32_MAX);
  if (width == 2) {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] > UINT16_MAX)
        fail("write_shard '", path, "': token id ", tokens[i], " at position ", i,
             " does not fit in uint16 (width 2 needs ids < 65536; use width 4)");
  }
}

// Writes header and payload to an open file; false on any short write.
bool write_payload(FILE* f, const std::vector<uint32_t>& tokens, int width) {
  int32_t header[kHeaderInts] = {};
  header[0] = width == 2 ? kMagic16 : kMagic32;
  header[1] = width == 2 ? kVersion16 : kVersion32;
  header[2] = static_cast<int32_t>(tokens.size());
  if (std::fwrite(header, sizeof(header), 1, f) != 1) return false;
  if (width == 4) return std::fwrite(tokens.data(), 4, tokens.size(), f) == tokens.size();

  // Narrow in blocks so a large shard needs no second full-size buffer.
  constexpr size_t kBlock = 1 << 16;
  std::vector<uint16_t> narrow(std::min(kBlock, tokens.size()));
  for (size_t i = 0; i < tokens.size(); i += kBlock) {
    const size_t n = std::min(kBlock, tokens.size() - i);
    for (size_t j = 0; j < n; ++j) narrow[j] = static_cast<uint16_t>(tokens[i + j]);
    if (std::fwrite(narrow.data(), 2, n, f) != n) return false;
  }
  return true;
}

}  // namespace

void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, int width) {
  check_writable(path, tokens, width);
  // Written aside and renamed, so a reader (or a crash) never sees half a shard.
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("write_shard '", path, "': cannot create '", tmp, "' (", std::strerror(errno), ")");
  const bool wrote = write_payload(f, tokens, width);
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    std::remove(tmp.c_str());
    fail("write_shard '", path, "': writing '", tmp, "' failed (", std::strerror(wrote ? errno : err), ")");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_err = errno;
    std::remove(tmp.c_str());
    fail("write_shard '", path, "': cannot rename '", tmp, "' into place (", std::strerror(rename_err), ")");
  }
}

std::string mask_path_for(const std::string& shard_path) {
  const std::string ext = ".bin";
  if (shard_path.size() > ext.size() && shard_path.compare(shard_path.size() - ext.size(), ext.size(), ext) == 0)
    return shard_path.substr(0, shard_path.size() - ext.size()) + ".mask";
  return shard_path + ".mask";
}

uint64_t read_mask_header(const std::string& path, uint64_t expected_tokens) {
  int32_t header[kHeaderInts];
  const uint64_t size = read_header(path, "mask", header);
  if (header[0] != kMaskMagic)
    fail("mask '", path, "': magic ", header[0], " is not a loss-mask shard (expected ", kMaskMagic, ")");
  if (header[1] != kMaskVersion)
    fail("mask '", path, "': version ", header[1], " is not supported (expected ", kMaskVersion, ")");
  if (header[2] <= 0) fail("mask '", path, "': count ", header[2], " in the header must be > 0");
  const uint64_t n = static_cast<uint64_t>(header[2]);
  if (size != kHeaderBytes + n)
    fail("mask '", path, "': file size is ", size, " bytes but the header's ", n, " entries need ", kHeaderBytes, " + ",
         n, " = ", kHeaderBytes + n, " bytes");
  if (n != expected_tokens)
    fail("mask '", path, "': holds ", n, " entries but its token shard holds ", expected_tokens,
         " tokens (one mask byte per token)");
  return n;
}

void write_mask_shard(const std::string& path, const std::vector<uint8_t>& mask) {
  if (mask.empty()) fail("write_mask_shard '", path, "': no entries (a mask holds at least one)");
  if (mask.size() > static_cast<size_t>(INT32_MAX))
    fail("write_mask_shard '", path, "': ", mask.size(), " entries exceed the header's limit of ", INT32_MAX);
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i] > 1) fail("write_mask_shard '", path, "': entry ", i, " is ", int(mask[i]), " (must be 0 or 1)");
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("write_mask_shard '", path, "': cannot create '", tmp, "' (", std::strerror(errno), ")");
  int32_t header[kHeaderInts] = {};
  header[0] = kMaskMagic, header[1] = kMaskVersion, header[2] = static_cast<int32_t>(mask.size());
  const bool wrote =
      std::fwrite(header, sizeof(header), 1, f) == 1 && std::fwrite(mask.data(), 1, mask.size(), f) == mask.size();
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    std::remove(tmp.c_str());
    fail("write_mask_shard '", path, "': writing '", tmp, "' failed (", std::strerror(wrote ? errno : err), ")");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_err = errno;
    std::remove(tmp.c_str());
    fail("write_mask_shard '", path, "': cannot rename '", tmp, "' into place (", std::strerror(rename_err), ")");
  }
}

std::vector<std::string> glob_files(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && files.empty())) fail("no file matches the pattern '", pattern, "'");
  if (rc != 0) fail("cannot expand the pattern '", pattern, "' (glob error ", rc, ")");
  // glob sorts by the locale's collation; byte order is the same everywhere.
  std::sort(files.begin(), files.end());
  return files;
}

TokenStream::TokenStream(const std::string& pattern, int vocab_size) : vocab_size_(vocab_size) {
  GPT_CHECK(vocab_size > 0, "vocab_size ", vocab_size, " must be > 0");
  std::vector<std::string> paths = glob_files(pattern);
  for (const std::string& p : paths) {
    shards_.push_back(read_shard_header(p));
    starts_.push_back(total_);
    total_ += shards_.back().ntokens;
  }
  // Masks: all shards or none.
  std::vector<std::string> masks;
  for (const ShardInfo& sh : shards_) {
    const std::string m = mask_path_for(sh.path);
    if (::access(m.c_str(), F_OK) == 0) {
      read_mask_header(m, sh.ntokens);
      masks.push_back(m);
    }
  }
  if (!masks.empty() && masks.size() != shards_.size()) {
    for (const ShardInfo& sh : shards_)
      if (::access(mask_path_for(sh.path).c_str(), F_OK) != 0)
        fail("shards of '", pattern, "': ", masks.size(), " of ", shards_.size(), " have a loss mask but '", sh.path,
             "' has none (expected '", mask_path_for(sh.path), "'); give every shard a mask or none");
  }
  if (!masks.empty()) mask_files_ = std::make_shared<ShardFiles>(std::move(masks));
  files_ = std::make_shared<ShardFiles>(std::move(paths));
}

TokenStream TokenStream::slice(uint64_t begin, uint64_t end) const {
  GPT_CHECK(begin <= end && end <= total_, "TokenStream::slice [", begin, ", ", end, ") is outside the stream of ",
            total_, " tokens");
  TokenStream s = *this;
  s.base_ = base_ + begin;
  s.total_ = end - begin;
  return s;
}

void TokenStream::read(uint64_t offset, uint64_t n, int32_t* out) const {
  GPT_CHECK(offset <= total_ && n <= total_ - offset, "TokenStream::read of tokens [", offset, ", ", offset + n,
            ") is outside the stream of ", total_, " tokens");
  offset += base_;
  // The shard holding `offset`: the last one starting at or before it.
  size_t s = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin()) - 1;
  std::vector<uint16_t> narrow;
  while (n > 0) {
    const ShardInfo& shard = shards_[s];
    const uint64_t local = offset - starts_[s];
    const uint64_t count = std::min(n, shard.ntokens - local);
    const uint64_t byte_offset = kHeaderBytes + local * static_cast<uint64_t>(shard.width);
    if (shard.width == 4) {
      files_->read(s, byte_offset, count * 4, out);  // uint32 and int32 share a layout
    } else {
      narrow.resize(count);
      files_->read(s, byte_offset, count * 2, narrow.data());
      for (uint64_t i = 0; i < count; ++i) out[i] = narrow[i];
    }
    for (uint64_t i = 0; i < count; ++i) {
      const uint32_t id = static_cast<uint32_t>(out[i]);
      if (id >= static_cast<uint32_t>(vocab_size_))
        fail("shard '", shard.path, "': token id ", id, " at position ", local + i, " is >= the vocabulary size ",
             vocab_size_);
    }
    out += count, offset += count, n -= count, ++s;
  }
}

void TokenStream::read_mask(uint64_t offset, uint64_t n, uint8_t* out) const {
  GPT_CHECK(offset <= total_ && n <= total_ - offset, "TokenStream::read_mask of entries [", offset, ", ", offset + n,
            ") is outside the stream of ", total_, " tokens");
  if (!mask_files_) {
    std::fill(out, out + n, uint8_t{1});
    return;
  }
  offset += base_;
  size_t s = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin()) - 1;
  while (n > 0) {
    const ShardInfo& shard = shards_[s];
    const uint64_t local = offset - starts_[s];
    const uint64_t count = std::min(n, shard.ntokens - local);
    mask_files_->read(s, kHeaderBytes + local, count, out);
    for (uint64_t i = 0; i < count; ++i)
      if (out[i] > 1)
        fail("mask '", mask_path_for(shard.path), "': entry ", local + i, " is ", int(out[i]), " (must be 0 or 1)");
    out += count, offset += count, n -= count, ++s;
  }
}

uint64_t TokenStream::read_example(uint64_t offset, uint64_t n, int32_t* inputs, int32_t* targets) const {
  std::vector<int32_t> buf(n + 1);
  read(offset, n + 1, buf.data());
  std::copy(buf.begin(), buf.end() - 1, inputs);
  std::copy(buf.begin() + 1, buf.end(), targets);
  if (!mask_files_) return n;
  std::vector<uint8_t> m(n);
  read_mask(offset + 1, n, m.data());
  uint64_t scored = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if (m[i])
      ++scored;
    else
      targets[i] = kIgnoreTarget;
  }
  return scored;
}

}  // namespace gpt
