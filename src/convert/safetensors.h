// safetensors files (docs/hf_models.md): the tensor format of Hugging Face
// checkpoints. A file is
//
//   8 bytes   N, little-endian uint64: the header's length
//   N bytes   JSON object: {"NAME": {"dtype": "BF16", "shape": [..],
//             "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}
//             (trailing spaces allowed)
//   the rest  the data: each tensor's bytes at [begin, end) of it, row-major,
//             little-endian
//
// Reading maps the file (mmap) and checks the whole header before handing out
// a tensor: the header fits in the file, every entry has a known dtype, a
// shape of non-negative sizes and offsets whose length is the shape's bytes,
// and the tensors tile the data without overlaps, gaps or bytes past its end.
// Values are read as float32 from F32, F16 or BF16 (other dtypes refused by
// name), one tensor at a time, and every value is checked finite. Errors name
// the file and the tensor.
//
// A model split over several files lists them in model.safetensors.index.json
// ({"weight_map": {"NAME": "model-00001-of-00002.safetensors", ...}});
// SafetensorsModel opens either form.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gpt {

// The dtypes of the safetensors specification, with their widths.
enum class StDtype { F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2 };
const char* st_dtype_name(StDtype d);
int st_dtype_bytes(StDtype d);

// "[2, 3]": a shape as the header writes it, for messages.
std::string st_shape_text(const std::vector<int64_t>& shape);

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
  uint64_t numel() const;
};

// The header's byte cap: the specification's 100 MB.
constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // maps and checks the file
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // In the header's order of data offsets.
  const std::vector<StTensor>& tensors() const { return tensors_; }
  const StTensor* find(const std::string& name) const;  // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The values of t as float32, t.numel() of them, into out. Refuses dtypes
  // other than F32, F16 and BF16 and non-finite values, naming the tensor.
  void read(const StTensor& t, float* out) const;
  // Bytes of the whole file (the mapping).
  uint64_t file_bytes() const { return size_; }

 private:
  std::string path_;
  const unsigned char* map_ = nullptr;
  uint64_t size_ = 0;
  uint64_t data_offset_ = 0;  // 8 + N
  std::vector<StTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// One model's tensors: DIR/model.safetensors, DIR/model.safetensors.index.json
// with its shards, or a single .safetensors file.
class SafetensorsModel {
 public:
  explicit SafetensorsModel(const std::string& dir_or_file);
  bool has(const std::string& name) const { return where_.count(name) > 0; }
  const StTensor& tensor(const std::string& name) const;  // throws naming the model
  const SafetensorsFile& file_of(const std::string& name) const;
  std::vector<float> read(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  const std::string& source() const { return source_; }
  uint64_t total_bytes() const;  // of all its files

 private:
  std::string source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<size_t, const StTensor*>> where_;  // name -> (file, entry)
};

// A tensor to write: its name, shape and numel(shape) float32 values.
struct StWriteTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};
// Writes a safetensors file of the tensors in order, each stored as dtype
// (F32, or BF16 rounded to nearest even), with string metadata; the header is
// padded with spaces to a multiple of 8 bytes. Atomic (PATH.tmp, renamed).
void write_safetensors(const std::string& path, const std::vector<StWriteTensor>& tensors, StDtype dtype,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace gpt
