// Reverse-mode autodiff that builds the backward ops into the same graph (single-device view), so
// the backward is specialized, sharded and scheduled like any other ops.
//
//   TensorRef loss = ...;                                   // a scalar []
//   std::vector<TensorRef> grads = build_backward(g, loss, g.parameters());
//   // grads[i] = d loss / d parameters[i], float like the parameter; ops flagged backward
//
// Walks ops from the loss down in reverse id order (ids are topological), calling each op kind's
// gradient builder (OpDef::grad) with the summed gradients of its outputs. A tensor used by
// several ops (a parameter used twice: tied embeddings) receives one partial gradient per use;
// they are summed by kAdd ops named "<tensor>.grad_acc<k>". Backward ops inherit the layer tag of
// the forward op they differentiate.
#pragma once

#include <vector>

#include "hspmd/graph/graph.h"

namespace hspmd::graph {

// d loss / d wrt[i]; an invalid TensorRef where wrt[i] does not influence the loss.
// loss must be a scalar (shape []) of a floating dtype.
std::vector<TensorRef> build_backward(Graph& g, TensorRef loss, const std::vector<TensorRef>& wrt);

}  // namespace hspmd::graph
