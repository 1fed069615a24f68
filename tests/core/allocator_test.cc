#include "hspmd/core/allocator.h"

#include <gtest/gtest.h>

#include <memory>

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

}  // namespace
}  // namespace hspmd
