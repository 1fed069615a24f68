// The ComputeDevice (graph/compute_device.h) a rank of a run computes on: the host, with an
// allocator of the rank's emulated memory, or the GPU its options name (the same capacity then
// emulates a smaller card). Errors, one line each: a GPU this process does not see, or a CUDA run
// of an hspmd built without the CUDA backend.
//
//   graph::ComputeDevice c = rank_compute(options.train, options.device, rank);
#pragma once

#include "hspmd/graph/compute_device.h"
#include "hspmd/runtime/emulation.h"
#include "hspmd/runtime/train_options.h"

namespace hspmd::runtime {

graph::ComputeDevice rank_compute(const TrainerOptions& train, const EmulatedDevice& device, int rank);

}  // namespace hspmd::runtime
