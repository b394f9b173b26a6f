// `gpt bench --hf HF_DIR`: what loading and evaluating a Hugging Face model
// directory costs (docs/hf_models.md §10). Prints, without asserting
// anything:
//   read   the time to read the safetensors files' bytes once (the page cache
//          warm from a first pass): the floor of any loader;
//   load   load_model (config mapping, mapping the files, widening to
//          float32, the layer-by-layer upload) and the resident set after
//          it, against the float32 weights' size;
//   eval   forward_losses of one sequence at each length of --contexts
//          (default 1x and 4x model.context): tokens/s and the peak resident
//          set during it.
#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include <filesystem>
#include <ostream>
#include <vector>

#include "bench/bench.h"
#include "bench/bench_util.h"
#include "convert/hf.h"
#include "core/check.h"
#include "train/model_io.h"

namespace fs = std::filesystem;

namespace gpt {

using namespace bench_detail;

namespace {

// Reads every byte of the model's safetensors files (model*.safetensors) in dir; returns the byte count.
uint64_t read_safetensors_bytes(const std::string& dir) {
  std::vector<char> buf(size_t{8} << 20);
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".safetensors" || name.rfind("model", 0) != 0) continue;  // the model's files
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    GPT_CHECK(fd >= 0, "bench --hf: cannot open ", e.path().string());
    ssize_t n;
    while ((n = ::read(fd, buf.data(), buf.size())) > 0) total += static_cast<uint64_t>(n);
    ::close(fd);
  }
  return total;
}

}  // namespace

void run_bench_hf(const std::string& dir, const BenchOptions& opt, std::ostream& out) {
  constexpr double kMiB = 1024.0 * 1024.0;
  read_safetensors_bytes(dir);  // warm the page cache
  auto t0 = Clock::now();
  const uint64_t bytes = read_safetensors_bytes(dir);
  const double read_s = seconds_since(t0);
  const MemoryMark before = memory_mark(false);
  t0 = Clock::now();
  LoadedModel lm = load_model(dir);
  const double load_s = seconds_since(t0);
  const double rss_loaded = proc_status_mib("VmRSS:"), peak_load = proc_status_mib("VmHWM:");
  const ModelConfig& m = lm.config.model;
  const double weights_mib = static_cast<double>(lm.model->num_params()) * 4 / kMiB;
  out << "gpt bench --hf " << dir << ": block " << m.block << ", " << m.n_layer << " layers, C=" << m.n_embd
      << ", " << m.n_head << " heads (" << m.kv_heads() << " key/value), V=" << m.vocab_size << ", "
      << lm.model->num_params() << " parameters, model.context " << m.context << "; " << omp_get_max_threads()
      << " threads, load average " << load_average() << "\n";
  out << "read   " << Table::fmt("%.1f", bytes / kMiB) << " MiB of safetensors in " << Table::fmt("%.3f", read_s)
      << " s (" << Table::fmt("%.2f", bytes / kMiB / 1024 / read_s) << " GiB/s, page cache warm)\n";
  out << "load   " << Table::fmt("%.3f", load_s) << " s = " << Table::fmt("%.2f", load_s / read_s)
      << " x the read; resident set " << Table::fmt("%.0f", before.before) << " MiB before, "
      << Table::fmt("%.0f", rss_loaded) << " MiB after (float32 weights " << Table::fmt("%.0f", weights_mib)
      << " MiB), peak during the load " << Table::fmt("%.0f", peak_load) << " MiB"
      << (before.peak_reset ? "" : " (peak since the process started: /proc does not allow a reset)") << "\n";
  std::vector<int> lengths = opt.attention_contexts;
  if (!opt.contexts_given) lengths = {m.context, 4 * m.context};
  for (int T : lengths) {
    const std::vector<int32_t> tokens = random_tokens(static_cast<size_t>(T) + 1, m.vocab_size, 1234);
    std::vector<float> losses;
    const MemoryMark mark = memory_mark(false);
    const double s = best_seconds(
        [&] { lm.model->forward_losses(tokens.data(), tokens.data() + 1, 1, T, losses); }, opt.min_seconds, 1, 1);
    const double peak = proc_status_mib("VmHWM:");
    out << "eval   T=" << T << " (" << Table::fmt("%.2f", static_cast<double>(T) / m.context) << "x): "
        << Table::fmt("%.3f", s) << " s, " << Table::fmt("%.0f", T / s) << " tokens/s; peak resident set "
        << Table::fmt("%.0f", peak) << " MiB (" << Table::fmt("%+.0f", peak - rss_loaded)
        << " MiB over the loaded model" << (mark.peak_reset ? "" : "; peak since the start: /proc allows no reset")
        << ")\n";
  }
}

}  // namespace gpt
