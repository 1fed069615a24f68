// The cluster-spec input the topology fuzzer (fuzz/topology_fuzz.cc) found: refused with a clean
// hspmd::Error naming the file instead of ending in std::terminate.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "hspmd/core/error.h"
#include "hspmd/resolve/topology.h"

namespace hspmd::resolve {
namespace {

namespace fs = std::filesystem;

TEST(TopologyFuzzRegression, EveryFoundInputIsAnError) {
  const fs::path dir =
      fs::path(__FILE__).parent_path().parent_path().parent_path() / "fuzz/regressions/topology";
  int inputs = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::stringstream text;
    text << std::ifstream(entry.path(), std::ios::binary).rdbuf();
    try {
      Topology::from_json_text(text.str(), "cluster.json");
      ADD_FAILURE() << entry.path() << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cluster.json"), std::string::npos) << e.what();
    }
    ++inputs;
  }
  EXPECT_GE(inputs, 1);
}

}  // namespace
}  // namespace hspmd::resolve
