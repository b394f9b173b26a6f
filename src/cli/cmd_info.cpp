#include <omp.h>

#include <iostream>

#include "cli/commands.h"
#include "config/config.h"
#include "convert/hf.h"
#include "dist/communicator.h"
#ifdef GPT_HAVE_CUDA
#include "kernels/cuda/device_info.h"
#endif

namespace gpt::cli {

void add_info(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("info", "Show the build and the devices this binary can use");
  auto keys = std::make_shared<bool>(false);
  cmd->add_flag("--config-keys", *keys, "Print every config key (type, default, allowed values) as a markdown table");
  auto hf = std::make_shared<std::string>();
  cmd->add_option("--hf", *hf,
                  "Print the model, context and data.tokenizer settings a Hugging Face model directory maps to (a "
                  "config to fine-tune it with train.init_from = HF_DIR)")
      ->type_name("HF_DIR");
  cmd->callback([keys, hf] {
    if (*keys) {
      std::cout << config_reference_markdown();
      return;
    }
    if (!hf->empty()) {
      const HfModel m(*hf);
      const nlohmann::json c = config_to_json(m.config()), plain = config_to_json(Config{});
      nlohmann::json out = {{"model", c["model"]}, {"train", {{"init_from", *hf}}}};
      for (const auto& [k, v] : c["context"].items())  // the context keys the model's own RoPE scaling sets
        if (plain["context"][k] != v) out["context"][k] = v;
      if (c["data"]["tokenizer"] != plain["data"]["tokenizer"]) out["data"]["tokenizer"] = c["data"]["tokenizer"];
      std::cout << out.dump(2) << "\n";
      return;
    }
    std::cout << "gpt (C++" << __cplusplus / 100 % 100 << ")\n";
    std::cout << "cpu: " << omp_get_num_procs() << " processors, " << omp_get_max_threads() << " OpenMP threads\n";
#ifdef GPT_HAVE_CUDA
    std::cout << "cuda: built in\n" << gpt::cuda::device_report() << "\n";
#else
    std::cout << "cuda: not built (nvcc was not found at configure time)\n";
#endif
    std::cout << "mpi: " << (dist::built_with_mpi() ? "built in" : "not built (MPI was not found at configure time)")
              << "; this process: " << dist::world().name() << ", rank " << dist::world().rank() << " of "
              << dist::world().size() << "\n";
  });
}

}  // namespace gpt::cli
