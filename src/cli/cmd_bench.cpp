#include <omp.h>

#include <iostream>
#include <sstream>

#include "bench/bench.h"
#include "cli/commands.h"
#include "cli/validators.h"
#include "config/attention.h"
#include "core/check.h"
#include "kernels/attention_spec.h"
#include "kernels/cpu/gemm.h"

namespace gpt::cli {

namespace {

struct BenchArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string only;
  int threads = 0;
  std::string contexts;
  std::string hf;
  std::string presets;
  std::string kernel;
  int steps = 3;
  int square = 2048;
  double min_seconds = 0.5;
  CLI::Option* min_seconds_option = nullptr;  // given or not
  std::string device = "cpu";
  std::string precision;  // empty: the config's run.precision with --device cuda, fp32 on cpu
  double peak_tflops = 0;
  std::string cost_gpu = "h100";
  int doc_len = 0;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int> parse_ints(const std::string& s, const char* option) {
  std::vector<int> out;
  for (const std::string& item : split_list(s)) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    GPT_CHECK(used == item.size() && v > 0, "bench ", option, ": \"", item,
              "\" is not a positive integer (give a comma-separated list, e.g. 256,1024)");
    out.push_back(v);
  }
  GPT_CHECK(!out.empty(), "bench ", option, ": give at least one value");
  return out;
}

}  // namespace

void add_bench(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Measure GEMM peak, training step, evaluation, attention and eval memory; print GFLOP/s and % of peak");
  cmd->add_option("config", args->config, "JSON config (model, train.batch_size, attention); default: the defaults")
      ->check(existing_file());
  cmd->add_option("--set", args->overrides, "Override a config key, e.g. --set train.batch_size=32 (repeatable)")
      ->type_name("KEY=VALUE");
  cmd->add_option("--only", args->only,
                  "Comma-separated parts: gemm,train,eval,attention,memory,phases,cuda-attention,attention-cost,"
                  "step-cost (default: all but phases, cuda-attention, attention-cost and step-cost; attention-cost: "
                  "the cost model of the fused attention forward on a GPU, --gpu, no device needed; step-cost: the "
                  "cost model of one training step of the config's model on a GPU with fp32 and bf16 storage (each "
                  "op's FLOPs, minimum and actual bytes, roofline time; predicted MFU), --gpu, no device needed; "
                  "phases: peak memory of each "
                  "phase of a run, "
                  "writing one checkpoint to the temporary directory; with --device cuda the device memory in use "
                  "after each phase)")
      ->type_name("PARTS");
  cmd->add_option("--threads", args->threads, "OpenMP threads (default: all cores)")->check(positive());
  cmd->add_option("--hf", args->hf,
                  "Bench a Hugging Face model directory instead: read, load and evaluation time and memory "
                  "(--contexts: evaluated lengths, default 1x and 4x its context)")
      ->type_name("HF_DIR");
  cmd->add_option("--contexts", args->contexts,
                  "Attention contexts (default 256,512,1024,2048,4096; cuda-attention: 1024,2048,4096,8192,16384)")
      ->type_name("T,T,...");
  cmd->add_option("--presets", args->presets,
                  "Attention presets, PRESET+BIAS with a position bias (e.g. softmax+forget), PRESET+differential or "
                  "PRESET+softcap (default: every preset, and softmax with kerple_log, kerple_power, forget, fire, "
                  "differential and softcap)")
      ->type_name("NAME,...");
  cmd->add_option("--gemm-kernel", args->kernel, "GEMM kernel: auto, generic, avx2, avx512 (default auto)");
  cmd->add_option("--steps", args->steps, "Timed training steps, after one warm-up (default 3)")->check(positive());
  cmd->add_option("--doc-len", args->doc_len,
                  "train: also time the step with a document mask (train.document_mask) of documents of N tokens, "
                  "beside the unmasked step of the same run (default 0: not)")
      ->check(non_negative());
  cmd->add_option("--square", args->square, "Size n of the square n^3 GEMM (default 2048)")->check(positive());
  args->min_seconds_option =
      cmd->add_option("--min-seconds", args->min_seconds,
                      "Repeat each short measurement for at least this long (default 0.5; cuda-attention: 0.2)")
          ->check(non_negative());
  cmd->add_option("--device", args->device,
                  "cpu or cuda (cuda: gemm, train and eval on the GPU, MFU against its peak; default cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--precision", args->precision,
                  "cuda: GEMM precision fp32, tf32 or bf16 (bf16 operands, float32 accumulation; bf16 storage "
                  "is run.storage: --set run.storage=bf16); "
                  "default: the config's run.precision with --device cuda, fp32 on cpu (cpu takes fp32 only)")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
  cmd->add_option("--gpu", args->cost_gpu, "attention-cost, step-cost: the GPU of the cost model, h100 or h200 (default h100)")
      ->check(CLI::IsMember({"h100", "h200"}));
  cmd->add_option("--peak-tflops", args->peak_tflops,
                  "cuda: peak TFLOP/s for the MFU (default: from the device name, the float32, TF32 or bf16 dense "
                  "peak as the GEMMs run)")
      ->check(non_negative());
  cmd->callback([args] {
    if (!args->hf.empty()) {
      BenchOptions opt;
      if (!args->contexts.empty()) {
        opt.attention_contexts = parse_ints(args->contexts, "--contexts");
        opt.contexts_given = true;
      }
      opt.min_seconds = args->min_seconds;
      if (args->threads > 0) omp_set_num_threads(args->threads);
      GPT_CHECK(args->config.empty() && args->overrides.empty() && args->only.empty(),
                "bench --hf: the model is the directory's; a config, --set and --only do not apply");
      run_bench_hf(args->hf, opt, std::cout);
      return;
    }
    const Config cfg = load_config(args->config, args->overrides);
    BenchOptions opt;
    opt.config_name = args->config;
    if (!args->only.empty()) opt.parts = split_list(args->only);
    if (!args->contexts.empty()) {
      opt.attention_contexts = parse_ints(args->contexts, "--contexts");
      opt.contexts_given = true;
    }
    if (!args->presets.empty()) {
      opt.presets = split_list(args->presets);
      for (const std::string& p : opt.presets) {
        attention_variant(p, "bench --presets");  // an unknown name is refused before any bench runs
      }
    }
    if (!args->kernel.empty()) {
      bool found = false;
      for (auto k : {cpu::GemmKernel::Auto, cpu::GemmKernel::Generic, cpu::GemmKernel::Avx2, cpu::GemmKernel::Avx512})
        if (args->kernel == cpu::gemm_kernel_name(k)) {
          cpu::set_gemm_kernel(k);
          found = true;
        }
      GPT_CHECK(found, "bench --gemm-kernel: \"", args->kernel,
                "\" is not a kernel; valid: auto, generic, avx2, avx512");
    }
    opt.steps = args->steps;
    opt.doc_len = args->doc_len;
    opt.square = args->square;
    opt.min_seconds = args->min_seconds;
    opt.min_seconds_given = args->min_seconds_option->count() > 0;
    opt.device = args->device;
    opt.precision = !args->precision.empty() ? args->precision : opt.device == "cuda" ? cfg.run.precision : "fp32";
    opt.peak_tflops = args->peak_tflops;
    opt.cost_gpu = args->cost_gpu;
    if (args->threads > 0)
      omp_set_num_threads(args->threads);
    else if (cfg.train.threads > 0)
      omp_set_num_threads(cfg.train.threads);
    run_bench(cfg, opt, std::cout);
  });
}

}  // namespace gpt::cli
