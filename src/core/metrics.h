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
  // append = false truncates an existing log.
  explicit MetricsLog(const std::string& path, bool append = true)
      : out_(path, append ? std::ios::app : std::ios::trunc) {
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
