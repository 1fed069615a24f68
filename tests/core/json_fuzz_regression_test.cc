// Inputs the fuzzers (fuzz/, scripts/fuzz.sh) found, kept in fuzz/regressions/TARGET/: each must
// now be refused with a clean hspmd::Error by the JSON reader every user-file parser shares.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "hspmd/core/error.h"
#include "hspmd/core/json_file.h"

namespace hspmd {
namespace {

namespace fs = std::filesystem;

const fs::path kRegressions = fs::path(__FILE__).parent_path().parent_path().parent_path() / "fuzz/regressions";

std::string slurp(const fs::path& p) {
  std::stringstream s;
  s << std::ifstream(p, std::ios::binary).rdbuf();
  return s.str();
}

// A number too large for a double ("85E520809984") made nlohmann::json throw out_of_range, which
// parse_json_object did not catch: std::terminate in the topology and emulated-device fuzzers.
TEST(JsonFuzzRegression, NumberOverflowIsAnErrorNamingTheSource) {
  int inputs = 0;
  for (const char* target : {"topology", "emulation"}) {
    for (const auto& entry : fs::directory_iterator(kRegressions / target)) {
      std::string text = slurp(entry.path());
      if (std::string(target) == "emulation") text.erase(0, 1);  // the fuzzer's first byte picks the world size
      try {
        parse_json_object(text, "fuzz.json");
        ADD_FAILURE() << entry.path() << " parsed";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("fuzz.json: not valid JSON"), std::string::npos) << e.what();
      }
      ++inputs;
    }
  }
  EXPECT_GE(inputs, 2);
  EXPECT_THROW(parse_json_object(R"({"memory": 1E999})", "x.json"), Error);
}

TEST(JsonFuzzRegression, PositiveIntBeyondIntIsRefusedNotTruncated) {
  const nlohmann::json j = parse_json_object(R"({"micro_batches": 4294967297})", "s.json");
  EXPECT_THROW(json_positive_int(j, "micro_batches", "s.json"), Error);  // was 1 after truncation
}

}  // namespace
}  // namespace hspmd
