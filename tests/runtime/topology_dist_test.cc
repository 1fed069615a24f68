// The cluster's link tiers at run time: the trainer resolves the Reshards of every step with the
// cluster spec (DistOptions::topology, `hspmd train --cluster`), so the BSR's link heuristic picks a
// sender on the receiver's node, as `hspmd explain --cluster` prints.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "hspmd/resolve/topology.h"
#include "hspmd/runtime/dist_trainer.h"
#include "runtime/dist_run_testlib.h"

namespace hspmd::runtime {
namespace {

using testing::dist_options;
using testing::expect_matches_single_process;
using testing::RunOptions;
using testing::strategy;

// A TP 2 stage [0, 1] hands its output (the same on both) to a stage on rank 2 alone: a BSR with two
// possible senders. Rank 1 shares rank 2's node, rank 0 does not.
constexpr const char* kTp2ThenOne = R"({"name": "tp2-then-one", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2,
     "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2", "layers": "2-3"}]}]})";
constexpr const char* kCrossedNodes = R"({"name": "crossed", "devices": [
    {"id": 0, "node": 0, "type": "cpu"}, {"id": 1, "node": 1, "type": "cpu"}, {"id": 2, "node": 1, "type": "cpu"}],
    "intra_node_bandwidth": 1e10, "inter_node_bandwidth": 1e9})";
constexpr const char* kStageBoundary = "model.layers.1.output";  // the forward Reshard into rank 2's stage

// Names of the Reshards each rank took part in (its "comm" trace spans) over a 2-step run.
std::vector<std::set<std::string>> reshards_per_rank(const resolve::Topology* topology) {
  std::vector<std::set<std::string>> names(3);
  RunOptions ro;
  ro.configure = [&](int, DistOptions& o) {
    o.trace = true;
    o.topology = topology;
  };
  ro.after = [&](DistTrainer& t) {
    for (const TraceEvent& e : t.tracer().events()) {
      if (e.category == "comm") names[t.rank()].insert(e.name);
    }
  };
  const testing::DistRun r = testing::run(strategy(kTp2ThenOne), dist_options(2), ro);
  expect_matches_single_process(r, 2);
  return names;
}

TEST(RunTimeTopology, StepReshardsSendFromTheOwnerOnTheReceiversNode) {
  const resolve::Topology crossed = resolve::Topology::from_json_text(kCrossedNodes, "crossed");
  const std::vector<std::set<std::string>> with = reshards_per_rank(&crossed);
  EXPECT_TRUE(with[2].count(kStageBoundary));
  EXPECT_TRUE(with[1].count(kStageBoundary)) << "rank 1, on rank 2's node, sends";
  EXPECT_FALSE(with[0].count(kStageBoundary)) << "rank 0, on another node, takes no part";
  // Without the cluster every link counts the same and the lowest owner sends: the test above
  // would pass by chance if the heuristic ignored the tiers.
  const std::vector<std::set<std::string>> without = reshards_per_rank(nullptr);
  EXPECT_TRUE(without[0].count(kStageBoundary));
  EXPECT_FALSE(without[1].count(kStageBoundary));
}

}  // namespace
}  // namespace hspmd::runtime
