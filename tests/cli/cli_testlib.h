// Helpers of the command-line tests: a unique temp directory per test, the repository's files, and
// the built `hspmd` run with its stdout and stderr kept apart (an error must be one stderr line).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace hspmd::cli::testing {

struct RunResult {
  int code = -1;  // exit status; -1 when killed by a signal
  std::string out, err;
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override;     // makes a fresh mkdtemp directory; fails when hspmd is not built
  void TearDown() override;  // removes it
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write_file(const std::string& name, const std::string& text) const;
  // `hspmd <args>` with stdout and stderr captured separately; `environment` ("NAME=value ...")
  // is set for that run only.
  RunResult run(const std::string& args, const std::string& environment = "") const;

  std::filesystem::path dir_;
};

// The repository root, and a path inside it.
std::filesystem::path source_dir();
std::string source_file(const std::string& relative);

}  // namespace hspmd::cli::testing
