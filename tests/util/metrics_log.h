// Reading a run's metrics.jsonl in tests.
#pragma once
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace gpt::test {

// step -> training loss; the last record of a step counts (a resumed run appends).
inline std::map<int, double> train_losses(const std::filesystem::path& run_dir) {
  std::map<int, double> losses;
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["event"] == "train") losses[j["step"].get<int>()] = j["loss"].get<double>();
  }
  return losses;
}

}  // namespace gpt::test
