#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "core/check.h"
#include "data/text_to_shards.h"

namespace gpt::cli {
namespace {

struct DataTextArgs {
  std::string input, out_dir;
  TextToShardsOptions opt;
};

}  // namespace

void add_data(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Prepare datasets");
  data->require_subcommand(1);
  auto args = std::make_shared<DataTextArgs>();
  CLI::App* text = data->add_subcommand("text", "Tokenize a text file into train/val token shards (llm.c format)");
  text->add_option("input", args->input, "Text file")->required()->check(CLI::ExistingFile);
  text->add_option("out_dir", args->out_dir, "Output directory for NAME_val_000000.bin, NAME_train_000001.bin, ...")
      ->required();
  text->add_option("--tokenizer", args->opt.tokenizer, "Tokenizer: byte (256 bytes + end-of-text)")
      ->capture_default_str()
      ->check(CLI::IsMember({"byte"}));
  text->add_option("--val-fraction", args->opt.val_fraction,
                   "Fraction of the text (its end, cut at a line boundary) used for validation, in (0, 1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  text->add_option("--name", args->opt.name, "File name prefix (default: the output directory's name)");
  text->callback([args] {
    const TextToShardsResult r = text_to_shards(args->input, args->out_dir, args->opt);
    spdlog::info("{}: {} training tokens, {} validation tokens", args->input, r.train_tokens, r.val_tokens);
    for (const auto& f : r.files) spdlog::info("wrote {}", f);
  });
}

}  // namespace gpt::cli
