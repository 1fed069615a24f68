#include "cli/cli_testlib.h"

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "run_hspmd.h"

namespace hspmd::cli::testing {

namespace fs = std::filesystem;

void CliTest::SetUp() {
  // mkdtemp: concurrent test processes (ctest -j) never share a directory.
  std::string pattern = (fs::temp_directory_path() / "hspmd_cli_test.XXXXXX").string();
  ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
  dir_ = pattern;
  ASSERT_TRUE(fs::exists(hspmd::testing::hspmd_binary()))
      << hspmd::testing::hspmd_binary() << " not built (or HSPMD_BINARY_DIR unset: run through ctest)";
}

void CliTest::TearDown() {
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
}

std::string CliTest::write_file(const std::string& name, const std::string& text) const {
  const std::string p = path(name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

RunResult CliTest::run(const std::string& args, const std::string& environment) const {
  const std::string out = path(".stdout"), err = path(".stderr");
  const int status =
      std::system((environment + " " + hspmd::testing::hspmd_binary() + " " + args + " >" + out + " 2>" + err).c_str());
  auto slurp = [](const std::string& p) {
    std::stringstream s;
    s << std::ifstream(p).rdbuf();
    return s.str();
  };
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

fs::path source_dir() {
  // This file is tests/cli/cli_testlib.cc; CMake compiles it by absolute path.
  return fs::path(__FILE__).parent_path().parent_path().parent_path();
}

std::string source_file(const std::string& relative) { return (source_dir() / relative).string(); }

}  // namespace hspmd::cli::testing
