// Communicator: the collectives and point-to-point transfers of one device group, over a backend
// (Gloo on CPU, NCCL on GPU). One entry per operation, each with its options struct; every entry
// returns a Work at once and runs in submission order (work.h).
//
// Ranks are global ranks (the run's device ids); a group is a sorted set of them. Example with
// group [0, 2, 3] seen from global rank 2 (group index 1):
//
//   std::vector<float> x(5, 1.0f);
//   comm.allreduce({.data = CommBuffer::of(x)}).wait();           // x == {3, 3, 3, 3, 3}
//   comm.broadcast({.data = CommBuffer::of(x), .root = 3}).wait(); // root is a global rank
//   std::vector<float> mine(2), all(7);                             // allgatherv, counts 2,2,3
//   comm.allgather({.input = CommBuffer::of(mine), .output = CommBuffer::of(all),
//                   .counts = {2, 2, 3}}).wait();
//   comm.send_recv({.sends = {{0, CommBuffer::of(a)}, {3, CommBuffer::of(b)}},
//                   .recvs = {{3, CommBuffer::of(c)}}}).wait();      // posts all, then waits
//
// Buffers are raw pointer + element count + DType (CommBuffer), so host tensors, std::vectors
// and device memory pass alike; CommBuffer::of(tensor) views a Tensor wherever its storage is.
// Which memory a backend moves: Gloo host memory only (a GPU rank over Gloo stages its Reshards
// through the host, runtime/reshard_exec.h); NCCL device memory, and host buffers through device
// copies (nccl/nccl_communicator.h). SelfCommunicator (groups of one) copies with memcpy: host
// memory only, which is all it gets (the resolver lowers no collective over one member).
// Reductions are sums; float32, float64, int32 and int64 are reduced natively, bfloat16 in
// float32 (converted, reduced, rounded back once). Byte-moving operations accept every dtype.
//
// Errors (wrong counts, a dead peer, a timeout) surface from Work::wait() as hspmd::Error naming
// the operation, the group, its generation and, where known, the peer. After a transport error a
// communicator is broken: later operations fail at once and the group must be rebuilt under a
// new generation (group_cache.h, membership.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hspmd/comm/work.h"
#include "hspmd/core/dtype.h"
#include "hspmd/core/tensor.h"

namespace hspmd::comm {

// `count` elements of `dtype` at `data` (host or device memory, by backend).
struct CommBuffer {
  void* data = nullptr;
  int64_t count = 0;
  DType dtype = DType::kFloat32;

  size_t nbytes() const { return static_cast<size_t>(count) * dtype_size(dtype); }
  static CommBuffer of(const Tensor& tensor) { return {tensor.device_raw_data(), tensor.numel(), tensor.dtype()}; }
  template <typename T>
  static CommBuffer of(std::vector<T>& values) {
    return {values.data(), static_cast<int64_t>(values.size()), dtype_of<T>()};
  }
};

// In-place sum over the group.
struct AllreduceOptions {
  CommBuffer data{};
};

// output = this member's slice of the sum of every member's input. counts[i] = elements of
// group index i's slice (sum = input.count); empty = even split (input.count % size == 0).
struct ReduceScatterOptions {
  CommBuffer input{};
  CommBuffer output{};
  std::vector<int64_t> counts{};
};

// output = concatenation of every member's input in group order. counts[i] = elements from group
// index i (allgatherv); empty = every member contributes input.count.
struct AllgatherOptions {
  CommBuffer input{};
  CommBuffer output{};
  std::vector<int64_t> counts{};
};

// data on `root` (a global rank in the group) is copied into data on every member.
struct BroadcastOptions {
  CommBuffer data{};
  int root = 0;
};

// One message of a batched send/receive; peer is a global rank in the group (may be self).
struct P2PMessage {
  int peer = 0;
  CommBuffer buffer{};
};

// Posts every send and receive at once, then waits for all. The k-th send from A to B matches
// the k-th receive on B from A; sizes must agree.
struct SendRecvOptions {
  std::vector<P2PMessage> sends{};
  std::vector<P2PMessage> recvs{};
};

struct BarrierOptions {};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual Work allreduce(const AllreduceOptions& options) = 0;
  virtual Work reduce_scatter(const ReduceScatterOptions& options) = 0;
  virtual Work allgather(const AllgatherOptions& options) = 0;
  virtual Work broadcast(const BroadcastOptions& options) = 0;
  virtual Work send_recv(const SendRecvOptions& options) = 0;
  virtual Work barrier(const BarrierOptions& options = {}) = 0;
  // Callable from any thread: fails every pending and later operation with Error(reason) at once
  // and drops the connections, so peers blocked on this member fail fast too (elastic recovery
  // after a member died). The communicator is unusable afterwards.
  virtual void abort(const std::string& reason) = 0;

  // Sorted global ranks of the group.
  const std::vector<int>& ranks() const { return ranks_; }
  int global_rank() const { return global_rank_; }
  // This process's index in ranks().
  int group_rank() const { return group_rank_; }
  int size() const { return static_cast<int>(ranks_.size()); }
  int generation() const { return generation_; }
  // Index of a global rank in the group; throws Error naming both when it is not a member.
  int index_of(int global_rank) const;
  // "group [0,2,3] gen 1 (rank 2)", used in every error message.
  std::string describe() const;

 protected:
  Communicator(std::vector<int> ranks, int global_rank, int generation);

 private:
  std::vector<int> ranks_;
  int global_rank_;
  int group_rank_;
  int generation_;
};

// Canonical form of a group: sorted, duplicates rejected (Error naming the list).
std::vector<int> canonical_group(std::vector<int> ranks);
// "0,2,3": the group's key in stores and caches.
std::string group_key(const std::vector<int>& ranks);

// Shared argument checks of every backend; each throws Error naming the op and the group.
// Returns the per-member element counts after defaulting empty counts to an even split.
std::vector<int64_t> check_reduce_scatter(const Communicator& comm, const ReduceScatterOptions& options);
std::vector<int64_t> check_allgather(const Communicator& comm, const AllgatherOptions& options);

}  // namespace hspmd::comm
