// CUDA streams and events of one rank, owned (RAII) and made current around each call.
//
// A rank runs its kernels on a compute stream and its collectives on a communication stream, so a
// gradient's all-reduce overlaps the backward of the layers before it. The two are ordered by
// events, never by synchronizing the host:
//
//   RankStreams s(device);
//   launch backward of layer L on s.compute();
//   s.comm_waits_for_compute();        // the all-reduce below starts after layer L's gradients
//   ncclAllReduce(..., s.comm().get());
//   s.compute_waits_for_comm();        // the optimizer reads the reduced gradients
//
// Both streams are non-blocking: they never wait for the legacy default stream, whose implicit
// synchronization would serialize the two.
#pragma once

#include <cuda_runtime_api.h>

#include "hspmd/core/block_pool.h"

namespace hspmd::cuda {

class Stream {
 public:
  explicit Stream(int device);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  // The key a caching allocator files this stream's blocks under (core/block_pool.h).
  StreamKey key() const { return reinterpret_cast<StreamKey>(stream_); }
  // Blocks the host until every call queued so far has finished; throws the first error.
  void synchronize() const;

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

// A point in a stream's queue (timing disabled: cheaper to record and wait on).
class Event {
 public:
  explicit Event(int device);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Marks the end of the work queued on `stream` so far.
  void record(const Stream& stream);
  // Work queued on `stream` after this call runs after the recorded work (the host does not wait).
  void block(const Stream& stream) const;
  void synchronize() const;
  // True once the recorded work has finished (or nothing was recorded).
  bool done() const;
  cudaEvent_t get() const { return event_; }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

// The two streams of one rank and the events that order them.
class RankStreams {
 public:
  explicit RankStreams(int device);

  Stream& compute() { return compute_; }
  Stream& comm() { return comm_; }
  int device() const { return compute_.device(); }
  // Communication queued after this call runs after the compute work queued before it.
  void comm_waits_for_compute();
  // Compute work queued after this call runs after the communication queued before it.
  void compute_waits_for_comm();
  void synchronize() const;

 private:
  Stream compute_;
  Stream comm_;
  Event compute_mark_;
  Event comm_mark_;
};

}  // namespace hspmd::cuda
