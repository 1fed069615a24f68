// Fused BSR (§7, Figure 14): one BSR table and one scheme over many tensors — e.g. every
// parameter (and Adam state) when switching from plan A to plan B — so the scheme balances the
// send load across all devices, and one message per (sender, receiver) pair instead of one per
// tensor and slice.
//
//   std::vector<FusedTensor> ts = {{"W1", Shape{8, 4}, a1, b1, 4}, {"W2", Shape{4}, a2, b2, 4}};
//   FusedBsr f = plan_fused_bsr(ts, &topology);
//   f.ops[3]          // device 3: LocalCopy ..., Send peer=0 t0:[..] t1:[..], Recv peer=5 ...
//   f.messages()      // {sender, receiver, bytes, pieces} per pair
// Tensors laid out alike (same annotations, shape and element size: every layer's q_proj in one
// pipeline stage, a parameter's two moments) are validated and sliced once and share their table
// slices (BsrTable::add_copy); the synthetic Llama 70B switch lists 2,169 tensors in 100 layouts.
// With fuse = false (`hspmd explain --switch --no-heuristics` uses it with kLowestOwner), every
// tensor gets its own table and scheme: the per-tensor baseline the paper compares against.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hspmd/core/shape.h"
#include "hspmd/resolve/bsr_scheme.h"
#include "hspmd/resolve/bsr_table.h"
#include "hspmd/resolve/comm_op.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/sharding/annotation.h"

namespace hspmd::resolve {

struct FusedTensor {
  std::string name;
  Shape shape;
  sharding::Annotation src;
  sharding::Annotation dst;
  int64_t element_size = 4;
};

struct BsrMessage {
  int sender = 0;
  int receiver = 0;
  int64_t bytes = 0;
  int pieces = 0;
};

struct FusedBsr {
  BsrTable table;
  DeviceOps ops;                    // per device, Piece::tensor indexes the input list
  std::vector<BsrMessage> message_list;  // every send, in (sender, receiver) order, per table when unfused
  std::map<int, int64_t> bytes_sent;     // device -> bytes

  const std::vector<BsrMessage>& messages() const { return message_list; }
  int64_t total_bytes() const;
};

struct FusedBsrOptions {
  BsrPolicy policy = BsrPolicy::kHeuristic;
  bool fuse = true;       // false: one table and scheme per tensor
  std::vector<int> dead;  // devices that cannot send (failed); their slices come from replicas
};

// The three ways of moving many tensors the paper compares (its Figure 20), by name:
//   fused                    one table and scheme over every tensor, heuristics (i)-(iii)
//   per-tensor               one table and scheme per tensor, heuristics (i)-(iii) within it
//   per-tensor-lowest-owner  one per tensor, (i) then the lowest-rank owner sends
enum class BsrAlgorithm { kFusedHeuristic, kPerTensorHeuristic, kPerTensorLowestOwner };
std::string bsr_algorithm_name(BsrAlgorithm algorithm);
// Error naming the text and the three names when it is none of them.
BsrAlgorithm parse_bsr_algorithm(const std::string& text);
FusedBsrOptions bsr_algorithm_options(BsrAlgorithm algorithm, std::vector<int> dead = {});

// Throws Error naming the tensor when an annotation is partial or does not fit its shape.
FusedBsr plan_fused_bsr(const std::vector<FusedTensor>& tensors, const Topology* topology,
                        const FusedBsrOptions& options = {});

}  // namespace hspmd::resolve
