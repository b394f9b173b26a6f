// metrics.jsonl: one JSON object per line and event (train step, eval,
// checkpoint), flushed as written so that an interrupted run keeps its log.
#pragma once
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace gpt {

class MetricsLog {
 public:
  // append = false truncates an existing log.
  explicit MetricsLog(const std::string& path, bool append = true)
      : path_(path), out_(path, append ? std::ios::app : std::ios::trunc) {
    GPT_CHECK(out_, "cannot open ", path, " for writing");
  }
  // A failed write (a full disk) is an error: a run must not go on without
  // its log.
  void write(const nlohmann::json& event) {
    errno = 0;
    out_ << event.dump() << '\n';
    out_.flush();
    GPT_CHECK(out_, "cannot write the metrics log ", path_, ": ", errno ? std::strerror(errno) : "write failed",
              "; the run stops rather than go on without its log");
  }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace gpt
