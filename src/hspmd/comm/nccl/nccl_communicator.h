// NCCL backend of Communicator, built only with HSPMD_CUDA (CMake finds the CUDA toolkit and NCCL).
// Its buffers are device memory on this rank's GPU; a host buffer (the trainer's loss totals, a
// vocabulary-parallel loss's statistics) is copied through device memory around the operation, so
// code above the communicator passes what it holds. Same interface and semantics as the Gloo
// backend, mapped onto NCCL:
//
//   allreduce       ncclAllReduce(sum); bfloat16 natively as ncclBfloat16 (NCCL sums each pair
//                   in float and rounds per step, so results may differ from Gloo's single
//                   rounding in the last bit)
//   reduce_scatter  ncclReduceScatter; uneven counts: one ncclReduce per member, grouped
//   allgather       ncclAllGather; uneven counts: one ncclBroadcast per member, grouped
//   broadcast       ncclBroadcast
//   send_recv       ncclSend/ncclRecv in one group; messages to self are device copies
//   barrier         ncclAllReduce of one int
//
// Each communicator runs on its own stream. Not the rank's one communication stream
// (core/cuda/stream.h): a stream runs its operations one after the other, so a pipeline's deferred
// forward send on channel "F" would hold up the backward receive on channel "B" behind it (which
// is why the channels exist, group_cache.h). Ordering against the compute stream: an event
// recorded on `compute_stream` when the operation is submitted, which the operation's stream waits
// for, so the packing kernels queued before the call finish first; a Work completes once the
// operation's stream has finished, so compute work queued after Work::wait() reads the result.
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0): initialization and every
// operation are polled against the timeout and aborted (ncclCommAbort) when it passes, so a dead
// peer surfaces as an Error instead of a hang. Rank 0 of the group publishes the ncclUniqueId in
// the group's store (comm/group_id.h).
//
//   auto comm = std::make_shared<NcclCommunicator>(store, ranks, rank, /*generation=*/0,
//                                                  NcclOptions{.device = local_rank, .compute_stream = s});
#pragma once

#if defined(HSPMD_CUDA)

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "hspmd/comm/communicator.h"
#include "hspmd/comm/group_cache.h"
#include "hspmd/comm/store.h"

namespace hspmd::comm {

struct NcclOptions {
  int device = 0;  // the rank's GPU
  // Bound on connecting and on every operation; past it the communicator is aborted.
  Millis timeout{60'000};
  // The stream that writes the buffers before an operation (see above); null: the caller has
  // finished writing them (synchronized) before each call.
  cudaStream_t compute_stream = nullptr;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(Store& store, std::vector<int> ranks, int global_rank, int generation, NcclOptions options);
  ~NcclCommunicator() override;

  Work allreduce(const AllreduceOptions& options) override;
  Work reduce_scatter(const ReduceScatterOptions& options) override;
  Work allgather(const AllgatherOptions& options) override;
  Work broadcast(const BroadcastOptions& options) override;
  Work send_recv(const SendRecvOptions& options) override;
  Work barrier(const BarrierOptions& options = {}) override;
  void abort(const std::string& reason) override;

  // Number of CUDA devices visible to this process (0 when there is no usable GPU).
  static int device_count();

 private:
  struct State;        // NCCL communicator, CUDA stream, scratch
  class DeviceViews;   // the operation's buffers as device memory
  // Queues the NCCL calls of `enqueue` as operation `op` after the compute stream's work queued so
  // far, then waits for the stream.
  Work run(const char* op, std::function<void(DeviceViews&)> enqueue);

  std::unique_ptr<State> state_;
  NcclOptions options_;
  WorkQueue queue_;  // last member: stops before the NCCL state goes away
};

// NCCL communicators with these options (GroupCache caches one per group and channel).
Backend nccl_backend(NcclOptions options);

}  // namespace hspmd::comm

#endif  // HSPMD_CUDA
