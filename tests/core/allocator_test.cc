#include "hspmd/core/allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "hspmd/core/tensor.h"

namespace hspmd {
namespace {

TEST(Allocator, AccountsAndEnforcesCapacity) {
  Allocator a(Allocator::Options{.capacity_bytes = 1000, .name = "emulated device 0"});
  {
    Tensor x = Tensor::empty({100}, DType::kFloat32, &a);
    EXPECT_EQ(a.current_bytes(), 400u);
    Tensor y = Tensor::empty({100}, DType::kFloat32, &a);
    EXPECT_EQ(a.peak_bytes(), 800u);
    try {
      Tensor z = Tensor::empty({100}, DType::kFloat32, &a);
      FAIL() << "no throw";
    } catch (const OutOfMemoryError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("requested 400 bytes"), std::string::npos) << what;
      EXPECT_NE(what.find("800 bytes in use"), std::string::npos) << what;
      EXPECT_NE(what.find("capacity of 1000 bytes"), std::string::npos) << what;
      EXPECT_NE(what.find("emulated device 0"), std::string::npos) << what;
    }
    EXPECT_EQ(a.current_bytes(), 800u);
  }
  EXPECT_EQ(a.current_bytes(), 0u);
  EXPECT_EQ(a.peak_bytes(), 800u);
}

TEST(Allocator, ReusesAFreedBlockOfTheSameSizeClass) {
  Allocator a;
  const size_t mib = 1 << 20;
  void* one = a.allocate(mib);
  void* more = a.allocate(mib + 1);  // the next size class up (1.125 MiB)
  a.deallocate(one, mib);
  a.deallocate(more, mib + 1);
  EXPECT_EQ(a.cached_bytes(), mib + (mib + mib / 8));
  void* slightly_less = a.allocate(mib - 1000);
  EXPECT_EQ(slightly_less, one);
  void* slightly_more = a.allocate(mib + 1000);
  EXPECT_EQ(slightly_more, more);
  EXPECT_EQ(a.cached_bytes(), 0u);
  a.deallocate(slightly_less, mib - 1000);
  a.deallocate(slightly_more, mib + 1000);

  // Through tensors, as the executor's intermediates are.
  Tensor t = Tensor::empty({256, 1024}, DType::kFloat32, &a);
  void* data = t.raw_data();
  t = Tensor();
  EXPECT_EQ(Tensor::empty({1024, 256}, DType::kFloat32, &a).raw_data(), data);
  a.release_cached();
  EXPECT_EQ(a.cached_bytes(), 0u);
}

TEST(Allocator, CountsLiveBytesNotCachedOnes) {
  Allocator a;
  {
    Tensor x = Tensor::empty({1000}, DType::kFloat32, &a);
    Tensor y = Tensor::empty({500}, DType::kFloat32, &a);
    EXPECT_EQ(a.current_bytes(), 6000u);
  }
  EXPECT_EQ(a.current_bytes(), 0u);
  EXPECT_GE(a.cached_bytes(), 6000u);
  EXPECT_EQ(a.peak_bytes(), 6000u);
  a.reset_peak();
  EXPECT_EQ(a.peak_bytes(), 0u);
  Tensor reused = Tensor::empty({1000}, DType::kFloat32, &a);  // from the cache, counted all the same
  EXPECT_EQ(a.current_bytes(), 4000u);
  EXPECT_EQ(a.peak_bytes(), 4000u);
}

TEST(Allocator, CacheNeverHoldsMoreThanThePoolOnceHadLive) {
  Allocator a;
  for (size_t k = 1; k <= 8; ++k) {
    const size_t bytes = k * 64 * 1024;  // a size class of its own each time
    a.deallocate(a.allocate(bytes), bytes);
    // Only the last block fits beside the most ever live (itself): the earlier ones were dropped.
    EXPECT_EQ(a.cached_bytes(), bytes) << "k = " << k;
  }
}

TEST(Allocator, CachedBlocksNeverCauseOutOfMemory) {
  Allocator a(Allocator::Options{.capacity_bytes = 1000, .name = "small device"});
  Tensor::empty({150}, DType::kFloat32, &a);  // 600 bytes, cached when freed
  EXPECT_GT(a.cached_bytes(), 0u);
  Tensor big = Tensor::empty({225}, DType::kFloat32, &a);  // 900 bytes: fits only without the cache
  EXPECT_EQ(a.cached_bytes(), 0u);
  EXPECT_EQ(a.current_bytes(), 900u);
  try {
    Tensor::empty({50}, DType::kFloat32, &a);
    FAIL() << "no throw";
  } catch (const OutOfMemoryError& e) {
    std::string what = e.what();  // the in-use bytes are the live ones
    EXPECT_NE(what.find("requested 200 bytes with 900 bytes in use and a capacity of 1000 bytes"), std::string::npos)
        << what;
  }
  big = Tensor();
  EXPECT_EQ(a.cached_bytes(), 960u);  // 900 rounded to its size class
  a.set_capacity_bytes(500);          // the cache lives in the device's memory: it must shrink too
  EXPECT_EQ(a.cached_bytes(), 0u);
}

TEST(Allocator, TensorsOutliveTheirAllocatorObject) {
  auto device = std::make_unique<Allocator>(Allocator::Options{.capacity_bytes = 1 << 20, .name = "rank 0"});
  Tensor weights = Tensor::full({256}, DType::kFloat32, 2.0, device.get());
  device.reset();  // as a rank's allocator dies with its runtime::DistTrainer
  EXPECT_EQ(weights.element_as_double(255), 2.0);
  Tensor copy = weights.clone();  // still from rank 0's pool, its capacity included
  EXPECT_EQ(copy.allocator()->name(), "rank 0");
  EXPECT_EQ(weights.allocator()->current_bytes(), 2048u);
  EXPECT_THROW(Tensor::empty({1 << 20}, DType::kFloat32, weights.allocator()), OutOfMemoryError);
  copy = Tensor();  // frees into the pool, whose Allocator object is gone
  EXPECT_EQ(weights.allocator()->current_bytes(), 1024u);
}

TEST(Allocator, HandlesOnOnePoolCompareEqual) {
  Allocator a, b;
  Tensor x = Tensor::empty({4}, DType::kFloat32, &a);
  EXPECT_TRUE(*x.allocator() == a);
  EXPECT_FALSE(*x.allocator() == b);
  EXPECT_TRUE(*x.clone().allocator() == a);  // clone stays on its source's device
  EXPECT_TRUE(*x.clone(&b).allocator() == b);
  Allocator same = a;  // a copy is the same pool: counters and all
  Tensor y = Tensor::empty({4}, DType::kFloat32, &same);
  EXPECT_EQ(a.current_bytes(), 32u);
}

// Ranks run as threads and may all use the process default: many threads allocate, hold and free
// blocks of a few shared sizes; no block may be handed to two holders at once, and the counters
// must come back to zero.
TEST(Allocator, ThreadsShareOnePool) {
  Allocator shared;
  const int threads = 8, rounds = 400, held = 4;
  std::vector<int> corrupted(threads, 0);
  std::vector<std::thread> workers;
  for (int id = 0; id < threads; ++id) {
    workers.emplace_back([&, id] {
      std::vector<Tensor> mine;
      for (int r = 0; r < rounds; ++r) {
        const int64_t n = 1024 << (r % 5);
        Tensor t = Tensor::full({n}, DType::kInt32, id, &shared);
        mine.push_back(t);
        if (static_cast<int>(mine.size()) > held) {
          const Tensor& oldest = mine.front();
          const int32_t* p = oldest.data<int32_t>();
          if (std::any_of(p, p + oldest.numel(), [id](int32_t v) { return v != id; })) ++corrupted[id];
          mine.erase(mine.begin());
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  for (int id = 0; id < threads; ++id) EXPECT_EQ(corrupted[id], 0) << "thread " << id;
  EXPECT_EQ(shared.current_bytes(), 0u);
  EXPECT_GT(shared.cached_bytes(), 0u);
  EXPECT_LE(shared.cached_bytes(), static_cast<size_t>(threads) * (held + 1) * (1024 << 4) * 4);
}

}  // namespace
}  // namespace hspmd
