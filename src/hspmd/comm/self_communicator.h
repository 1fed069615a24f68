// The communicator of a group of one: every collective over a single member is a copy or nothing,
// and a message to oneself is a copy. No transport and no rendezvous, so a one-rank run (the
// single-process trainer is the one-rank case of the distributed one) needs neither a store nor
// sockets. GroupCache returns it for any single-member group.
#pragma once

#include "hspmd/comm/communicator.h"

namespace hspmd::comm {

class SelfCommunicator : public Communicator {
 public:
  SelfCommunicator(int global_rank, int generation) : Communicator({global_rank}, global_rank, generation) {}

  Work allreduce(const AllreduceOptions& options) override;          // the sum of one: unchanged
  Work reduce_scatter(const ReduceScatterOptions& options) override;  // output = input
  Work allgather(const AllgatherOptions& options) override;           // output = input
  Work broadcast(const BroadcastOptions& options) override;           // unchanged
  Work send_recv(const SendRecvOptions& options) override;            // k-th send -> k-th receive
  Work barrier(const BarrierOptions& options = {}) override;
  void abort(const std::string&) override {}  // operations complete at once: nothing is pending
};

}  // namespace hspmd::comm
