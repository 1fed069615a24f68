// The device-independent caching pool (core/block_pool.h) over a fake device: reuse per stream and
// size class, statistics, the capacity and the out-of-memory errors. The CUDA backend
// (tests/gpu/memory_test.cc) runs the same pool over cudaMalloc.
#include "hspmd/core/block_pool.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "hspmd/core/error.h"
#include "hspmd/core/size_class.h"

namespace hspmd {
namespace {

// Host memory posing as a device of `total` bytes: allocate returns nullptr once the blocks it
// has handed out would exceed it, as cudaMalloc reports cudaErrorMemoryAllocation.
class FakeDevice : public RawMemory {
 public:
  struct Counters {
    size_t held = 0;
    int allocations = 0;
    int frees = 0;
    std::set<void*> live;
  };
  FakeDevice(size_t total, Counters* counters) : total_(total), counters_(counters) {}
  void* allocate(size_t bytes) override {
    if (counters_->held + bytes > total_) return nullptr;
    void* ptr = std::malloc(bytes);
    counters_->held += bytes;
    ++counters_->allocations;
    counters_->live.insert(ptr);
    sizes_[ptr] = bytes;
    return ptr;
  }
  void free(void* ptr) noexcept override {
    counters_->held -= sizes_.at(ptr);
    ++counters_->frees;
    counters_->live.erase(ptr);
    sizes_.erase(ptr);
    std::free(ptr);
  }
  size_t total_bytes() const override { return total_; }
  std::string name() const override { return "fake:0"; }

 private:
  size_t total_;
  Counters* counters_;
  std::map<void*, size_t> sizes_;
};

constexpr StreamKey kCompute = 1;
constexpr StreamKey kComm = 2;

static_assert(size_class_bytes(0) == 64 && size_class_bytes(1) == 64 && size_class_bytes(1000) == 1024);
static_assert(size_class_bytes(1025) == 1152 && size_class_bytes(3000) == 3072);

TEST(BlockPool, ReusesAFreedBlockOfTheSameSizeClassOnTheSameStream) {
  FakeDevice::Counters device;
  BlockPool pool(std::make_unique<FakeDevice>(1 << 20, &device), {});
  void* a = pool.allocate(3000, kCompute);
  pool.deallocate(a);
  // 2900 and 3000 share the class 3072: the freed block comes back, the device is not asked.
  void* b = pool.allocate(2900, kCompute);
  EXPECT_EQ(b, a);
  EXPECT_EQ(device.allocations, 1);
  // Another stream never gets a block its queued kernels may still use on the first.
  pool.deallocate(b);
  void* c = pool.allocate(3000, kComm);
  EXPECT_NE(c, a);
  EXPECT_EQ(device.allocations, 2);
  // Another size class neither.
  void* d = pool.allocate(5000, kCompute);
  EXPECT_NE(d, a);
  EXPECT_EQ(device.allocations, 3);
  pool.deallocate(c);
  pool.deallocate(d);
  EXPECT_EQ(device.frees, 0);  // cached, not given back
}

TEST(BlockPool, ReportsCurrentPeakAndReservedBytes) {
  FakeDevice::Counters device;
  BlockPool pool(std::make_unique<FakeDevice>(1 << 20, &device), {});
  void* a = pool.allocate(1000, kCompute);  // class 1024
  void* b = pool.allocate(3000, kCompute);  // class 3072
  BlockPoolStats s = pool.stats();
  EXPECT_EQ(s.current_bytes, 4000u);
  EXPECT_EQ(s.peak_bytes, 4000u);
  EXPECT_EQ(s.reserved_bytes, 4096u);
  EXPECT_EQ(s.cached_bytes, 0u);
  pool.deallocate(b);
  s = pool.stats();
  EXPECT_EQ(s.current_bytes, 1000u);
  EXPECT_EQ(s.peak_bytes, 4000u);
  EXPECT_EQ(s.reserved_bytes, 4096u);  // the freed block is still the device's memory
  EXPECT_EQ(s.cached_bytes, 3072u);
  pool.reset_peak();
  EXPECT_EQ(pool.stats().peak_bytes, 1000u);
  EXPECT_EQ(pool.stats().peak_reserved_bytes, 4096u);
  pool.release_cached();
  s = pool.stats();
  EXPECT_EQ(s.reserved_bytes, 1024u);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.device_allocations, 2);
  EXPECT_EQ(s.device_frees, 1);
  EXPECT_EQ(device.held, 1024u);
  pool.deallocate(a);
}

TEST(BlockPool, ZeroBytesGetsAUniqueBlock) {
  FakeDevice::Counters device;
  BlockPool pool(std::make_unique<FakeDevice>(1 << 20, &device), {});
  void* a = pool.allocate(0, kCompute);
  void* b = pool.allocate(0, kCompute);
  EXPECT_NE(a, b);
  EXPECT_EQ(pool.stats().current_bytes, 0u);
  EXPECT_EQ(pool.stats().reserved_bytes, 128u);
  pool.deallocate(a);
  pool.deallocate(b);
}

TEST(BlockPool, CapacityRefusesARequestNamingRequestedInUseAndCapacity) {
  FakeDevice::Counters device;
  BlockPool pool(std::make_unique<FakeDevice>(1 << 20, &device), {.capacity_bytes = 10000, .name = "rank 1 on fake:0"});
  void* a = pool.allocate(6000, kCompute);
  try {
    pool.allocate(5000, kCompute);
    FAIL() << "no throw";
  } catch (const OutOfMemoryError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out of memory on rank 1 on fake:0"), std::string::npos) << what;
    EXPECT_NE(what.find("requested 5000 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("6000 bytes in use"), std::string::npos) << what;
    EXPECT_NE(what.find("capacity of 10000 bytes"), std::string::npos) << what;
  }
  EXPECT_EQ(pool.stats().current_bytes, 6000u);  // a refused request changes nothing
  EXPECT_EQ(device.allocations, 1);
  pool.deallocate(a);
}

TEST(BlockPool, CapacityEvictsTheCacheBeforeRefusing) {
  FakeDevice::Counters device;
  BlockPool pool(std::make_unique<FakeDevice>(1 << 20, &device), {.capacity_bytes = 8192, .name = ""});
  void* a = pool.allocate(4096, kCompute);
  void* b = pool.allocate(3072, kComm);
  pool.deallocate(a);
  pool.deallocate(b);
  EXPECT_EQ(pool.stats().reserved_bytes, 7168u);
  // 6144 bytes in a new class: the card holds 8192, so cached blocks go back, the oldest first: a,
  // then b too (3072 + 6144 > 8192).
  void* c = pool.allocate(6144, kCompute);
  EXPECT_EQ(device.frees, 2);
  EXPECT_EQ(pool.stats().reserved_bytes, 6144u);
  EXPECT_EQ(device.held, 6144u);
  // Only what must leave leaves: a cached 1024-byte block stays beside a new one of 1024 on the
  // other stream (6144 + 1024 + 1024 = 8192).
  void* d = pool.allocate(1024, kCompute);
  pool.deallocate(d);
  void* e = pool.allocate(1000, kComm);
  EXPECT_EQ(device.frees, 2);
  EXPECT_EQ(pool.stats().reserved_bytes, 8192u);
  EXPECT_EQ(pool.stats().cached_bytes, 1024u);
  pool.deallocate(c);
  pool.deallocate(e);
}

TEST(BlockPool, LoweringTheCapacityGivesCachedBlocksBack) {
  FakeDevice::Counters device;
  BlockPool pool(std::make_unique<FakeDevice>(1 << 20, &device), {});
  void* a = pool.allocate(4096, kCompute);
  void* b = pool.allocate(4096, kCompute);
  pool.deallocate(b);
  pool.set_capacity_bytes(6000);
  EXPECT_EQ(pool.stats().reserved_bytes, 4096u);
  EXPECT_EQ(device.held, 4096u);
  EXPECT_THROW(pool.allocate(2000, kCompute), OutOfMemoryError);  // 4096 + 2000 > 6000
  pool.deallocate(a);
}

TEST(BlockPool, AFullDeviceGetsTheCacheBackThenNamesItsOwnCapacity) {
  FakeDevice::Counters device;
  BlockPool pool(std::make_unique<FakeDevice>(16384, &device), {});
  void* a = pool.allocate(8192, kCompute);
  void* b = pool.allocate(4096, kComm);
  pool.deallocate(b);
  // 8192 more does not fit beside a and the cached b: b goes back, then it fits.
  void* c = pool.allocate(8192, kCompute);
  EXPECT_EQ(device.frees, 1);
  EXPECT_EQ(device.held, 16384u);
  try {
    pool.allocate(100, kCompute);
    FAIL() << "no throw";
  } catch (const OutOfMemoryError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out of memory on fake:0: requested 100 bytes with 16384 bytes in use and a capacity of 16384"),
              std::string::npos)
        << what;
  }
  pool.deallocate(a);
  pool.deallocate(c);
}

TEST(BlockPool, FreeingAForeignPointerIsAnError) {
  FakeDevice::Counters device;
  BlockPool pool(std::make_unique<FakeDevice>(1 << 20, &device), {});
  int x = 0;
  EXPECT_THROW(pool.deallocate(&x), Error);
  void* a = pool.allocate(10, kCompute);
  pool.deallocate(a);
  EXPECT_THROW(pool.deallocate(a), Error);  // twice
}

TEST(BlockPool, DestructionGivesTheCacheBack) {
  FakeDevice::Counters device;
  {
    BlockPool pool(std::make_unique<FakeDevice>(1 << 20, &device), {});
    for (int i = 0; i < 5; ++i) pool.deallocate(pool.allocate(1000u * (i + 1), i % 2 ? kCompute : kComm));
    EXPECT_EQ(device.live.size(), 5u);
  }
  EXPECT_TRUE(device.live.empty());
  EXPECT_EQ(device.held, 0u);
}

}  // namespace
}  // namespace hspmd
