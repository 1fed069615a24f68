// A profile derived from datasheet figures instead of measurements, for clusters this host cannot
// reach (the paper's H800/H20 cluster): `hspmd profile --from-cluster C.json`. Every figure is
// labelled in the profile's "source" as derived, with the assumptions below.
//
// Compute: FLOPs of the bf16 training step over peak_flops (the cluster spec's) x efficiency:
//   decoder layer, fwd + bwd = 3 x forward; forward per sequence of s tokens =
//     2 s (matmul parameters of the layer) + 2 s^2 hidden (causal attention: QK^T and AV, half the
//     square each), all divided by the TP degree t;
//   head: 3 x 2 hidden vocab / t per token (embedding lookup and loss neglected).
// TP collectives are not inside these figures: the cost model adds them from the cluster's links.
// Memory (Megatron-style mixed precision): 2 bytes bf16 weights + 4 bytes fp32 gradients per
// parameter, 12 bytes fp32 master weights and Adam moments (sharded by ZeRO-1); activations in
// bf16 with flash attention and sequence parallelism (everything divided by t), per token per
// layer: two norm inputs, two matmul inputs (4 hidden), Q K V and attention output (2 hidden + 2 KV
// width), o_proj input (hidden), gate, up, SiLU and down input (4 FFN); the head keeps its input
// (hidden) and holds fp32 logits and their gradient (8 vocab / t bytes) for one micro-batch;
// `reserved_bytes` for the CUDA context, communicator buffers and fragmentation.
#pragma once

#include <vector>

#include "hspmd/models/model.h"
#include "hspmd/planner/profile.h"
#include "hspmd/resolve/topology.h"

namespace hspmd::planner {

struct DerivationOptions {
  std::string model;         // named in the profile
  double efficiency = 0.45;  // achieved fraction of peak FLOP/s
  double reserved_bytes = 4.0 * (1 << 30);
  std::string cluster;       // named in the profile's source
};

// One device kind per "type" of the cluster, TP degrees: powers of two up to the kind's largest
// node that divide the model's heads, KV heads, hidden, FFN and vocabulary.
Profile derive_profile(const models::Model& model, const resolve::Topology& cluster,
                       const DerivationOptions& options);

}  // namespace hspmd::planner
