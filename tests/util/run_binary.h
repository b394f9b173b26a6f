// Runs the gpt binary built with the tests (GPT_BINARY), or any command
// line, and captures its exit status and combined stdout/stderr.
#pragma once
#include <sys/wait.h>

#include <cstdio>
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

// The gpt binary with these arguments.
inline Result run(const std::string& args) { return run_command(std::string(GPT_BINARY) + " " + args); }

}  // namespace gpt::test
