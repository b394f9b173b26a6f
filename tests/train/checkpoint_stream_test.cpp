// The streaming checkpoint writer and reader: the bytes are those of the
// format documented in train/checkpoint.h (written here from that
// description, byte by byte), whatever the buffer; neither side allocates
// more than its buffer on a model many times larger; a restore through the
// reader gives back the model and the optimizer exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "core/check.h"
#include "model/gpt.h"
#include "train/checkpoint.h"
#include "train/model_io.h"
#include "train/optimizer.h"

// Counting every allocation of this test binary while `g_counting` is set:
// the bytes asked of operator new (a sum, so an upper bound on what was held
// at once). Replacing the global operator new is allowed once per program;
// no other test does. (GCC sees free() of memory from operator new once the
// replacements inline; they are malloc/free on both sides.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
namespace {
std::atomic<bool> g_counting{false};
std::atomic<size_t> g_allocated{0};
}  // namespace

void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocated.fetch_add(n, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace fs = std::filesystem;

namespace gpt {
namespace {

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("gpt_ckpt_stream_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Trained {
  Config cfg;
  std::unique_ptr<Backend<float>> be = make_cpu_backend<float>();
  std::unique_ptr<GPT<float>> model;
  std::unique_ptr<Optimizer<float>> opt;
};

// A model with one real AdamW step taken, so that parameters and both
// moments are distinct non-zero values.
std::unique_ptr<Trained> trained(int n_layer, int n_embd) {
  auto t = std::make_unique<Trained>();
  t->cfg.model.n_layer = n_layer;
  t->cfg.model.n_head = 2;
  t->cfg.model.n_embd = n_embd;
  t->cfg.model.vocab_size = 257;
  t->cfg.model.context = 8;
  t->model = std::make_unique<GPT<float>>(t->cfg.model, AttentionSpec{}, *t->be);
  t->model->init(5);
  t->opt = std::make_unique<Optimizer<float>>(*t->model, t->cfg.train);
  std::vector<int32_t> tok(17);
  for (int i = 0; i < 17; ++i) tok[i] = (i * 37 + 11) % 257;
  t->model->zero_grad();
  t->model->forward(tok.data(), tok.data() + 1, 2, 8);
  t->model->backward();
  t->opt->step(1e-3);
  return t;
}

// The file of train/checkpoint.h's description: fixed header, the JSON
// header with the tensor table, zeros to a multiple of 64, each tensor
// followed by zeros to a multiple of 64, then FNV-1a 64 of all of it.
std::string documented_bytes(nlohmann::json meta, const std::vector<std::string>& names,
                             const std::vector<std::vector<int64_t>>& shapes,
                             const std::vector<std::vector<float>>& values) {
  auto pad = [](size_t n) { return (64 - n % 64) % 64; };
  nlohmann::json table = nlohmann::json::array();
  uint64_t offset = 0;
  for (size_t k = 0; k < names.size(); ++k) {
    const uint64_t bytes = values[k].size() * 4;
    table.push_back({{"name", names[k]}, {"dtype", "f32"}, {"shape", shapes[k]}, {"offset", offset}, {"bytes", bytes}});
    offset += bytes + pad(bytes);
  }
  meta["tensors"] = table;
  const std::string json = meta.dump();
  std::string out("GPTCKPT\0", 8);
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  const uint32_t version = 1, reserved = 0;
  const uint64_t len = json.size();
  put(&version, 4);
  put(&reserved, 4);
  put(&len, 8);
  out += json;
  out.append(pad(out.size()), '\0');
  for (const auto& v : values) {
    put(v.data(), v.size() * 4);
    out.append(pad(v.size() * 4), '\0');
  }
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : out) h = (h ^ c) * 0x100000001b3ull;
  put(&h, 8);
  return out;
}

// Bit-identical to the documented format at buffers smaller than a tensor,
// of odd sizes, and larger than the whole model; the host-copy path
// (save_checkpoint of make_checkpoint) writes the same bytes.
TEST(CheckpointStream, WritesTheDocumentedBytesWhateverTheBuffer) {
  const fs::path dir = temp_dir("bytes");
  auto t = trained(2, 16);
  TrainProgress p;
  p.step = 7;
  p.loader = {1, 3};
  const CheckpointState st = checkpoint_state(*t->model, t->opt.get(), t->cfg, p);
  // The reference: names, shapes and values straight from the model's
  // parameter table and the backend's memory.
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<float>> values;
  for (const char* prefix : {"param/", "adam_m/", "adam_v/"}) {
    const float* base = prefix[5] == 'm' ? t->opt->m() : prefix[5] == 'v' ? t->opt->v() : t->model->params();
    for (const ParamSpec& s : t->model->layout().specs) {
      names.push_back(prefix + s.name);
      shapes.push_back(s.shape);
      values.emplace_back(base + s.offset, base + s.offset + s.numel());
    }
  }
  ASSERT_EQ(st.tensors.size(), names.size());
  const std::string want = documented_bytes(st.meta, names, shapes, values);
  for (size_t buffer : {size_t{64}, size_t{68}, size_t{4096} + 12, size_t{1} << 24}) {
    const fs::path f = dir / ("b" + std::to_string(buffer) + ".bin");
    write_checkpoint(f.string(), st.meta, st.tensors, buffer);
    EXPECT_TRUE(file_bytes(f) == want) << "buffer " << buffer;
  }
  save_checkpoint((dir / "copy.bin").string(), make_checkpoint(*t->model, t->opt.get(), t->cfg, p));
  EXPECT_TRUE(file_bytes(dir / "copy.bin") == want);
  fs::remove_all(dir);
}

// A model of 3.3M parameters (40 MB of parameters and moments) written and
// read back through 64 KiB buffers: the writer allocates less than 1 MB in
// all (its buffer, the JSON header and small strings), the reader likewise
// while restoring every tensor into a fresh model and optimizer, which then
// hold exactly the values saved.
TEST(CheckpointStream, WriterAndReaderHoldOnlyTheirBuffer) {
  const fs::path dir = temp_dir("bounded");
  auto t = trained(4, 256);
  const size_t n = t->model->num_params();
  ASSERT_GT(n, 3000000u);
  const CheckpointState st = checkpoint_state(*t->model, t->opt.get(), t->cfg, {});
  const size_t buffer = size_t{64} << 10;
  const std::string path = (dir / "big.bin").string();
  g_allocated = 0;
  g_counting = true;
  write_checkpoint(path, st.meta, st.tensors, buffer);
  g_counting = false;
  const size_t written = g_allocated.load();
  EXPECT_GT(fs::file_size(path), 3 * n * sizeof(float));
  EXPECT_LT(written, size_t{1} << 20) << "bytes allocated while writing " << fs::file_size(path) << " bytes";

  Trained fresh;
  fresh.cfg = t->cfg;
  fresh.model = std::make_unique<GPT<float>>(fresh.cfg.model, AttentionSpec{}, *fresh.be);
  fresh.opt = std::make_unique<Optimizer<float>>(*fresh.model, fresh.cfg.train);
  g_allocated = 0;
  g_counting = true;
  {
    CheckpointReader r(path, buffer);
    restore_checkpoint(r, *fresh.model, fresh.opt.get());
  }
  g_counting = false;
  const size_t read = g_allocated.load();
  std::printf(
      "[checkpoint stream] %zu parameters, file %ju bytes, buffer %zu: allocated %zu bytes writing, %zu "
      "reading\n",
      n, static_cast<uintmax_t>(fs::file_size(path)), buffer, written, read);
  EXPECT_LT(read, size_t{1} << 20) << "bytes allocated while reading";
  EXPECT_EQ(std::memcmp(fresh.model->params(), t->model->params(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(fresh.opt->m(), t->opt->m(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(fresh.opt->v(), t->opt->v(), n * sizeof(float)), 0);
  EXPECT_EQ(fresh.opt->steps_taken(), t->opt->steps_taken());
  // The measuring itself works: the whole-copy reader allocates the tensors.
  g_allocated = 0;
  g_counting = true;
  { const Checkpoint whole = load_checkpoint(path); }
  g_counting = false;
  EXPECT_GT(g_allocated.load(), 3 * n * sizeof(float));
  fs::remove_all(dir);
}

// Pieces at an odd buffer size cover each tensor once, in order; reads past
// a tensor are refused; a non-finite parameter stops a save and leaves the
// previous file as it was.
TEST(CheckpointStream, PiecesAndRefusals) {
  const fs::path dir = temp_dir("pieces");
  auto t = trained(1, 16);
  const CheckpointState st = checkpoint_state(*t->model, t->opt.get(), t->cfg, {});
  const std::string path = (dir / "c.bin").string();
  write_checkpoint(path, st.meta, st.tensors);
  const std::string before = file_bytes(path);
  CheckpointReader r(path, 68);  // 17 floats
  const auto& e = r.entry("param/wte");
  std::vector<float> joined;
  uint64_t expect_first = 0;
  r.for_each_piece(e, [&](uint64_t first, uint64_t n, const float* v) {
    EXPECT_EQ(first, expect_first);
    EXPECT_LE(n, 17u);
    joined.insert(joined.end(), v, v + n);
    expect_first += n;
  });
  EXPECT_EQ(joined, r.tensor("param/wte"));
  const ParamSpec& wte = t->model->layout().specs[0];
  EXPECT_EQ(joined, std::vector<float>(t->model->params() + wte.offset, t->model->params() + wte.offset + wte.numel()));
  float x;
  EXPECT_THROW(r.read(e, e.numel(), 1, &x), Error);

  t->model->params()[3] = std::nanf("");
  const CheckpointState bad = checkpoint_state(*t->model, t->opt.get(), t->cfg, {});
  try {
    write_checkpoint(path, bad.meta, bad.tensors);
    FAIL() << "a NaN parameter was saved";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("refusing to save a checkpoint: parameter tensor"), std::string::npos)
        << err.what();
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_TRUE(file_bytes(path) == before);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpt
