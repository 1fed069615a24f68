// The fused BSR (resolve/fused_bsr.h) against a straightforward computation of the same plan: every
// device's region looked up in the annotation, every finest cell tested against every region, the
// sender of each cell chosen by scanning every owner, and the ops grouped per (device, peer) in
// ordered maps. The product derives each distinct layout once and copies it to the tensors that
// share it, and groups ops through a hash; the plans must still agree message for message: the
// table (tensor, slice, owners, receivers, bytes), every device's ops in order, the messages and
// the bytes each device sends. Cases: heterogeneous unions (groups of 3 and 2 devices, uneven
// slices), tensors sharing a layout with others (and ones that differ only in shape or element
// size), dead ranks, with and without a topology, fused and per tensor, both policies.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "hspmd/core/error.h"
#include "hspmd/resolve/fused_bsr.h"
#include "resolve/resolve_testlib.h"

namespace hspmd::resolve {
namespace {

using sharding::Annotation;
using sharding::Region;

Annotation A(const char* text) { return Annotation::parse(text); }

struct ReferenceEntry {
  int tensor = 0;
  Region slice;
  std::vector<int> owners;
  std::vector<int> receivers;
  int64_t bytes = 0;
};

// Every finest cell of tensor t (row-major over the cut points of every device's region) that some
// destination device needs, with all its live owners; Error when a needed cell has none.
std::vector<ReferenceEntry> reference_entries(const FusedTensor& t, int tensor, const std::vector<int>& dead) {
  std::vector<std::pair<int, Region>> src, dst;
  for (int d : t.src.devices()) {
    if (std::find(dead.begin(), dead.end(), d) == dead.end()) src.emplace_back(d, *t.src.region(d, t.shape));
  }
  for (int d : t.dst.devices()) dst.emplace_back(d, *t.dst.region(d, t.shape));
  const int rank = t.shape.rank();
  std::vector<std::vector<int64_t>> cuts(rank);
  for (int d = 0; d < rank; ++d) {
    std::set<int64_t> c{0, t.shape.dim(d)};
    for (const auto* list : {&src, &dst}) {
      for (const auto& [dev, r] : *list) {
        c.insert(r.begin[d]);
        c.insert(r.end[d]);
      }
    }
    cuts[d].assign(c.begin(), c.end());
  }
  std::vector<ReferenceEntry> out;
  std::vector<size_t> k(rank, 0);
  while (true) {
    ReferenceEntry e{tensor, {}, {}, {}, 0};
    for (int d = 0; d < rank; ++d) {
      e.slice.begin.push_back(cuts[d][k[d]]);
      e.slice.end.push_back(cuts[d][k[d] + 1]);
    }
    for (const auto& [dev, r] : dst) {
      if (r.contains(e.slice)) e.receivers.push_back(dev);
    }
    for (const auto& [dev, r] : src) {
      if (r.contains(e.slice)) e.owners.push_back(dev);
    }
    if (!e.receivers.empty()) {
      HSPMD_CHECK(!e.owners.empty()) << "reference: " << t.name << " " << e.slice.to_string() << " has no owner";
      std::sort(e.owners.begin(), e.owners.end());
      std::sort(e.receivers.begin(), e.receivers.end());
      e.bytes = e.slice.numel() * t.element_size;
      out.push_back(e);
    }
    int d = rank - 1;
    for (; d >= 0; --d) {
      if (++k[d] + 1 < cuts[d].size()) break;
      k[d] = 0;
    }
    if (d < 0) return out;
  }
}

// One scheme over `entries`: (i) local copy, else (ii) fastest link, (iii) fewest bytes sent, lowest
// id; or the lowest owner. Appends its ops, messages and bytes to `out` the way FusedBsr lists them.
void reference_scheme(const std::vector<const ReferenceEntry*>& entries, const Topology* topology, BsrPolicy policy,
                      FusedBsr& out) {
  std::map<int, int64_t> sent;
  std::map<int, CommOp> local;
  std::map<std::pair<int, int>, CommOp> sends, recvs;
  std::map<std::pair<int, int>, BsrMessage> messages;
  for (const ReferenceEntry* e : entries) {
    for (int r : e->receivers) {
      int sender = e->owners.front();
      if (std::find(e->owners.begin(), e->owners.end(), r) != e->owners.end()) {
        sender = r;
      } else if (policy == BsrPolicy::kHeuristic) {
        double best_bw = -1;
        for (int o : e->owners) {
          const double bw = topology ? topology->bandwidth(o, r) : 1.0;
          if (bw > best_bw || (bw == best_bw && sent[o] < sent[sender])) {
            best_bw = bw;
            sender = o;
          }
        }
      }
      const Piece piece{e->tensor, e->slice};
      if (sender == r) {
        local[r].kind = CommKind::kLocalCopy;
        local[r].pieces.push_back(piece);
        continue;
      }
      sent[sender] += e->bytes;
      CommOp& s = sends[{sender, r}];
      s.kind = CommKind::kSend;
      s.peer = r;
      s.pieces.push_back(piece);
      s.bytes += e->bytes;
      CommOp& v = recvs[{r, sender}];
      v.kind = CommKind::kRecv;
      v.peer = sender;
      v.pieces.push_back(piece);
      BsrMessage& m = messages[{sender, r}];
      m = {sender, r, m.bytes + e->bytes, m.pieces + 1};
    }
  }
  for (auto& [dev, op] : local) out.ops[dev].push_back(op);
  for (auto& [key, op] : sends) out.ops[key.first].push_back(op);
  for (auto& [key, op] : recvs) out.ops[key.first].push_back(op);
  for (const auto& [pair, m] : messages) {
    out.message_list.push_back(m);
    out.bytes_sent[m.sender] += m.bytes;
  }
}

void expect_same_as_reference(const std::vector<FusedTensor>& tensors, const Topology* topology,
                              const FusedBsrOptions& options, const std::string& what) {
  std::vector<ReferenceEntry> entries;
  try {
    for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
      for (ReferenceEntry& e : reference_entries(tensors[i], i, options.dead)) entries.push_back(std::move(e));
    }
  } catch (const Error&) {
    EXPECT_THROW(plan_fused_bsr(tensors, topology, options), Error) << what << ": a needed slice has no live owner";
    return;
  }
  FusedBsr want;
  if (options.fuse) {
    std::vector<const ReferenceEntry*> all;
    for (const ReferenceEntry& e : entries) all.push_back(&e);
    reference_scheme(all, topology, options.policy, want);
  } else {
    for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
      std::vector<const ReferenceEntry*> one;
      for (const ReferenceEntry& e : entries) {
        if (e.tensor == i) one.push_back(&e);
      }
      reference_scheme(one, topology, options.policy, want);
    }
  }

  const FusedBsr got = plan_fused_bsr(tensors, topology, options);
  ASSERT_EQ(got.table.entries().size(), entries.size()) << what;
  for (size_t i = 0; i < entries.size(); ++i) {
    const BsrEntry& g = got.table.entries()[i];
    ASSERT_EQ(g.tensor, entries[i].tensor) << what << " entry " << i;
    ASSERT_EQ(g.slice(), entries[i].slice) << what << " entry " << i;
    ASSERT_EQ(g.owners(), entries[i].owners) << what << " entry " << i;
    ASSERT_EQ(g.receivers(), entries[i].receivers) << what << " entry " << i;
    ASSERT_EQ(g.bytes(), entries[i].bytes) << what << " entry " << i;
  }
  ASSERT_EQ(got.table.tensor_names().size(), tensors.size()) << what;
  for (size_t i = 0; i < tensors.size(); ++i) EXPECT_EQ(got.table.tensor_names()[i], tensors[i].name) << what;
  ASSERT_EQ(got.ops.size(), want.ops.size()) << what;
  for (const auto& [dev, ops] : want.ops) {
    ASSERT_TRUE(got.ops.count(dev)) << what << ": no ops on device " << dev;
    ASSERT_EQ(got.ops.at(dev).size(), ops.size()) << what << " device " << dev;
    for (size_t k = 0; k < ops.size(); ++k) {
      EXPECT_EQ(got.ops.at(dev)[k].to_string(), ops[k].to_string()) << what << " device " << dev << " op " << k;
      EXPECT_TRUE(got.ops.at(dev)[k] == ops[k]) << what << " device " << dev << " op " << k;
    }
  }
  ASSERT_EQ(got.messages().size(), want.messages().size()) << what;
  for (size_t i = 0; i < want.messages().size(); ++i) {
    const BsrMessage& g = got.messages()[i];
    const BsrMessage& w = want.messages()[i];
    EXPECT_TRUE(g.sender == w.sender && g.receiver == w.receiver && g.bytes == w.bytes && g.pieces == w.pieces)
        << what << " message " << i << ": " << g.sender << "->" << g.receiver << " " << g.bytes << " B " << g.pieces
        << " pieces, want " << w.sender << "->" << w.receiver << " " << w.bytes << " B " << w.pieces << " pieces";
  }
  EXPECT_EQ(got.bytes_sent, want.bytes_sent) << what;
}

// Two nodes of four devices, the second slower inside; inter-node links slower still.
Topology two_nodes() {
  return Topology::from_json_text(R"({"devices": [
      {"id": 0, "node": 0, "type": "a"}, {"id": 1, "node": 0, "type": "a"}, {"id": 2, "node": 0, "type": "a"},
      {"id": 3, "node": 0, "type": "a"}, {"id": 4, "node": 1, "type": "b"}, {"id": 5, "node": 1, "type": "b"},
      {"id": 6, "node": 1, "type": "b"}, {"id": 7, "node": 1, "type": "b"}],
      "intra_node_bandwidth": {"a": 4e11, "b": 1e11}, "inter_node_bandwidth": 5e10})", "two-nodes");
}

void expect_every_algorithm_same_as_reference(const std::vector<FusedTensor>& tensors, const std::vector<int>& dead,
                                              const std::string& what) {
  const Topology topo = two_nodes();
  for (BsrAlgorithm algorithm :
       {BsrAlgorithm::kFusedHeuristic, BsrAlgorithm::kPerTensorHeuristic, BsrAlgorithm::kPerTensorLowestOwner}) {
    const FusedBsrOptions options = bsr_algorithm_options(algorithm, dead);
    const std::string name = what + ", " + bsr_algorithm_name(algorithm);
    expect_same_as_reference(tensors, nullptr, options, name + " without topology");
    expect_same_as_reference(tensors, &topo, options, name + " on two nodes");
  }
}

// A pipeline stage's weights moved from two heterogeneous replicas (TP 3 and TP 2, cutting 12 rows
// and 6 columns unevenly) to another union, layer after layer: the layers share layouts, the two
// moments share theirs, and two tensors have a value's annotations on another shape or element size.
std::vector<FusedTensor> heterogeneous_layers() {
  const Annotation value_from = A("dup{[0-2](S1:3);[3-4](S1:2)}");
  const Annotation value_to = A("dup{[4-5](S0:2);[6-7](S1:2)}");
  const Annotation state_from = A("dup{[0-2](S0:3);[3-4](S0:2)}");
  const Annotation state_to = A("split1{[4-7](S0:2,S1:2)}");
  std::vector<FusedTensor> out;
  for (int layer = 0; layer < 3; ++layer) {
    const std::string w = "layer" + std::to_string(layer) + ".w";
    out.push_back({w, Shape{12, 6}, value_from, value_to, 2});
    out.push_back({w + ".exp_avg", Shape{12, 6}, state_from, state_to, 4});
    out.push_back({w + ".exp_avg_sq", Shape{12, 6}, state_from, state_to, 4});
    out.push_back({w + ".bias", Shape{6}, A("dup{[0-2](D:3);[3-4](S0:2)}"), A("dup{[5-7](D:3)}"), 4});
  }
  out.push_back({"head", Shape{24, 6}, value_from, value_to, 2});       // same annotations, another shape
  out.push_back({"head.copy", Shape{12, 6}, value_from, value_to, 4});  // same annotations, another element size
  return out;
}

TEST(FusedBsrReference, HeterogeneousUnionsSharingLayouts) {
  const std::vector<FusedTensor> tensors = heterogeneous_layers();
  expect_every_algorithm_same_as_reference(tensors, {}, "heterogeneous layers");
}

TEST(FusedBsrReference, LostDevices) {
  const std::vector<FusedTensor> tensors = heterogeneous_layers();
  // Device 3 held half of each tensor in the second replica; the first replica (0-2) still has it.
  EXPECT_NO_THROW(plan_fused_bsr(tensors, nullptr, {.dead = {3}}));
  expect_every_algorithm_same_as_reference(tensors, {3}, "device 3 lost");
  // Devices 1 and 4 held the moments' rows 6-8 in both replicas: no plan, in either computation.
  EXPECT_THROW(plan_fused_bsr(tensors, nullptr, {.dead = {1, 4}}), Error);
  expect_every_algorithm_same_as_reference(tensors, {1, 4}, "devices 1 and 4 lost");
}

TEST(FusedBsrReference, RandomAnnotationsRepeatedAcrossTensors) {
  std::mt19937 rng(2027);
  const std::vector<Shape> shapes = {Shape{48}, Shape{24, 48}, Shape{72, 24}};
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<FusedTensor> layouts;
    for (int k = 0; k < 3; ++k) {
      const Shape shape = shapes[rng() % shapes.size()];
      layouts.push_back({"", shape, testing::random_annotation(rng, 8, shape.rank(), false),
                         testing::random_annotation(rng, 8, shape.rank(), false), rng() % 2 ? 4 : 2});
    }
    std::vector<FusedTensor> tensors;
    for (int i = 0; i < 8; ++i) {
      FusedTensor t = layouts[rng() % layouts.size()];
      t.name = "t" + std::to_string(i);
      tensors.push_back(t);
    }
    const std::vector<int> dead = trial % 4 == 0 ? std::vector<int>{static_cast<int>(rng() % 8)} : std::vector<int>{};
    expect_every_algorithm_same_as_reference(tensors, dead, "trial " + std::to_string(trial));
  }
}

}  // namespace
}  // namespace hspmd::resolve
