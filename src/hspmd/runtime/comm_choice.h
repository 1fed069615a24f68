// Which communicators a rank of `hspmd train` uses (--comm) and on which GPU it computes, decided
// once here so the trainer and the executor above it stay device-neutral: they get a
// comm::Backend for their GroupCache and a flag saying whether its buffers are device memory
// (DistOptions::comm_on_device), never a test for NCCL.
//
//   CommKind kind = choose_comm(parse_comm("nccl"), Device{DeviceType::kCUDA, 0});
//   Device gpu = rank_device(Device{DeviceType::kCUDA, 0}, kind, env.local_rank);  // cuda:<local rank>
//   graph::ComputeDevice compute = rank_compute(train_on(gpu), emulated, rank);
//   GroupCache groups(store, rank, comm_backend(kind, compute, timeout, env.host));
//
//   gloo  host memory over TCP (comm/gloo_communicator.h); a GPU rank stages its Reshards through
//         the host, and several ranks may share one GPU (every rank computes on the named GPU)
//   nccl  the GPU's memory (comm/nccl/nccl_communicator.h), ordered after the rank's compute
//         stream; rank L of a host computes on GPU N + L of --device cuda:N, since NCCL refuses two
//         members of one communicator on one GPU
#pragma once

#include <optional>
#include <string>

#include "hspmd/comm/group_cache.h"
#include "hspmd/core/device.h"
#include "hspmd/graph/compute_device.h"

namespace hspmd::runtime {

enum class CommKind { kGloo, kNccl };

// "gloo" or "nccl"; anything else is an Error naming --comm and the choices.
CommKind parse_comm(const std::string& text);
const char* comm_name(CommKind kind);
// True when this hspmd was built with NCCL (the CUDA backend).
bool nccl_built();

// `requested` (--comm) when given, else NCCL for a GPU rank of a build with NCCL, Gloo otherwise.
// Errors naming --comm: nccl for a rank on the CPU, or in a build without NCCL.
CommKind choose_comm(std::optional<CommKind> requested, Device device, bool with_nccl = nccl_built());

// The device a rank computes on: `named` (--device) for host ranks and over Gloo; over NCCL, GPU
// named.index + local_rank.
Device rank_device(Device named, CommKind kind, int local_rank);

// The Backend of the rank's GroupCache: Gloo (timeout, `host` as peers reach it), or NCCL on
// `compute`'s GPU ordered after its compute stream (compute must be a GPU one: an Error otherwise).
comm::Backend comm_backend(CommKind kind, const graph::ComputeDevice& compute, comm::Millis timeout,
                           const std::string& host);

}  // namespace hspmd::runtime
