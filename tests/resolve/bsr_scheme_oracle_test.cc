// The BSR scheme (resolve/bsr_scheme.cc), which prices only the owners on a receiver's node when
// inter-node links share one bandwidth, equals the straightforward scan over every owner
// (bsr_reference_testlib.h) transfer for transfer and byte for byte: on random annotations, and on
// mid-size switches of a DP x TP x PP layout (every slice replicated per pipeline) between
// TP8 x PP4 and TP4 x PP8, on a two-kind tiered cluster, an explicit bandwidth matrix and no topology.
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "hspmd/resolve/bsr_scheme.h"
#include "hspmd/resolve/bsr_table.h"
#include "hspmd/resolve/fused_bsr.h"
#include "resolve/bsr_reference_testlib.h"
#include "resolve/resolve_testlib.h"

namespace hspmd::resolve {
namespace {

using sharding::Annotation;

// n devices, `per_node` a node, the first half of kind "fast" and the rest "slow" (intra-node
// bandwidths differ by kind, as on an H800 + H20 cluster), one inter-node bandwidth.
Topology tiered(int n, int per_node, double fast, double slow, double inter) {
  std::ostringstream s;
  s << R"({"devices": [)";
  for (int d = 0; d < n; ++d) {
    s << (d ? "," : "") << R"({"id": )" << d << R"(, "node": )" << d / per_node << R"(, "type": ")"
      << (d < n / 2 ? "fast" : "slow") << "\"}";
  }
  s << R"(], "intra_node_bandwidth": {"fast": )" << fast << R"(, "slow": )" << slow
    << R"(}, "inter_node_bandwidth": )" << inter << "}";
  return Topology::from_json_text(s.str(), "tiered-" + std::to_string(n));
}

// n devices, 4 a node, every link a random one of a few bandwidths (ties happen).
Topology random_matrix(int n, std::mt19937& rng) {
  std::ostringstream s;
  s << R"({"devices": [)";
  for (int d = 0; d < n; ++d) s << (d ? "," : "") << R"({"id": )" << d << R"(, "node": )" << d / 4 << R"(, "type": "a"})";
  s << R"(], "bandwidth_matrix": [)";
  for (int a = 0; a < n; ++a) {
    s << (a ? "," : "") << "[";
    for (int b = 0; b < n; ++b) s << (b ? "," : "") << (a == b ? 1 : 1 + static_cast<int>(rng() % 3)) << "e10";
    s << "]";
  }
  s << "]}";
  return Topology::from_json_text(s.str(), "matrix-" + std::to_string(n));
}

void expect_same_as_reference(const BsrTable& table, const Topology* topology, const std::string& what) {
  for (BsrPolicy policy : {BsrPolicy::kHeuristic, BsrPolicy::kLowestOwner}) {
    const BsrScheme got = plan_bsr(table, topology, policy);
    const BsrScheme want = testing::reference_plan_bsr(table, topology, policy);
    ASSERT_EQ(got.transfers.size(), want.transfers.size()) << what;
    for (size_t i = 0; i < want.transfers.size(); ++i) {
      ASSERT_EQ(got.transfers[i].entry, want.transfers[i].entry) << what << " transfer " << i;
      ASSERT_EQ(got.transfers[i].receiver, want.transfers[i].receiver) << what << " transfer " << i;
      ASSERT_EQ(got.transfers[i].sender, want.transfers[i].sender) << what << " transfer " << i;
    }
    EXPECT_EQ(got.bytes_sent, want.bytes_sent) << what;
  }
}

TEST(BsrSchemeOracle, RandomAnnotationsOnEveryKindOfTopology) {
  std::mt19937 rng(31);
  const int n = 16;
  // Inter-node links faster than the slow kind's intra-node ones, and equal to the fast kind's:
  // remote owners must win and tie exactly as in the scan.
  const std::vector<Topology> topologies = {tiered(n, 4, 4e11, 5e10, 1e11), tiered(n, 4, 1e11, 5e10, 1e11),
                                            tiered(n, 2, 4e11, 2e11, 5e10), random_matrix(n, rng),
                                            Topology::uniform(n, 1e11)};
  for (int trial = 0; trial < 60; ++trial) {
    BsrTable table;
    const int tensors = 1 + static_cast<int>(rng() % 4);
    for (int t = 0; t < tensors; ++t) {
      const int rank = 1 + static_cast<int>(rng() % 2);
      const Shape shape = rank == 1 ? Shape{48} : Shape{24, 48};
      table.add("t" + std::to_string(t), testing::random_annotation(rng, n, rank, false),
                testing::random_annotation(rng, n, rank, false), shape, 4);
    }
    const std::string what = "trial " + std::to_string(trial);
    expect_same_as_reference(table, nullptr, what + " without topology");
    for (const Topology& topo : topologies) expect_same_as_reference(table, &topo, what + " on " + topo.name());
  }
}

// One layer's tensor under DP x TP tp x PP pp over n ranks: pipeline p's stage holding `layer` of
// `layers` is ranks p*tp*pp + stage*tp ... + tp - 1, split along `dim` (or replicated when dim < 0).
Annotation layer_layout(int n, int tp, int pp, int layer, int layers, int dim) {
  std::ostringstream s;
  s << "dup{";
  const int stage = layer * pp / layers;
  for (int base = 0; base < n; base += tp * pp) {
    const int first = base + stage * tp;
    s << (base ? ";" : "") << "[" << first << "-" << first + tp - 1 << "](";
    if (dim < 0) s << "D:" << tp;
    else s << "S" << dim << ":" << tp;
    s << ")";
  }
  s << "}";
  return Annotation::parse(s.str());
}

TEST(BsrSchemeOracle, MidSizeSwitchesOfReplicatedPipelines) {
  std::mt19937 rng(7);
  for (int n : {64, 128, 256}) {
    const int layers = 8;
    std::vector<FusedTensor> tensors;
    for (int l = 0; l < layers; ++l) {
      for (int dim : {0, 1, -1}) {
        tensors.push_back({"l" + std::to_string(l) + "." + std::to_string(dim), Shape{64, 32},
                           layer_layout(n, 8, 4, l, layers, dim), layer_layout(n, 4, 8, l, layers, dim), 4});
      }
    }
    BsrTable table;
    for (const FusedTensor& t : tensors) table.add(t.name, t.src, t.dst, t.shape, t.element_size);
    const std::string what = std::to_string(n) + " ranks";
    expect_same_as_reference(table, nullptr, what);
    const Topology two_kinds = tiered(n, 8, 4e11, 1e11, 5e10);
    expect_same_as_reference(table, &two_kinds, what + " on two kinds");
    // Nodes that cut stages in half: some receivers find no owner on their node.
    const Topology small_nodes = tiered(n, 2, 4e11, 1e11, 5e10);
    expect_same_as_reference(table, &small_nodes, what + " on 2-device nodes");
    if (n == 64) {
      const Topology matrix = random_matrix(n, rng);
      expect_same_as_reference(table, &matrix, what + " on a random matrix");
    }
    // Dead ranks: their slices come from other replicas.
    BsrTable survivors;
    for (const FusedTensor& t : tensors) survivors.add(t.name, t.src, t.dst, t.shape, t.element_size, {3, 9, 40});
    expect_same_as_reference(survivors, &two_kinds, what + " with dead ranks");
  }
}

}  // namespace
}  // namespace hspmd::resolve
