// Generic annotation deduction (paper §6.1, Table 2, Figure 13), for the graph's op registry to
// call from each op kind's rule. Every rule first checks that all inputs share dg_union and hsize
// (an op runs locally on its devices; otherwise the plan must put a Reshard there), then deduces
// ds_union group by group with the SPMD rule and hdim with the same rule in one dimension.
//
//   Column-parallel linear, y = x W^T, x [B, S, H] duplicated over a TP-4 group, W [F, H] split on
//   its output dim F:   deduce_matmul("mlp.up", x (D:4), W (S0:4), rank 3, transpose_w) -> (S2:4)
//   Row-parallel linear, y = x W^T, x [B, S, F] split on F, W [H, F] split on F (contracted):
//                       deduce_matmul("mlp.down", x (S2:4), W (S1:4), ...)           -> (P:4)
//
// The DistStates of two inputs are matched position by position (same degrees in the same
// order: the device -> coordinate maps must agree), and each position's pair of labels is
// combined by a small table; a pair outside the table is an error that names the op, both
// annotations and says which Reshard would fix it.
#pragma once

#include <string>
#include <vector>

#include "hspmd/sharding/annotation.h"

namespace hspmd::sharding {

// Throws Error naming `op` and both annotations unless every input has the same dg_union (and so
// the same hsize) as the first one.
void check_same_placement(const std::string& op, const std::vector<Annotation>& inputs);

enum class Linearity {
  kLinear,     // add, sub, scaling by a duplicated value: partial inputs stay partial
  kNonLinear,  // mul, gelu, silu, rms_norm...: partial inputs are an error (AllReduce first)
};

// Elementwise ops and everything Table 2 leaves unmodified: the inputs must carry identical
// annotations (apart from zero flags), which the output takes.
Annotation deduce_elementwise(const std::string& op, const std::vector<Annotation>& inputs, Linearity linearity);

// x [..., M, K] (rank x_rank >= 2) times w [K, N], or w [N, K] when transpose_w -> y [..., M, N].
DistState deduce_matmul_ds(const std::string& op, const DistState& x, const DistState& w, int x_rank,
                           bool transpose_w);
Annotation deduce_matmul(const std::string& op, const Annotation& x, const Annotation& w, int x_rank,
                         bool transpose_w);

// Sum over `dims` of a rank-`rank` tensor: splits of a reduced dim become partial; the other
// split dims are renumbered when !keepdim.
DistState deduce_reduce_ds(const std::string& op, const DistState& x, const std::vector<int>& dims, int rank,
                           bool keepdim);
Annotation deduce_reduce(const std::string& op, const Annotation& x, const std::vector<int>& dims, int rank,
                         bool keepdim);

}  // namespace hspmd::sharding
