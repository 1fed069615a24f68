// Small clusters and hand-made profiles for the planner tests: two device kinds, "fast" and
// "slow", on nodes of their own, and the tiny Llama (4 layers, 4 heads, 2 KV heads).
#pragma once

#include <string>

#include "hspmd/models/llama_config.h"
#include "hspmd/planner/profile.h"
#include "hspmd/resolve/topology.h"

namespace hspmd::planner::testing {

models::LlamaConfig tiny_config();
// `fast` devices on node 0 (ranks 0..fast-1) and `slow` on node 1, each with `memory` bytes.
resolve::Topology two_kind_cluster(int fast, int slow, double memory);
// fast: a layer costs about 1 ms per sequence of 64 tokens at TP 1, slow: `slowdown` times that;
// TP 2 halves the compute and the cost model adds the TP all-reduces from the links.
Profile two_kind_profile(double slowdown = 3.0);

}  // namespace hspmd::planner::testing
