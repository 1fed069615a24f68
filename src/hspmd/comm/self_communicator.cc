#include "hspmd/comm/self_communicator.h"

#include <cstring>

#include "hspmd/core/error.h"

namespace hspmd::comm {
namespace {

void copy(const CommBuffer& from, const CommBuffer& to, const Communicator& comm, const char* op) {
  HSPMD_CHECK(from.dtype == to.dtype && from.nbytes() == to.nbytes())
      << op << " on " << comm.describe() << ": input and output differ in size or type";
  if (from.data != to.data && from.nbytes() > 0) std::memcpy(to.data, from.data, from.nbytes());
}

}  // namespace

Work SelfCommunicator::allreduce(const AllreduceOptions&) { return Work(); }

Work SelfCommunicator::reduce_scatter(const ReduceScatterOptions& options) {
  check_reduce_scatter(*this, options);
  copy(options.input, options.output, *this, "reduce_scatter");
  return Work();
}

Work SelfCommunicator::allgather(const AllgatherOptions& options) {
  check_allgather(*this, options);
  copy(options.input, options.output, *this, "allgather");
  return Work();
}

Work SelfCommunicator::broadcast(const BroadcastOptions& options) {
  index_of(options.root);  // the root must be this rank
  return Work();
}

Work SelfCommunicator::send_recv(const SendRecvOptions& options) {
  HSPMD_CHECK(options.sends.size() == options.recvs.size())
      << "send_recv on " << describe() << ": " << options.sends.size() << " sends to self but "
      << options.recvs.size() << " receives";
  for (size_t k = 0; k < options.sends.size(); ++k) {
    index_of(options.sends[k].peer);
    index_of(options.recvs[k].peer);
    copy(options.sends[k].buffer, options.recvs[k].buffer, *this, "send_recv");
  }
  return Work();
}

Work SelfCommunicator::barrier(const BarrierOptions&) { return Work(); }

}  // namespace hspmd::comm
