// metrics.jsonl: one JSON object per line and event (train step, eval,
// checkpoint), flushed as written so that an interrupted run keeps its log.
#pragma once
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace gpt {

class MetricsLog {
 public:
  explicit MetricsLog(const std::string& path) : out_(path, std::ios::app) {
    GPT_CHECK(out_, "cannot open ", path, " for writing");
  }
  void write(const nlohmann::json& event) {
    out_ << event.dump() << '\n';
    out_.flush();
  }

 private:
  std::ofstream out_;
};

}  // namespace gpt
