// Executes one device's part of a resolved Reshard (resolve/resolver.h) on local shards, through
// the rank's communicators. Every rank runs the same Resolution (computed identically everywhere),
// so the sends of one device match the receives of its peers without any negotiation.
//
//   CommSession session(groups, /*rank=*/3);          // one per rank, owns in-flight sends
//   Resolution r = resolve(src, dst, Shape{8, 4}, "W");
//   Tensor mine_dst = execute_reshard(r, Shape{8, 4}, /*device=*/3, mine_src, session, "F");
//   ...
//   session.wait_deferred();                           // end of step: every send has completed
//
// Per step of the resolution, the device's ops run in order:
//   Identity          the destination shard is the source shard (same storage, no copy)
//   LocalCopy         pieces of the source shard copied into the destination shard
//   ZeroFill          nothing: the destination shard starts as zeros (a summand the device lacks)
//   Send / Recv       one send_recv per peer on the pair communicator {device, peer} of the
//                     channel, all peers posted before any is waited on; a peer that both sends to
//                     and receives from this device gets ONE send_recv holding both directions (no
//                     deadlock whatever the order of the peers). Receives are waited on before the
//                     call returns; sends are handed to the session (deferred) so a pipeline stage
//                     never blocks on its downstream neighbour.
//   AllReduce / ReduceScatter / AllGather
//                     over the op's group (GroupCache key = the group, channel), on the op's
//                     region packed into a contiguous buffer in piece order (member j's part along
//                     `dim` is contiguous), then unpacked into the destination shard. An
//                     AllReduce member with zero_input adds zeros, and each member keeps the part
//                     of the sum its destination shard covers (comm_op.h).
// Regions are global coordinates; a device's shard of annotation A covers A.region(device, shape).
// Channels keep independent traffic on independent communicators (and worker threads): the
// pipeline uses "F" for forward activations, "B" for backward gradients, "grad" for the gradient
// sync (runtime/gradient_sync.h), "post" for the optimizer, so a deferred forward send never
// queues in front of a backward receive.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hspmd/comm/group_cache.h"
#include "hspmd/core/allocator.h"
#include "hspmd/core/shape.h"
#include "hspmd/core/tensor.h"
#include "hspmd/graph/compute_device.h"
#include "hspmd/resolve/fused_bsr.h"
#include "hspmd/resolve/resolver.h"
#include "hspmd/sharding/region.h"

namespace hspmd::runtime {

// The communicators of one rank plus its deferred (in-flight) sends.
class CommSession {
 public:
  // Buffers and destination shards come from `allocator` (nullptr: Allocator::process_default()),
  // so an emulated device's capacity covers its communication too. The allocator's memory is the
  // memory the communicators move: host memory for Gloo, a GPU's for NCCL; `copy_region` packs
  // and unpacks boxes there (nullptr: kernels::copy_region, the host's).
  CommSession(comm::GroupCache& groups, int rank, Allocator* allocator = nullptr,
              graph::RegionCopy copy_region = nullptr);
  // Waits for sends still in flight (their errors are dropped: call wait_deferred() to see them),
  // so no buffer is freed under a transfer.
  ~CommSession();
  CommSession(const CommSession&) = delete;
  CommSession& operator=(const CommSession&) = delete;
  int rank() const { return rank_; }
  // The communicator of `ranks` (this rank must be a member) on `channel`, created on first use.
  std::shared_ptr<comm::Communicator> group(const std::vector<int>& ranks, const std::string& channel);
  // Keeps `buffer` alive until `work` completes; wait_deferred() waits for all of them.
  void defer(comm::Work work, Tensor buffer);
  // Waits for every deferred Work; after all are done, throws the first error (naming the op,
  // group and peer). Sends that completed earlier are dropped by defer() as it goes.
  void wait_deferred();
  comm::GroupCache& groups() { return groups_; }
  Allocator* allocator() const { return allocator_; }
  // Where the session's buffers live (the host without an allocator).
  Device buffer_device() const;
  const graph::RegionCopy& copy_region() const { return copy_region_; }

 private:
  comm::GroupCache& groups_;
  int rank_;
  Allocator* allocator_;
  graph::RegionCopy copy_region_;
  std::mutex mutex_;
  std::vector<std::pair<comm::Work, Tensor>> deferred_;
};

// `src`: this device's shard of the resolution's first `from` annotation (undefined when the device
// holds none). Returns this device's shard of the last `to` annotation (undefined when it holds
// none), dtype of src (or `dtype` when src is undefined: a pure receiver). Throws Error naming the
// op kind, group and peer on a communication failure, or when src does not have the shard's shape.
Tensor execute_reshard(const resolve::Resolution& resolution, const Shape& shape, int device, const Tensor& src,
                       CommSession& session, const std::string& channel, DType dtype = DType::kFloat32);

// execute_reshard for a rank whose tensors live in `memory`. When the session's buffers live there
// too (a host rank; a GPU rank whose communicators are NCCL) it is execute_reshard, unchanged.
// Otherwise (a GPU rank over Gloo, whose session buffers are host memory) the source is copied to
// the host, the reshard runs there, and the result is copied into `memory`.
Tensor execute_reshard_staged(const resolve::Resolution& resolution, const Shape& shape, int device, const Tensor& src,
                              CommSession& session, const std::string& channel, Allocator& memory,
                              DType dtype = DType::kFloat32);

// This device's shard of one tensor: `tensor` (contiguous, row-major) holds `region` (global
// coordinates) of it. An undefined tensor means the device holds none of it.
struct LocalShard {
  Tensor tensor;
  sharding::Region region;
};

// Runs `device`'s part of a fused BSR (resolve/fused_bsr.h; the graph switch of §7): its local
// copies, then ONE send_recv per peer carrying every piece of every tensor both ways, all peers
// posted before any is waited on; returns, once its pieces have arrived and its sends completed,
// the bytes it put on the wire to each peer (peer -> bytes; peers it only receives from are absent).
// sources[i] / destinations[i] are the device's shards of tensor i of the BSR's
// table before and after; the caller allocates the destinations. Every device of the BSR calls it
// (identical `bsr`).
std::map<int, int64_t> execute_fused_bsr(const resolve::FusedBsr& bsr, int device,
                                         const std::vector<LocalShard>& sources,
                                         const std::vector<LocalShard>& destinations, CommSession& session,
                                         const std::string& channel);

}  // namespace hspmd::runtime
