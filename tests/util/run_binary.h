// Runs the gpt binary built with the tests (GPT_BINARY), or any command
// line, and captures its exit status and combined stdout/stderr.
#pragma once
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

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

// Starts the gpt binary with `args` in the background, stdout and stderr to
// the file `log`; returns its pid (0 if it could not start).
inline pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> all = {GPT_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, GPT_BINARY, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : 0;
}

}  // namespace gpt::test
