// safetensors reading and writing (convert/safetensors.h): round trips, the
// three float dtypes against values written by hand from IEEE's formats, the
// sharded index, and the refusal of every malformed header.
#include "convert/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "kernels/bf16_round.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpt_st_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A file of the given header text (padded to 8 bytes) and data bytes.
  std::string raw(const std::string& name, const std::string& header, const std::string& data,
                  int64_t header_len = -1) {
    std::string h = header;
    h.append((8 - h.size() % 8) % 8, ' ');
    const uint64_t n = header_len >= 0 ? static_cast<uint64_t>(header_len) : h.size();
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << h << data;
    return path;
  }
  static std::string floats(std::initializer_list<float> v) {
    std::string s(v.size() * 4, '\0');
    std::memcpy(s.data(), std::data(v), s.size());
    return s;
  }
  // The error message of opening and reading every tensor of path.
  static std::string refusal(const std::string& path) {
    try {
      const SafetensorsFile f(path);
      for (const StTensor& t : f.tensors()) {
        std::vector<float> v(t.numel());
        f.read(t, v.data());
      }
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(Safetensors, WritesAndReadsFloat32AndBf16) {
  const std::vector<float> a = {1.0f, -2.5f, 3.14159f, 1e-30f, 65504.0f, -0.0f};
  const std::vector<float> b = {0.5f, 0.25f};
  for (StDtype dt : {StDtype::F32, StDtype::BF16}) {
    const std::string path = (dir_ / "w.safetensors").string();
    write_safetensors(path, {{"a", {2, 3}, a.data()}, {"b", {2}, b.data()}}, dt, {{"format", "pt"}});
    const SafetensorsFile f(path);
    ASSERT_EQ(f.tensors().size(), 2u);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    const StTensor* t = f.find("a");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(t->dtype, dt);
    std::vector<float> got(6);
    f.read(*t, got.data());
    for (size_t i = 0; i < a.size(); ++i) {
      const float want = dt == StDtype::F32 ? a[i] : bf16_bits_to_float(round_to_bf16_bits(a[i]));
      EXPECT_EQ(std::memcmp(&got[i], &want, 4), 0) << i;
    }
    // The header is padded to 8 bytes, as the format recommends.
    std::ifstream in(path, std::ios::binary);
    uint64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 8);
    EXPECT_EQ(n % 8, 0u);
  }
}

TEST_F(Safetensors, ReadsHalfPrecisionExactly) {
  // IEEE binary16 bit patterns and their values: 1, -2.5, the largest finite
  // (65504), the smallest subnormal (2^-24), the largest subnormal
  // ((1023/1024)·2^-14), -0.
  const uint16_t bits[] = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x03FF, 0x8000};
  const double want[] = {1.0, -2.5, 65504.0, std::ldexp(1.0, -24), 1023.0 / 1024.0 * std::ldexp(1.0, -14), -0.0};
  std::string data(sizeof bits, '\0');
  std::memcpy(data.data(), bits, sizeof bits);
  const std::string path = raw("h.safetensors", R"({"x":{"dtype":"F16","shape":[6],"data_offsets":[0,12]}})", data);
  const SafetensorsFile f(path);
  std::vector<float> got(6);
  f.read(*f.find("x"), got.data());
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(static_cast<double>(got[i]), want[i]) << i;
    EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << i;
  }
}

TEST_F(Safetensors, RefusesMalformedFilesNamingWhatIsWrong) {
  const std::string two = floats({1.0f, 2.0f});
  struct Case {
    const char* name;
    std::string header, data;
    int64_t header_len;
    const char* expect;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Case cases[] = {
      {"past_end", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", two, 4096, "runs past the end"},
      {"not_json", R"({"x": oops})", two, -1, "not valid JSON"},
      {"not_object", R"([1,2])", two, -1, "not an object"},
      {"bad_dtype", R"({"x":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", two, -1, "dtype 'F33'"},
      {"size_mismatch", R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", two, -1, "needs 12 bytes"},
      {"out_of_range", R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", two, -1, "past the end of the data"},
      {"reversed", R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", two, -1, "end before they begin"},
      {"overlap",
       R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       two, -1, "overlaps"},
      {"gap", R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", two, -1, "gap"},
      {"trailing", R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", two, -1, "belong to no tensor"},
      {"negative_shape", R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", two, -1, "non-negative"},
      {"integer_dtype", R"({"x":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", two, -1, "dtype I32"},
      {"non_finite", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", floats({1.0f, nan}), -1,
       "non-finite"},
      {"bad_metadata", R"({"__metadata__":{"a":1},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", two, -1,
       "__metadata__ value 'a'"},
      {"empty_header", "", "", 0, "cannot hold a JSON object"},
  };
  for (const Case& c : cases) {
    const std::string path = raw(std::string(c.name) + ".safetensors", c.header, c.data, c.header_len);
    const std::string msg = refusal(path);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << c.name << ": the message names the file: " << msg;
  }
  {
    const std::string path = (dir_ / "tiny.safetensors").string();
    std::ofstream(path) << "abc";
    EXPECT_NE(refusal(path).find("shorter than the 8-byte header length"), std::string::npos);
  }
}

TEST_F(Safetensors, ReadsAShardedModelThroughItsIndex) {
  const std::vector<float> a = {1, 2, 3}, b = {4, 5};
  write_safetensors((dir_ / "model-00001-of-00002.safetensors").string(), {{"a", {3}, a.data()}}, StDtype::F32);
  write_safetensors((dir_ / "model-00002-of-00002.safetensors").string(), {{"b", {2}, b.data()}}, StDtype::BF16);
  nlohmann::json index = {{"metadata", {{"total_size", 16}}},
                          {"weight_map",
                           {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(dir_ / "model.safetensors.index.json") << index.dump();
  const SafetensorsModel m(dir_.string());
  EXPECT_EQ(m.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(m.read("a"), a);
  EXPECT_EQ(m.read("b"), b);
  EXPECT_THROW(m.read("c"), Error);
  // The index must not put a tensor in a file that lacks it.
  index["weight_map"]["a"] = "model-00002-of-00002.safetensors";
  std::ofstream(dir_ / "model.safetensors.index.json") << index.dump();
  try {
    const SafetensorsModel bad(dir_.string());
    ADD_FAILURE() << "an index naming the wrong shard was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not hold it"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpt
