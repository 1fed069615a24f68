#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "hspmd/core/error.h"
#include "hspmd/resolve/topology.h"

namespace hspmd::resolve {
namespace {

std::string error_of(const std::string& text) {
  try {
    Topology::from_json_text(text, "c.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Topology, LinksByNodeAndTypeOrMatrix) {
  Topology t = Topology::from_json_text(R"({"name": "mixed", "devices": [
      {"id": 0, "node": 0, "type": "H800", "memory": 8.1559e10, "peak_flops": 9.9e14},
      {"id": 1, "node": 0, "type": "H800"}, {"id": 2, "node": 1, "type": "H20"}, {"id": 3, "node": 1, "type": "H20"}],
      "intra_node_bandwidth": {"H800": 4e11, "H20": 9e11}, "inter_node_bandwidth": 5e10})", "c.json");
  EXPECT_EQ(t.name(), "mixed");
  EXPECT_EQ(t.num_devices(), 4);
  EXPECT_EQ(t.bandwidth(0, 1), 4e11);
  EXPECT_EQ(t.bandwidth(2, 3), 9e11);
  EXPECT_EQ(t.bandwidth(1, 2), 5e10);
  EXPECT_EQ(t.tier(1, 2), LinkTier::kInterNode);
  EXPECT_EQ(t.tier(3, 2), LinkTier::kIntraNode);
  EXPECT_EQ(t.tier(3, 3), LinkTier::kLocal);
  EXPECT_EQ(t.device(0).peak_flops, 9.9e14);
  Topology m = Topology::from_json_text(R"({"devices": [{"id": 1, "node": 0, "type": "x"}, {"id": 0, "node": 0, "type": "x"}],
      "bandwidth_matrix": [[0, 3], [5, 0]]})", "m.json");
  EXPECT_EQ(m.bandwidth(0, 1), 3);
  EXPECT_EQ(m.bandwidth(1, 0), 5);
  EXPECT_THROW(m.bandwidth(0, 2), Error);
}

TEST(Topology, ErrorsNameTheKey) {
  EXPECT_NE(error_of(R"({"devices": []})").find("c.json: \"devices\" must be a non-empty array"), std::string::npos);
  EXPECT_NE(error_of(R"({"devices": [{"id": 1, "node": 0, "type": "x"}]})").find("devices[0].id: 1 must be unique"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"devices": [{"id": 0, "type": "x"}]})").find("devices[0]: needs a non-negative integer \"node\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"devices": [{"id": 0, "node": 0, "type": "x"}], "inter_node_bandwidth": 1})")
                .find("missing \"intra_node_bandwidth\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"devices": [{"id": 0, "node": 0, "type": "x"}, {"id": 1, "node": 0, "type": "y"}],
      "intra_node_bandwidth": {"x": 1}, "inter_node_bandwidth": 1})").find("no entry for device type \"y\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"devices": [{"id": 0, "node": 0, "type": "x"}, {"id": 1, "node": 0, "type": "x"}],
      "bandwidth_matrix": [[0, -1], [1, 0]]})").find("bandwidth_matrix[0][1]: expected a positive number"),
            std::string::npos);
}

TEST(Topology, ShippedClusterSpecsLoad) {
  // tests/resolve/topology_test.cc -> repository root
  const std::string root = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
  Topology paper = Topology::from_file(root + "/examples/clusters/paper-16h800-32h20.json");
  EXPECT_EQ(paper.num_devices(), 48);
  EXPECT_EQ(paper.device(0).type, "H800");
  EXPECT_EQ(paper.device(47).type, "H20");
  EXPECT_EQ(paper.device(47).node, 5);
  EXPECT_EQ(paper.bandwidth(0, 7), 4e11);
  EXPECT_EQ(paper.bandwidth(16, 23), 9e11);
  EXPECT_EQ(paper.tier(7, 8), LinkTier::kInterNode);
  Topology local = Topology::from_file(root + "/examples/clusters/local-cpu-4.json");
  EXPECT_EQ(local.num_devices(), 4);
  EXPECT_EQ(local.tier(0, 3), LinkTier::kIntraNode);
}

}  // namespace
}  // namespace hspmd::resolve
