// Structural checks of a graph, run between passes (after building, after autograd, later after
// every rewrite) so that a broken graph fails where it was broken, not inside a kernel:
//
//   build_backward(g, loss, g.parameters());
//   verify(g);   // throws Error naming the first bad op
//
// Checks: inputs refer to earlier ops' existing outputs (topological order); arity matches the
// registry; re-running each shape rule reproduces the recorded output shapes and dtypes;
// placeholder, parameter and reshard names are unique; no forward op consumes a backward tensor.
#pragma once

#include "hspmd/graph/graph.h"

namespace hspmd::graph {

void verify(const Graph& g);

}  // namespace hspmd::graph
