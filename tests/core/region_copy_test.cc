// Box copies planned as strided copies (core/region_copy.h), executed here with memcpy and
// compared with an element-by-element copy; the CUDA backend runs the same plans on the copy
// engine (tests/gpu/slice_test.cc).
#include "hspmd/core/region_copy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hspmd/core/error.h"

namespace hspmd {
namespace {

void run(const std::vector<StridedCopy>& copies, const std::vector<unsigned char>& src, std::vector<unsigned char>& dst) {
  for (const StridedCopy& c : copies) {
    for (int64_t z = 0; z < c.depth; ++z) {
      for (int64_t y = 0; y < c.height; ++y) {
        std::memcpy(dst.data() + c.dst_offset + (z * c.dst_rows + y) * c.dst_pitch,
                    src.data() + c.src_offset + (z * c.src_rows + y) * c.src_pitch, static_cast<size_t>(c.width));
      }
    }
  }
}

// Element by element, over every index of the box.
void reference(const std::vector<int64_t>& src_shape, const std::vector<int64_t>& src_starts,
               const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& dst_starts,
               const std::vector<int64_t>& extents, int64_t eb, const std::vector<unsigned char>& src,
               std::vector<unsigned char>& dst) {
  const size_t rank = extents.size();
  std::vector<int64_t> index(rank, 0);
  while (true) {
    int64_t s = 0, d = 0;
    for (size_t k = 0; k < rank; ++k) {
      s = s * src_shape[k] + src_starts[k] + index[k];
      d = d * dst_shape[k] + dst_starts[k] + index[k];
    }
    std::memcpy(dst.data() + d * eb, src.data() + s * eb, static_cast<size_t>(eb));
    size_t k = rank;
    while (k > 0 && ++index[k - 1] == extents[k - 1]) index[--k] = 0;
    if (k == 0) return;
  }
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

TEST(RegionCopy, TheHeadersExampleIsOneCopy) {
  const auto copies = plan_region_copy({3, 8}, {0, 4}, {6, 4}, {2, 0}, {3, 4}, 4);
  ASSERT_EQ(copies.size(), 1u);
  const StridedCopy& c = copies[0];
  EXPECT_EQ(c.width, 16);
  EXPECT_EQ(c.height, 3);
  EXPECT_EQ(c.depth, 1);
  EXPECT_EQ(c.src_offset, 16);
  EXPECT_EQ(c.src_pitch, 32);
  EXPECT_EQ(c.dst_offset, 32);
  EXPECT_EQ(c.dst_pitch, 16);
}

TEST(RegionCopy, WholeInnerDimensionsMerge) {
  // 3 of 8 heads of [2, 5, 8, 16] bf16 into a [2, 5, 3, 16] tensor: 10 runs of 3 * 16 elements.
  auto copies = plan_region_copy({2, 5, 8, 16}, {0, 0, 4, 0}, {2, 5, 3, 16}, {0, 0, 0, 0}, {2, 5, 3, 16}, 2);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].width, 3 * 16 * 2);
  EXPECT_EQ(copies[0].height * copies[0].depth, 10);
  // A whole tensor is one run.
  copies = plan_region_copy({4, 6, 7}, {0, 0, 0}, {4, 6, 7}, {0, 0, 0}, {4, 6, 7}, 8);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].width, 4 * 6 * 7 * 8);
  EXPECT_EQ(copies[0].height, 1);
  // Four dimensions that cannot merge: one 3-D copy per index of the outermost.
  copies = plan_region_copy({3, 4, 5, 6}, {1, 1, 1, 1}, {3, 4, 5, 6}, {0, 0, 0, 0}, {2, 3, 4, 5}, 4);
  EXPECT_EQ(copies.size(), 2u);
}

TEST(RegionCopy, RandomBoxesEqualTheElementwiseCopy) {
  std::mt19937 rng(7);
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 500; ++trial) {
    const size_t rank = static_cast<size_t>(uniform(1, 5));
    const int64_t eb = int64_t{1} << uniform(0, 3);
    std::vector<int64_t> src_shape(rank), dst_shape(rank), extents(rank), src_starts(rank), dst_starts(rank);
    for (size_t k = 0; k < rank; ++k) {
      extents[k] = uniform(0, 4) == 0 && trial % 7 == 0 ? 0 : uniform(1, 4);
      src_shape[k] = extents[k] + uniform(0, 2) * uniform(0, 1);
      dst_shape[k] = extents[k] + uniform(0, 2) * uniform(0, 1);
      src_starts[k] = uniform(0, src_shape[k] - extents[k]);
      dst_starts[k] = uniform(0, dst_shape[k] - extents[k]);
    }
    std::vector<unsigned char> src(static_cast<size_t>(numel(src_shape) * eb));
    for (auto& b : src) b = static_cast<unsigned char>(uniform(0, 255));
    std::vector<unsigned char> expected(static_cast<size_t>(numel(dst_shape) * eb), 0xAB), actual = expected;
    const auto copies = plan_region_copy(src_shape, src_starts, dst_shape, dst_starts, extents, eb);
    run(copies, src, actual);
    if (numel(extents) > 0) reference(src_shape, src_starts, dst_shape, dst_starts, extents, eb, src, expected);
    ASSERT_EQ(actual, expected) << "trial " << trial << ", rank " << rank << ", " << copies.size() << " copies";
  }
}

TEST(RegionCopy, ABoxOutsideEitherTensorIsAnError) {
  EXPECT_THROW(plan_region_copy({4, 4}, {0, 2}, {4, 4}, {0, 0}, {4, 3}, 4), Error);  // src columns 2..4
  EXPECT_THROW(plan_region_copy({4, 4}, {0, 0}, {2, 4}, {0, 0}, {3, 4}, 4), Error);  // dst rows
  EXPECT_THROW(plan_region_copy({4, 4}, {0, 0}, {4}, {0}, {4, 4}, 4), Error);        // ranks
}

}  // namespace
}  // namespace hspmd
