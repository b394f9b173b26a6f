#include "core/files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/check.h"

namespace gpt {

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    GPT_CHECK(out, "cannot write ", tmp, ": ", std::strerror(errno));
    out << text;
    GPT_CHECK(out.flush(), "cannot write ", tmp, ": ", std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  GPT_CHECK(!ec, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

void write_json_file(const std::string& path, const nlohmann::json& j) { write_file_atomic(path, j.dump(2) + "\n"); }

}  // namespace gpt
