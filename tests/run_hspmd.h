// Runs the built `hspmd` executable (from $HSPMD_BINARY_DIR, which ctest sets) through the shell,
// for tests of the command line: exit code and everything it printed.
//
//   CommandResult r = run_hspmd("explain --model configs/llama-tiny.json --strategy s.json");
//   EXPECT_EQ(r.code, 0) << r.output;
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace hspmd::testing {

struct CommandResult {
  int code = -1;       // exit status; -1 when killed by a signal or not started
  std::string output;  // stdout and stderr together
};

inline std::string hspmd_binary() {
  const char* dir = std::getenv("HSPMD_BINARY_DIR");
  return std::string(dir ? dir : ".") + "/hspmd";
}

inline CommandResult run_hspmd(const std::string& args) {
  const std::string cmd = hspmd_binary() + " " + args + " 2>&1";
  CommandResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace hspmd::testing
