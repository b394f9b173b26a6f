// safetensors reading and writing; the format and the checks are in
// safetensors.h.
#include "convert/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/json.h"
#include "core/files.h"
#include "kernels/bf16_round.h"

namespace fs = std::filesystem;

namespace gpt {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian and read without swapping");

namespace {

struct DtypeInfo {
  StDtype dtype;
  const char* name;
  int bytes;
};
constexpr DtypeInfo kDtypes[] = {{StDtype::F32, "F32", 4},         {StDtype::F16, "F16", 2},
                                 {StDtype::BF16, "BF16", 2},       {StDtype::F64, "F64", 8},
                                 {StDtype::I64, "I64", 8},         {StDtype::I32, "I32", 4},
                                 {StDtype::I16, "I16", 2},         {StDtype::I8, "I8", 1},
                                 {StDtype::U8, "U8", 1},           {StDtype::BOOL, "BOOL", 1},
                                 {StDtype::F8_E4M3, "F8_E4M3", 1}, {StDtype::F8_E5M2, "F8_E5M2", 1}};

std::string dtype_list() {
  std::string s;
  for (const DtypeInfo& d : kDtypes) s += std::string(s.empty() ? "" : ", ") + d.name;
  return s;
}

// IEEE half -> float, exactly (subnormals, infinities and NaN included).
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13);  // inf or NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);  // rebias 15 -> 127
  } else if (man == 0) {
    bits = sign;  // ±0
  } else {
    // Subnormal: man · 2^-24, exact in float32.
    const float v = std::ldexp(static_cast<float>(man), -24);
    bits = sign | std::bit_cast<uint32_t>(v);
  }
  return std::bit_cast<float>(bits);
}

}  // namespace

std::string st_shape_text(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

const char* st_dtype_name(StDtype d) {
  for (const DtypeInfo& i : kDtypes)
    if (i.dtype == d) return i.name;
  return "?";
}

int st_dtype_bytes(StDtype d) {
  for (const DtypeInfo& i : kDtypes)
    if (i.dtype == d) return i.bytes;
  return 0;
}

uint64_t StTensor::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const char* why = not_a_regular_file(path);
  GPT_CHECK(!why, "safetensors file '", path, "' ", why ? why : "");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  GPT_CHECK(fd >= 0, "safetensors file '", path, "': cannot open (", std::strerror(errno), ")");
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("safetensors file '", path, "': cannot read its size (", std::strerror(err), ")");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    fail("safetensors file '", path, "': ", size_, " bytes, shorter than the 8-byte header length");
  }
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  GPT_CHECK(p != MAP_FAILED, "safetensors file '", path, "': cannot map it (", std::strerror(map_err), ")");
  map_ = static_cast<const unsigned char*>(p);
  try {
    uint64_t n = 0;
    std::memcpy(&n, map_, 8);
    GPT_CHECK(n <= size_ - 8, "safetensors file '", path, "': the header length ", n, " runs past the end of the file (",
              size_, " bytes)");
    GPT_CHECK(n <= kSafetensorsMaxHeader, "safetensors file '", path, "': the header length ", n,
              " exceeds the format's limit of ", kSafetensorsMaxHeader, " bytes");
    GPT_CHECK(n >= 2, "safetensors file '", path, "': the header length ", n, " cannot hold a JSON object");
    data_offset_ = 8 + n;
    const nlohmann::json header =
        parse_json(std::string_view(reinterpret_cast<const char*>(map_ + 8), n),
                   "safetensors file '" + path + "': the header", {.comments = false});
    GPT_CHECK(header.is_object(), "safetensors file '", path, "': the header is JSON but not an object");
    const uint64_t data_bytes = size_ - data_offset_;
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        GPT_CHECK(entry.is_object(), "safetensors file '", path, "': __metadata__ must be an object of strings");
        for (const auto& [k, v] : entry.items()) {
          GPT_CHECK(v.is_string(), "safetensors file '", path, "': __metadata__ value '", k, "' is not a string");
          metadata_[k] = v.get<std::string>();
        }
        continue;
      }
      const std::string where = "safetensors file '" + path + "': tensor '" + name + "'";
      GPT_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") &&
                    entry.contains("data_offsets"),
                where, ": its entry must be an object with dtype, shape and data_offsets");
      StTensor t;
      t.name = name;
      GPT_CHECK(entry["dtype"].is_string(), where, ": dtype is not a string");
      const std::string dt = entry["dtype"].get<std::string>();
      const DtypeInfo* info = nullptr;
      for (const DtypeInfo& d : kDtypes)
        if (dt == d.name) info = &d;
      GPT_CHECK(info, where, ": dtype '", dt, "' is not one of the format's (", dtype_list(), ")");
      t.dtype = info->dtype;
      GPT_CHECK(entry["shape"].is_array() && entry["shape"].size() <= 8, where,
                ": shape must be an array of at most 8 sizes");
      // Bounded so that the product cannot overflow: 2^40 elements at most.
      uint64_t numel = 1;
      for (const auto& d : entry["shape"]) {
        GPT_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), where,
                  ": shape holds ", d.dump(), "; sizes must be non-negative integers");
        const uint64_t v = d.get<uint64_t>();
        GPT_CHECK(v <= (uint64_t{1} << 40) && (v == 0 || numel <= (uint64_t{1} << 40) / v), where,
                  ": shape ", entry["shape"].dump(), " is too large");
        numel *= v;
        t.shape.push_back(static_cast<int64_t>(v));
      }
      const auto& off = entry["data_offsets"];
      GPT_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                where, ": data_offsets must be two non-negative integers [begin, end]");
      t.begin = off[0].get<uint64_t>(), t.end = off[1].get<uint64_t>();
      GPT_CHECK(t.begin <= t.end, where, ": data_offsets [", t.begin, ", ", t.end, "] end before they begin");
      GPT_CHECK(t.end <= data_bytes, where, ": data_offsets [", t.begin, ", ", t.end,
                "] run past the end of the data (", data_bytes, " bytes after the header)");
      const uint64_t want = numel * static_cast<uint64_t>(info->bytes);
      GPT_CHECK(t.end - t.begin == want, where, ": shape ", st_shape_text(t.shape), " of ", dt, " needs ", want,
                " bytes but data_offsets [", t.begin, ", ", t.end, "] hold ", t.end - t.begin);
      tensors_.push_back(std::move(t));
    }
    std::sort(tensors_.begin(), tensors_.end(),
              [](const StTensor& a, const StTensor& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
    // The tensors tile the data: each begins where the last ended.
    uint64_t at = 0;
    for (const StTensor& t : tensors_) {
      if (t.begin == t.end) continue;  // empty tensors occupy nothing
      GPT_CHECK(t.begin >= at, "safetensors file '", path, "': tensor '", t.name, "' at [", t.begin, ", ", t.end,
                ") overlaps the tensor before it, which ends at ", at);
      GPT_CHECK(t.begin == at, "safetensors file '", path, "': the data has a gap [", at, ", ", t.begin,
                ") before tensor '", t.name, "' that no tensor covers");
      at = t.end;
    }
    GPT_CHECK(at == data_bytes, "safetensors file '", path, "': ", data_bytes - at,
              " bytes after the last tensor belong to no tensor (the data is ", data_bytes, " bytes)");
    for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
  } catch (...) {
    ::munmap(const_cast<unsigned char*>(map_), size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<unsigned char*>(map_), size_);
}

const StTensor* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::read(const StTensor& t, float* out) const {
  const unsigned char* src = map_ + data_offset_ + t.begin;
  const uint64_t n = t.numel();
  if (n == 0 && (t.dtype == StDtype::F32 || t.dtype == StDtype::F16 || t.dtype == StDtype::BF16)) return;
  switch (t.dtype) {
    case StDtype::F32:
      std::memcpy(out, src, n * 4);
      break;
    case StDtype::F16:
    case StDtype::BF16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = t.dtype == StDtype::F16 ? half_to_float(h) : bf16_bits_to_float(h);
      }
      break;
    default:
      fail("safetensors file '", path_, "': tensor '", t.name, "' has dtype ", st_dtype_name(t.dtype),
           "; this project reads model weights stored as F32, F16 or BF16");
  }
  for (uint64_t i = 0; i < n; ++i)
    GPT_CHECK(std::isfinite(out[i]), "safetensors file '", path_, "': tensor '", t.name, "' holds a non-finite value (",
              out[i], " at index ", i, " of ", n, "); a model with NaN or infinite weights cannot be loaded");
}

SafetensorsModel::SafetensorsModel(const std::string& dir_or_file) : source_(dir_or_file) {
  std::error_code ec;
  const fs::path p(dir_or_file);
  auto add_file = [&](const std::string& file) {
    files_.push_back(std::make_unique<SafetensorsFile>(file));
    return files_.size() - 1;
  };
  if (!fs::is_directory(p, ec)) {
    const size_t f = add_file(dir_or_file);
    for (const StTensor& t : files_[f]->tensors()) where_[t.name] = {f, &t};
    return;
  }
  const fs::path index = p / "model.safetensors.index.json", single = p / "model.safetensors";
  if (fs::exists(index, ec)) {
    const nlohmann::json j = parse_json(read_text_file(index.string(), "safetensors index"),
                                        "'" + index.string() + "'", {.comments = false});
    GPT_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object() && !j["weight_map"].empty(),
              "'", index.string(), "' has no weight_map object naming each tensor's file");
    std::map<std::string, size_t> opened;
    for (const auto& [name, file] : j["weight_map"].items()) {
      GPT_CHECK(file.is_string(), "'", index.string(), "': weight_map entry '", name, "' is not a file name");
      const std::string shard = file.get<std::string>();
      GPT_CHECK(shard.find('/') == std::string::npos && shard != ".." && !shard.empty(), "'", index.string(),
                "': weight_map entry '", name, "' names '", shard, "', which is not a file of the same directory");
      if (!opened.count(shard)) opened[shard] = add_file((p / shard).string());
      const size_t f = opened[shard];
      const StTensor* t = files_[f]->find(name);
      GPT_CHECK(t, "'", index.string(), "' puts tensor '", name, "' in '", shard, "', which does not hold it");
      where_[name] = {f, t};
    }
    return;
  }
  GPT_CHECK(fs::exists(single, ec), "'", dir_or_file,
            "' holds neither model.safetensors nor model.safetensors.index.json (a Hugging Face model directory "
            "saved with safetensors; PyTorch .bin files are not read)");
  const size_t f = add_file(single.string());
  for (const StTensor& t : files_[f]->tensors()) where_[t.name] = {f, &t};
}

const StTensor& SafetensorsModel::tensor(const std::string& name) const {
  const auto it = where_.find(name);
  GPT_CHECK(it != where_.end(), "'", source_, "' has no tensor '", name, "'");
  return *it->second.second;
}

const SafetensorsFile& SafetensorsModel::file_of(const std::string& name) const {
  tensor(name);
  return *files_[where_.at(name).first];
}

std::vector<float> SafetensorsModel::read(const std::string& name) const {
  const StTensor& t = tensor(name);
  std::vector<float> v(t.numel());
  file_of(name).read(t, v.data());
  return v;
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> n;
  for (const auto& [name, w] : where_) n.push_back(name);
  return n;
}

uint64_t SafetensorsModel::total_bytes() const {
  uint64_t n = 0;
  for (const auto& f : files_) n += f->file_bytes();
  return n;
}

void write_safetensors(const std::string& path, const std::vector<StWriteTensor>& tensors, StDtype dtype,
                       const std::map<std::string, std::string>& metadata) {
  GPT_CHECK(dtype == StDtype::F32 || dtype == StDtype::BF16, "write_safetensors '", path,
            "': writes F32 or BF16, not ", st_dtype_name(dtype));
  const uint64_t width = static_cast<uint64_t>(st_dtype_bytes(dtype));
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const StWriteTensor& t : tensors) {
    GPT_CHECK(t.name != "__metadata__" && !header.contains(t.name), "write_safetensors '", path, "': tensor name '",
              t.name, "' is reserved or repeated");
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    header[t.name] = {{"dtype", st_dtype_name(dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + n * width}}};
    at += n * width;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  GPT_CHECK(f, "cannot create '", tmp, "' (", std::strerror(errno), ")");
  bool ok = true;
  auto write = [&](const void* p, size_t n) { ok = ok && (n == 0 || std::fwrite(p, 1, n, f) == n); };
  const uint64_t n_header = h.size();
  write(&n_header, 8);
  write(h.data(), h.size());
  std::vector<uint16_t> half;
  for (const StWriteTensor& t : tensors) {
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    if (dtype == StDtype::F32) {
      write(t.data, n * 4);
    } else {
      half.resize(n);
      for (uint64_t i = 0; i < n; ++i) half[i] = round_to_bf16_bits(t.data[i]);
      write(half.data(), n * 2);
    }
  }
  const int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    fail("writing '", tmp, "' failed (", std::strerror(err), ")");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    fail("cannot rename '", tmp, "' to '", path, "' (", ec.message(), ")");
  }
}

}  // namespace gpt
