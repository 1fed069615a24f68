// Gloo backend of Communicator: CPU tensors over Gloo's TCP transport (Debian libgloo-dev).
// Members rendezvous through a Store adapter (gloo::rendezvous::Context::connectFullMesh), then
// each operation maps onto one Gloo call on the communicator's worker thread:
//
//   allreduce       gloo::allreduce (ring), bfloat16 through a float32 copy
//   reduce_scatter  gloo::allreduce on a scratch copy, then this member's slice is kept
//                   (Gloo 0.5's ReduceScatterHalvingDoubling takes int counts and bound buffers
//                   without per-call timeouts, so it is not used)
//   allgather       gloo::allgatherv (even counts are the special case)
//   broadcast       gloo::broadcast
//   send_recv       unbound buffers: every recv and send posted, then waitRecv/waitSend with
//                   the deadline; messages to self are copied locally
//   barrier         gloo::barrier
//
// Every call carries the communicator's timeout; a Gloo error or timeout breaks the
// communicator and closes its connections, so peers blocked on this rank fail fast too.
//
//   auto device = make_gloo_device("127.0.0.1");
//   auto comm = std::make_shared<GlooCommunicator>(group_store, std::vector<int>{0, 2, 3},
//                                                  /*global_rank=*/2, /*generation=*/0, device,
//                                                  std::chrono::seconds(30));
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hspmd/comm/communicator.h"
#include "hspmd/comm/store.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace hspmd::comm {

// A TCP device bound to host (an address of this machine peers can reach; "127.0.0.1" for one
// host). One device per process serves every group. Sets SIGPIPE to ignored when it still has its
// default action: otherwise a write to a dead peer would kill the process instead of raising.
std::shared_ptr<gloo::transport::Device> make_gloo_device(const std::string& host);

class GlooCommunicator : public Communicator {
 public:
  // Connects to every other member through store (namespaced for this group and generation);
  // blocks until all members have called it, or throws Error after timeout.
  GlooCommunicator(Store& store, std::vector<int> ranks, int global_rank, int generation,
                   std::shared_ptr<gloo::transport::Device> device, Millis timeout);
  ~GlooCommunicator() override;

  Work allreduce(const AllreduceOptions& options) override;
  Work reduce_scatter(const ReduceScatterOptions& options) override;
  Work allgather(const AllgatherOptions& options) override;
  Work broadcast(const BroadcastOptions& options) override;
  Work send_recv(const SendRecvOptions& options) override;
  Work barrier(const BarrierOptions& options = {}) override;
  void abort(const std::string& reason) override;

  // The underlying Gloo context, for benchmarks that compare against direct Gloo calls.
  const std::shared_ptr<gloo::Context>& gloo_context() const { return context_; }

 private:
  // Queues body as operation `op`; a failure marks the communicator broken.
  Work run(const char* op, std::function<void()> body);
  // In-place sum of n elements at data on the worker thread.
  void sum_in_place(void* data, int64_t n, DType dtype);
  uint32_t next_tag() { return tag_++ & 0xffffffu; }

  std::shared_ptr<gloo::Context> context_;
  Millis timeout_;
  uint32_t tag_ = 0;      // worker thread only
  std::string broken_;    // worker thread only: the first transport error
  WorkQueue queue_;       // last member: its thread stops before the context goes away
};

}  // namespace hspmd::comm
