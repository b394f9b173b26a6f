#include "core/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/check.h"

namespace gpt {

const char* not_a_regular_file(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) return "does not exist";
  if (std::filesystem::is_directory(st)) return "is a directory";
  if (!std::filesystem::is_regular_file(st)) return "is not a regular file";
  return nullptr;
}

DirLock::DirLock(const std::string& dir, const std::string& what) {
  const std::string path = (std::filesystem::path(dir) / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  GPT_CHECK(fd_ >= 0, what, ": cannot create the lock file ", path, ": ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd_, pid, sizeof pid - 1, 0);
    std::string holder = n > 0 ? std::string(pid, static_cast<size_t>(n)) : "";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      fail(what, ": run directory ", dir, " is in use by another gpt process",
           holder.empty() ? "" : " (pid " + holder + ")",
           "; two trainers in one directory would overwrite each other's checkpoints and log. Wait for it to end, "
           "or choose another run.dir");
    fail(what, ": cannot lock ", path, ": ", std::strerror(err));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // The lock holds without the pid; only the message of a second process loses it.
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

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
