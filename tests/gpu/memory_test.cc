// The CUDA caching allocator over cudaMalloc (its pool logic is tested on the CPU in
// tests/core/block_pool_test.cc), streams ordered by events, and pinned host <-> device copies.
#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu/gpu_testlib.h"
#include "hspmd/core/cuda/cuda_error.h"

namespace hspmd::cuda {
namespace {

TEST(CudaAllocator, ReusesAFreedBlockOnItsStreamOnly) {
  CudaAllocator memory({.device = 0, .capacity_bytes = 0, .name = ""});
  Stream a(0), b(0);
  void* first = memory.allocate(3 << 20, a.get());
  memory.deallocate(first);
  EXPECT_EQ(memory.allocate((3 << 20) - 1000, a.get()), first);  // same size class, same stream
  void* other = memory.allocate(3 << 20, b.get());
  EXPECT_NE(other, first);
  EXPECT_EQ(memory.stats().device_allocations, 2);
  memory.deallocate(first);
  memory.deallocate(other);
  const BlockPoolStats s = memory.stats();
  EXPECT_EQ(s.current_bytes, 0u);
  EXPECT_EQ(s.peak_bytes, size_t{6 << 20} - 1000);
  EXPECT_EQ(s.reserved_bytes, size_t{6 << 20});
  memory.release_cached();
  EXPECT_EQ(memory.stats().reserved_bytes, 0u);
  EXPECT_EQ(memory.stats().device_frees, 2);
}

TEST(CudaAllocator, CapacityEmulatesASmallerCard) {
  CudaAllocator memory({.device = 0, .capacity_bytes = 64 << 20, .name = "emulated 64 MiB card"});
  Stream s(0);
  void* a = memory.allocate(48 << 20, s.get());
  try {
    memory.allocate(32 << 20, s.get());
    FAIL() << "no throw";
  } catch (const OutOfMemoryError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out of memory on emulated 64 MiB card: requested 33554432 bytes with 50331648 bytes in use "
                        "and a capacity of 67108864 bytes"),
              std::string::npos)
        << what;
  }
  memory.deallocate(a);
}

TEST(CudaAllocator, MoreThanTheCardHoldsIsOutOfMemoryNamingTheCard) {
  CudaAllocator memory({.device = 0, .capacity_bytes = 0, .name = ""});
  Stream s(0);
  size_t free_bytes = 0, total = 0;
  HSPMD_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  try {
    memory.allocate(total + (size_t{1} << 30), s.get());
    FAIL() << "no throw";
  } catch (const OutOfMemoryError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out of memory on cuda:0: requested " + std::to_string(total + (size_t{1} << 30))),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("capacity of " + std::to_string(total) + " bytes"), std::string::npos) << what;
  }
  // The failed cudaMalloc left no error behind for the next call.
  void* p = memory.allocate(1024, s.get());
  memory.deallocate(p);
}

TEST(HostCopier, RoundTripsOddSizesThroughPinnedChunks) {
  Stream s(0);
  CudaAllocator memory({.device = 0, .capacity_bytes = 0, .name = ""});
  HostCopier copier(0, 64 << 10);  // 64 KiB chunks: the larger sizes take many
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{65536}, size_t{1000003}}) {
    std::vector<unsigned char> host(bytes), back(bytes, 0);
    for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>(i * 7 + 3);
    DeviceBuffer device(memory, bytes, s.get());
    copier.to_device(host.data(), device.data(), bytes, s);
    std::memset(host.data(), 0, bytes);  // to_device returned: the host buffer may change
    copier.to_host(device.data(), back.data(), bytes, s);
    for (size_t i = 0; i < bytes; ++i) {
      ASSERT_EQ(back[i], static_cast<unsigned char>(i * 7 + 3)) << "byte " << i << " of " << bytes;
    }
  }
}

TEST(RankStreams, CommunicationWaitsForComputeThroughAnEvent) {
  RankStreams streams(0);
  CudaAllocator memory({.device = 0, .capacity_bytes = 0, .name = ""});
  const size_t bytes = size_t{256} << 20;  // long enough that an unordered copy would overtake it
  DeviceBuffer produced(memory, bytes, streams.compute().get());
  DeviceBuffer received(memory, bytes, streams.comm().get());
  HSPMD_CUDA_CHECK(cudaMemsetAsync(received.data(), 0, bytes, streams.comm().get()));
  for (int value : {0x11, 0x22, 0x33}) {
    HSPMD_CUDA_CHECK(cudaMemsetAsync(produced.data(), value, bytes, streams.compute().get()));
    streams.comm_waits_for_compute();
    HSPMD_CUDA_CHECK(
        cudaMemcpyAsync(received.data(), produced.data(), bytes, cudaMemcpyDeviceToDevice, streams.comm().get()));
    streams.compute_waits_for_comm();  // the next memset must not overwrite what is being copied
  }
  streams.synchronize();
  std::vector<unsigned char> last(4096);
  HostCopier copier(0);
  copier.to_host(static_cast<char*>(received.data()) + bytes - last.size(), last.data(), last.size(), streams.comm());
  for (unsigned char b : last) ASSERT_EQ(b, 0x33);
}

}  // namespace
}  // namespace hspmd::cuda
