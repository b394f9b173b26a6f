// Runs the gpt binary built with the tests (GPT_BINARY), or any command
// line, and captures its exit status and combined stdout/stderr.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

namespace gpt::test {

struct Result {
  int status = -1;  // exit status; -1 if killed by a signal
  std::string output;
};

// Any shell command line (e.g. mpirun ... gpt ...), stderr merged into stdout.
inline Result run_command(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  Result r;
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int w = ::pclose(p);
  r.status = WIFEXITED(w) ? WEXITSTATUS(w) : -1;
  return r;
}

// The full path of an executable found in PATH (e.g. mpirun), or "".
inline std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::filesystem::path p = std::filesystem::path(dir) / name;
    if (!dir.empty() && ::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

// The gpt binary with these arguments.
inline Result run(const std::string& args) {
  // Appended in place: GCC 12 warns (-Warray-bounds, a false positive) on
  // the temporaries of std::string(GPT_BINARY) + " " + args in some TUs.
  std::string cmd = GPT_BINARY;
  cmd += ' ';
  cmd += args;
  return run_command(cmd);
}

}  // namespace gpt::test
