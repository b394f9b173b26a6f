// Small files of a run directory (config.json, results, checkpoints/latest),
// written atomically: to PATH.tmp, then renamed over PATH, so a reader or a
// crash never sees half of one.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace gpt {

// An exclusive lock on DIR/.lock (flock), held for the object's lifetime:
// a second process that asks for the same directory is refused at once with
// the holder's pid. The kernel releases the lock when the holder exits, even
// on kill -9, so a lock file left by a dead process is simply taken over.
class DirLock {
 public:
  // what: who asks, for the message ("train").
  DirLock(const std::string& dir, const std::string& what);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

// Why `path` cannot be read as a regular file: "does not exist", "is a
// directory" or "is not a regular file" (a FIFO, socket or device, which
// would block a read or never end); nullptr when it can. Checked before
// opening, so that nothing blocks.
const char* not_a_regular_file(const std::string& path);

void write_file_atomic(const std::string& path, const std::string& text);
// Pretty-printed JSON (2-space indent) and a final newline.
void write_json_file(const std::string& path, const nlohmann::json& j);

}  // namespace gpt
