// gpt convert: llm.c GPT-2 checkpoints <-> the project's checkpoints.
//   gpt convert --from-llmc MODEL.bin OUT.bin [--context T] [--with-optimizer]
//   gpt convert --to-llmc CHECKPOINT|RUN_DIR OUT.bin [--bf16]
//   gpt convert --from-hf HF_DIR OUT.bin [--hf-context T] [--with-optimizer]
//   gpt convert --to-hf CHECKPOINT|RUN_DIR OUT_DIR [--bf16]
#include <iostream>

#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/validators.h"
#include "convert/hf.h"
#include "convert/llmc.h"
#include "core/check.h"
#include "model/block_parts.h"
#include "train/model_io.h"

namespace gpt::cli {
namespace {

struct ConvertArgs {
  std::string from_llmc;
  std::string to_llmc;
  std::string from_hf;
  std::string to_hf;
  int hf_context = 0;
  std::string out;
  int context = 0;
  bool with_optimizer = false;
  bool bf16 = false;
};

// A Hugging Face model directory as one of our checkpoints.
void convert_from_hf(const ConvertArgs& a) {
  GPT_CHECK(!a.bf16 && a.context == 0, "convert: --bf16 and --context apply to llm.c files; --from-hf takes "
            "--hf-context for the 1x length");
  const HfModel hf(a.from_hf, HfOpenOptions{a.hf_context});
  Checkpoint ckpt = hf.to_checkpoint();
  if (a.with_optimizer) add_zero_moments(ckpt);
  save_checkpoint(a.out, ckpt);
  const LoadedModel lm = load_model(a.out);
  std::cout << "wrote " << a.out << ": " << hf.model_type() << ", " << lm.model->num_params() << " parameters, "
            << block_summary(lm.config.model) << ", context " << lm.config.model.context
            << (a.with_optimizer ? ", zero AdamW moments" : "") << "\n";
}

// One of our checkpoints as a Hugging Face model directory.
void convert_to_hf(const ConvertArgs& a) {
  GPT_CHECK(a.context == 0 && !a.with_optimizer, "convert: --context and --with-optimizer apply to imports");
  const std::string path = resolve_checkpoint(a.to_hf);
  const Checkpoint ckpt = load_checkpoint(path);
  const HfExport e = export_hf(ckpt, path, a.out, a.bf16);
  // Read it back as eval and sample would, so that a directory this build
  // cannot load is reported here.
  const HfModel back(a.out);
  std::cout << "wrote " << a.out << ": " << e.model_type << ", " << e.tensors << " tensors ("
            << (a.bf16 ? "bfloat16" : "float32") << "), " << block_summary(back.config().model)
            << (e.tokenizer ? ", tokenizer files" : ", no tokenizer files (the run's tokenizer is not hf:DIR)")
            << "\n";
}

void run_convert(const ConvertArgs& a) {
  GPT_CHECK(!a.from_llmc.empty() + !a.to_llmc.empty() + !a.from_hf.empty() + !a.to_hf.empty() == 1,
            "convert: give exactly one of --from-llmc MODEL.bin, --from-hf HF_DIR (imports), --to-llmc CHECKPOINT or "
            "--to-hf CHECKPOINT (exports)");
  GPT_CHECK(a.hf_context == 0 || !a.from_hf.empty(), "convert: --hf-context applies to --from-hf");
  if (!a.from_hf.empty()) return convert_from_hf(a);
  if (!a.to_hf.empty()) return convert_to_hf(a);
  if (!a.from_llmc.empty()) {
    GPT_CHECK(!a.bf16, "convert: --bf16 applies to --to-llmc (an import keeps float32 values)");
    LlmcImportOptions opt;
    opt.context = a.context;
    opt.with_optimizer = a.with_optimizer;
    const LlmcHeader h = read_llmc_header(a.from_llmc);
    spdlog::info("{}: llm.c version {} ({}), T={} V={} L={} H={} C={} Vp={}, {} parameters", a.from_llmc, h.version,
                 h.version == kLlmcVersionF32 ? "float32" : "bfloat16", h.max_seq_len, h.vocab_size, h.n_layer,
                 h.n_head, h.n_embd, h.padded_vocab, llmc_param_count(h));
    save_checkpoint(a.out, import_llmc(a.from_llmc, opt));
    // Read it back the way eval and sample do, so a file that this build
    // could not use is reported here rather than later.
    const LoadedModel lm = load_model(a.out);
    std::cout << "wrote " << a.out << ": " << lm.model->num_params() << " parameters, learned positions ("
              << lm.config.model.position_rows() << "), context " << lm.config.model.context << ", softmax attention"
              << (a.with_optimizer ? ", zero AdamW moments" : "") << "\n";
  } else {
    GPT_CHECK(a.context == 0 && !a.with_optimizer, "convert: --context and --with-optimizer apply to --from-llmc");
    const std::string path = resolve_checkpoint(a.to_llmc);
    const Checkpoint ckpt = load_checkpoint(path);
    const int version = a.bf16 ? kLlmcVersionBF16 : kLlmcVersionF32;
    export_llmc(ckpt, path, a.out, version);
    const LlmcHeader h = read_llmc_header(a.out);
    std::cout << "wrote " << a.out << ": llm.c version " << h.version << " (" << (a.bf16 ? "bfloat16" : "float32")
              << "), T=" << h.max_seq_len << " V=" << h.vocab_size << " L=" << h.n_layer << " H=" << h.n_head
              << " C=" << h.n_embd << " Vp=" << h.padded_vocab << "\n";
  }
}

}  // namespace

void add_convert(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd =
      app.add_subcommand("convert", "Import an llm.c GPT-2 checkpoint or a Hugging Face model; export a model to llm.c's or Hugging Face's format");
  cmd->add_option("--from-llmc", args->from_llmc, "llm.c checkpoint (version 3 float32 or 5 bfloat16) to import")
      ->type_name("MODEL.bin");
  cmd->add_option("--to-llmc", args->to_llmc,
                  "Checkpoint or run directory to export (learned positions and softmax attention only)")
      ->type_name("CHECKPOINT");
  cmd->add_option("--from-hf", args->from_hf,
                  "Hugging Face model directory (config.json + model.safetensors) to import (docs/hf_models.md)")
      ->type_name("HF_DIR");
  cmd->add_option("--to-hf", args->to_hf,
                  "Checkpoint or run directory to export as a Hugging Face model directory OUT (config.json, "
                  "model.safetensors, the tokenizer files of an hf:DIR tokenizer)")
      ->type_name("CHECKPOINT");
  cmd->add_option("--hf-context", args->hf_context,
                  "--from-hf: model.context of the result (default: config.json's max_position_embeddings)")
      ->check(positive());
  cmd->add_option("out", args->out, "Output: our checkpoint (imports), an llm.c file (--to-llmc) or a directory (--to-hf)")->required();
  cmd->add_option("--context", args->context, "Import: model.context of the result (default and maximum: llm.c's T)")
      ->check(positive());
  cmd->add_flag("--with-optimizer", args->with_optimizer,
                "Import: add zero AdamW moments, so `gpt train --resume OUT` can fine-tune the model");
  cmd->add_flag("--bf16", args->bf16, "Export: write bfloat16 (llm.c version 5, or BF16 safetensors; round to nearest even) instead of float32");
  cmd->callback([args] { run_convert(*args); });
}

}  // namespace gpt::cli
