#include "hspmd/core/cuda/stream.h"

#include "hspmd/core/cuda/cuda_error.h"

namespace hspmd::cuda {

Stream::Stream(int device) : device_(device) {
  DeviceGuard guard(device_);
  HSPMD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

Stream::~Stream() {
  DeviceGuard guard(device_, DeviceGuard::kQuiet);
  cudaStreamDestroy(stream_);  // returns at once; queued work still completes
}

void Stream::synchronize() const {
  DeviceGuard guard(device_);
  HSPMD_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Event::Event(int device) : device_(device) {
  DeviceGuard guard(device_);
  HSPMD_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

Event::~Event() {
  DeviceGuard guard(device_, DeviceGuard::kQuiet);
  cudaEventDestroy(event_);
}

void Event::record(const Stream& stream) {
  DeviceGuard guard(device_);
  HSPMD_CUDA_CHECK(cudaEventRecord(event_, stream.get()));
}

void Event::block(const Stream& stream) const {
  DeviceGuard guard(stream.device());
  HSPMD_CUDA_CHECK(cudaStreamWaitEvent(stream.get(), event_, 0));
}

void Event::synchronize() const {
  DeviceGuard guard(device_);
  HSPMD_CUDA_CHECK(cudaEventSynchronize(event_));
}

bool Event::done() const {
  DeviceGuard guard(device_);
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  HSPMD_CUDA_CHECK(status);
  return true;
}

RankStreams::RankStreams(int device)
    : compute_(device), comm_(device), compute_mark_(device), comm_mark_(device) {}

void RankStreams::comm_waits_for_compute() {
  compute_mark_.record(compute_);
  compute_mark_.block(comm_);
}

void RankStreams::compute_waits_for_comm() {
  comm_mark_.record(comm_);
  comm_mark_.block(compute_);
}

void RankStreams::synchronize() const {
  compute_.synchronize();
  comm_.synchronize();
}

}  // namespace hspmd::cuda
