// NCCL backend of Communicator: GPU buffers (CommBuffer::data is device memory on this rank's
// GPU), built only with HSPMD_CUDA (CMake finds the CUDA toolkit and NCCL). Same interface and
// semantics as the Gloo backend, mapped onto NCCL:
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
// The communicator is non-blocking (ncclConfig_t::blocking = 0): initialization and every
// operation are polled against the timeout and aborted (ncclCommAbort) when it passes, so a dead
// peer surfaces as an Error instead of a hang. Rank 0 of the group publishes the ncclUniqueId in
// the group's store.
//
//   auto comm = std::make_shared<NcclCommunicator>(store, ranks, rank, /*generation=*/0,
//                                                  /*device=*/local_rank, std::chrono::seconds(60));
#pragma once

#if defined(HSPMD_CUDA)

#include <memory>
#include <string>
#include <vector>

#include "hspmd/comm/communicator.h"
#include "hspmd/comm/group_cache.h"
#include "hspmd/comm/store.h"

namespace hspmd::comm {

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(Store& store, std::vector<int> ranks, int global_rank, int generation, int device, Millis timeout);
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
  struct State;  // NCCL communicator, CUDA stream, scratch
  // Queues the NCCL calls of `enqueue` as operation `op`, then waits for the stream.
  Work run(const char* op, std::function<void()> enqueue);

  std::unique_ptr<State> state_;
  Millis timeout_;
  WorkQueue queue_;  // last member: stops before the NCCL state goes away
};

// NCCL communicators on device `device` (usually the local rank).
Backend nccl_backend(int device, Millis timeout = Millis(60'000));

}  // namespace hspmd::comm

#endif  // HSPMD_CUDA
