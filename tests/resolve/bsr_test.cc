// BSR table, scheme heuristics (§5.3) and the fused BSR of §7.
#include <gtest/gtest.h>

#include "hspmd/core/error.h"
#include "hspmd/resolve/bsr_scheme.h"
#include "hspmd/resolve/bsr_table.h"
#include "hspmd/resolve/fused_bsr.h"

namespace hspmd::resolve {
namespace {

using sharding::Annotation;

Annotation A(const char* text) { return Annotation::parse(text); }

TEST(BsrTable, FinestSlicesOwnersAndReceivers) {
  BsrTable t;
  t.add("W", A("dup{[0-1](S0:2)}"), A("dup{[2-3](S1:2)}"), Shape{4, 4}, 4);
  ASSERT_EQ(t.entries().size(), 4u);
  EXPECT_EQ(t.entries()[1].slice().to_string(), "[0:2, 2:4]");
  EXPECT_EQ(t.entries()[1].owners(), std::vector<int>{0});
  EXPECT_EQ(t.entries()[1].receivers(), std::vector<int>{3});
  EXPECT_EQ(t.entries()[1].bytes(), 16);
  // Slices nobody needs are left out; duplicated owners are all listed.
  BsrTable u;
  u.add("V", A("dup{[0-1](D:2)}"), A("split0{[2]();[3]()}"), Shape{4}, 2);
  ASSERT_EQ(u.entries().size(), 2u);
  EXPECT_EQ(u.entries()[1].receivers(), std::vector<int>{3});
  BsrTable half;
  half.add("H", A("dup{[0-1](S0:2)}"), A("dup{[2]()}").with_hdim(-1), Shape{4}, 4);
  half.add("H2", A("dup{[0-1](S0:2)}"), A("split0{[2]();[5]()}"), Shape{4}, 4);
  EXPECT_EQ(half.entries().size(), 4u);
  EXPECT_EQ(half.entries()[3].tensor, 1);
  EXPECT_EQ(half.tensor_names()[1], "H2");
  EXPECT_EQ(u.entries()[0].owners(), (std::vector<int>{0, 1}));
  EXPECT_THROW(u.add("P", A("dup{[0-1](P:2)}"), A("dup{[2-3](D:2)}"), Shape{4}, 4), Error);
}

TEST(BsrScheme, OwnedSliceIsCopiedLocally) {
  BsrTable t;
  t.add("W", A("dup{[0-1](D:2)}"), A("dup{[1-2](S0:2)}"), Shape{4}, 4);
  BsrScheme s = plan_bsr(t, nullptr);
  // Device 1 owns everything and needs [0:2]: local copy; device 2 gets [2:4] from someone.
  ASSERT_EQ(s.transfers.size(), 2u);
  EXPECT_EQ(s.transfers[0].sender, 1);
  EXPECT_EQ(s.transfers[0].receiver, 1);
  EXPECT_EQ(s.bytes_sent[1] + s.bytes_sent[0], 8);
  DeviceOps ops = s.device_ops(t);
  EXPECT_EQ(ops[1].front().to_string(), "LocalCopy [0:2] bytes=0");
  // The baseline without heuristics copies owned slices locally too; only the rest differs.
  BsrScheme naive = plan_bsr(t, nullptr, BsrPolicy::kLowestOwner);
  EXPECT_EQ(naive.transfers[0].sender, 1);
  EXPECT_EQ(naive.transfers[0].receiver, 1);
  EXPECT_EQ(naive.transfers[1].sender, 0);
  EXPECT_EQ(naive.bytes_sent[0], 8);
  EXPECT_EQ(naive.bytes_sent[1], 0);
}

TEST(BsrScheme, FastestLinkIsPreferred) {
  // Devices 0,1 own W; 2 needs it. 1 -> 2 is NVLink-fast, 0 -> 2 slow.
  Topology topo = Topology::from_json_text(R"({"devices": [{"id": 0, "node": 0, "type": "a"},
      {"id": 1, "node": 1, "type": "a"}, {"id": 2, "node": 1, "type": "a"}],
      "intra_node_bandwidth": 4e11, "inter_node_bandwidth": 5e10})", "t.json");
  BsrTable t;
  t.add("W", A("dup{[0-1](D:2)}"), A("dup{[2]()}"), Shape{8}, 4);
  BsrScheme s = plan_bsr(t, &topo);
  ASSERT_EQ(s.transfers.size(), 1u);
  EXPECT_EQ(s.transfers[0].sender, 1);
  EXPECT_EQ(plan_bsr(t, nullptr).transfers[0].sender, 0);  // uniform links: lowest id on a full tie
}

TEST(BsrScheme, TiesAreBalancedBySentBytes) {
  // Figure 11: GPUs 1 and 2 both own everything and send alternately.
  BsrTable t;
  t.add("W", A("dup{[1-2](D:2)}"), A("dup{[4-7](S0:4)}"), Shape{8, 2}, 4);
  BsrScheme s = plan_bsr(t, nullptr);
  std::vector<int> senders;
  for (const BsrTransfer& x : s.transfers) senders.push_back(x.sender);
  EXPECT_EQ(senders, (std::vector<int>{1, 2, 1, 2}));
  EXPECT_EQ(s.bytes_sent[1], 32);
  EXPECT_EQ(s.bytes_sent[2], 32);
  EXPECT_EQ(s.pair_bytes(t).at({2, 7}), 16);
}

TEST(FusedBsr, OneSchemeOneMessagePerPair) {
  // Two tensors, each owned by 0 and 1 and needed by 2 and 3.
  std::vector<FusedTensor> ts = {{"a", Shape{4}, A("dup{[0-1](D:2)}"), A("dup{[2-3](D:2)}"), 4},
                                 {"b", Shape{2, 2}, A("dup{[0-1](D:2)}"), A("dup{[2-3](S0:2)}"), 4}};
  FusedBsr fused = plan_fused_bsr(ts, nullptr);
  // Scan: a->2 from 0, a->3 from 1, b[0:1]->2 from 0, b[1:2]->3 from 1: one message per pair.
  ASSERT_EQ(fused.messages().size(), 2u);
  EXPECT_EQ(fused.messages()[0].sender, 0);
  EXPECT_EQ(fused.messages()[0].receiver, 2);
  EXPECT_EQ(fused.messages()[0].bytes, 16 + 8);
  EXPECT_EQ(fused.messages()[0].pieces, 2);
  EXPECT_EQ(fused.ops[2].size(), 1u);
  EXPECT_EQ(fused.ops[2][0].to_string(), "Recv peer=0 [0:4] t1:[0:1, 0:2] bytes=0");
  EXPECT_EQ(fused.total_bytes(), 48);
  // Per tensor, lowest owner: device 0 sends everything, in one message per tensor and pair.
  FusedBsr naive = plan_fused_bsr(ts, nullptr, {BsrPolicy::kLowestOwner, false, {}});
  EXPECT_EQ(naive.messages().size(), 4u);
  EXPECT_EQ(naive.bytes_sent.at(0), 48);
  EXPECT_EQ(naive.bytes_sent.count(1), 0u);
}

TEST(FusedBsr, DeadRanksNeverSend) {
  // Elastic recovery: device 1 failed; everything it held must come from its replica 0.
  std::vector<FusedTensor> ts = {{"w", Shape{4}, A("dup{[0-1](D:2)}"), A("dup{[2-3](S0:2)}"), 4}};
  FusedBsr live = plan_fused_bsr(ts, nullptr);
  EXPECT_EQ(live.bytes_sent.at(1), 8);
  FusedBsrOptions o;
  o.dead = {1};
  FusedBsr f = plan_fused_bsr(ts, nullptr, o);
  EXPECT_EQ(f.bytes_sent.at(0), 16);
  EXPECT_EQ(f.bytes_sent.count(1), 0u);
  o.dead = {0, 1};
  try {
    plan_fused_bsr(ts, nullptr, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no (live) source device owns it"), std::string::npos) << e.what();
  }
}

TEST(FusedBsr, FusingBalancesLoadAcrossTensors) {
  // Each tensor alone ties, and per-tensor scans all pick device 0; one fused scan alternates.
  std::vector<FusedTensor> ts;
  for (const char* name : {"t0", "t1", "t2", "t3"}) ts.push_back({name, Shape{4}, A("dup{[0-1](D:2)}"), A("dup{[2]()}"), 4});
  FusedBsr fused = plan_fused_bsr(ts, nullptr);
  EXPECT_EQ(fused.bytes_sent.at(0), 32);
  EXPECT_EQ(fused.bytes_sent.at(1), 32);
  FusedBsr per_tensor = plan_fused_bsr(ts, nullptr, {BsrPolicy::kHeuristic, false, {}});
  EXPECT_EQ(per_tensor.bytes_sent.at(0), 64);
  EXPECT_EQ(per_tensor.messages().size(), 4u);
}

}  // namespace
// The paper's three algorithms by name, on two hosts: devices 0-1 on node 0, 2-3 on node 1, every
// tensor replicated on 0 and 2 and wanted whole on 3. The lowest owner (0) sends across the slow
// link; the heuristics pick 2 on the receiver's node; only the fused scan also balances senders.
TEST(FusedBsr, ThreeAlgorithmsByName) {
  Topology topo = Topology::from_json_text(R"({"devices": [{"id": 0, "node": 0, "type": "a"},
      {"id": 1, "node": 0, "type": "a"}, {"id": 2, "node": 1, "type": "a"}, {"id": 3, "node": 1, "type": "a"}],
      "intra_node_bandwidth": 100e9, "inter_node_bandwidth": 10e9})", "two-hosts");
  std::vector<FusedTensor> ts;
  for (const char* name : {"t0", "t1"}) ts.push_back({name, Shape{4}, A("dup{[0,2](D:2)}"), A("dup{[3]()}"), 4});
  ts.push_back({"t2", Shape{4}, A("dup{[2-3](D:2)}"), A("dup{[0-1](D:2)}"), 4});  // 2 and 3 both hold it
  auto plan = [&](const char* name) {
    EXPECT_EQ(bsr_algorithm_name(parse_bsr_algorithm(name)), name);
    return plan_fused_bsr(ts, &topo, bsr_algorithm_options(parse_bsr_algorithm(name)));
  };
  const FusedBsr lowest = plan("per-tensor-lowest-owner");
  EXPECT_EQ(lowest.bytes_sent.at(0), 32) << "t0 and t1 from device 0, across the hosts";
  const FusedBsr per_tensor = plan("per-tensor");
  EXPECT_EQ(per_tensor.bytes_sent.count(0), 0u) << "the heuristics send from the receiver's node";
  EXPECT_EQ(per_tensor.bytes_sent.at(2), 16 + 32) << "t0, t1 and half of t2 from 2: each tensor's scan forgets what 2 sent for the others";
  const FusedBsr fused = plan("fused");
  EXPECT_EQ(fused.bytes_sent.count(0), 0u);
  EXPECT_EQ(fused.bytes_sent.at(2), 32) << "t0, t1 from 2 (same node as 3)";
  EXPECT_EQ(fused.bytes_sent.at(3), 32) << "t2 from 3, which has sent less so far";
  EXPECT_THROW(parse_bsr_algorithm("fastest"), Error);
}

}  // namespace hspmd::resolve
