// copy_region, slice and concat against an element-by-element reference copy, for every dtype;
// degenerate boxes; the multi-threaded path; errors.
#include "hspmd/kernels/slice.h"

#include <gmock/gmock.h>

#include <cstring>
#include <string>
#include <vector>

#include "hspmd/kernels/threading.h"
#include "kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using hspmd::testing::random_ints;
using hspmd::testing::random_tensor;

const std::vector<DType> kDTypes = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32,
                                    DType::kInt64};

Tensor filled(const Shape& shape, DType dtype, uint64_t seed) {
  if (is_floating(dtype)) return random_tensor(shape, dtype, seed);
  return random_ints(shape, dtype, seed, -1000000, 1000000);
}

// One element at a time: unravel the box index, compute both flat offsets, copy the element's bytes.
void reference_copy(const Tensor& src, const std::vector<int64_t>& src_starts, const Tensor& dst,
                    const std::vector<int64_t>& dst_starts, const std::vector<int64_t>& extents) {
  int64_t count = 1;
  for (int64_t e : extents) count *= e;
  const size_t esize = dtype_size(src.dtype());
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = i, so = 0, to = 0, s_stride = 1, d_stride = 1;
    for (int d = src.rank() - 1; d >= 0; --d) {
      int64_t k = rest % extents[d];
      rest /= extents[d];
      so += (src_starts[d] + k) * s_stride;
      to += (dst_starts[d] + k) * d_stride;
      s_stride *= src.dim(d);
      d_stride *= dst.dim(d);
    }
    std::memcpy(static_cast<char*>(dst.raw_data()) + to * esize,
                static_cast<const char*>(src.raw_data()) + so * esize, esize);
  }
}

::testing::AssertionResult same_bytes(const Tensor& a, const Tensor& b) {
  if (a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << a.to_string() << " differs from the reference";
}

struct Box {
  Shape src, dst;
  std::vector<int64_t> src_starts, dst_starts, extents;
};

TEST(CopyRegion, MatchesReferenceForEveryDType) {
  const std::vector<Box> boxes = {
      {{7, 13}, {5, 9}, {2, 4}, {1, 3}, {3, 5}},                   // interior box, odd sizes
      {{4, 6, 8}, {2, 6, 8}, {1, 0, 0}, {0, 0, 0}, {2, 6, 8}},     // whole rows: one contiguous run
      {{4, 6, 8}, {5, 3, 8}, {0, 3, 0}, {1, 0, 0}, {4, 3, 8}},     // runs of 3 x 8
      {{4, 6, 8}, {4, 6, 9}, {0, 0, 0}, {0, 0, 1}, {4, 6, 8}},     // full in src, not in dst
      {{1, 7, 1, 3}, {2, 7, 1, 5}, {0, 2, 0, 1}, {1, 0, 0, 2}, {1, 4, 1, 2}},  // size-1 dims
      {{}, {}, {}, {}, {}},                                        // rank 0: one element
      {{7, 13}, {5, 9}, {2, 4}, {1, 3}, {0, 5}},                   // empty box
      {{0, 13}, {5, 9}, {0, 4}, {1, 3}, {0, 5}},                   // empty source
  };
  for (DType dtype : kDTypes) {
    for (const Box& b : boxes) {
      Tensor src = filled(b.src, dtype, 1);
      Tensor dst = filled(b.dst, dtype, 2), expected = dst.clone();
      copy_region(src, b.src_starts, dst, b.dst_starts, b.extents);
      reference_copy(src, b.src_starts, expected, b.dst_starts, b.extents);
      EXPECT_TRUE(same_bytes(dst, expected)) << src.to_string() << " -> " << dst.to_string();
    }
  }
}

TEST(CopyRegion, LargeBoxOnTwoThreads) {
  set_num_threads(2);
  Tensor src = filled({512, 300}, DType::kFloat64, 3);
  Tensor dst = filled({400, 200}, DType::kFloat64, 4), expected = dst.clone();
  copy_region(src, {100, 50}, dst, {10, 7}, {390, 190});
  reference_copy(src, {100, 50}, expected, {10, 7}, {390, 190});
  EXPECT_TRUE(same_bytes(dst, expected));
  set_num_threads(1);
}

TEST(Slice, MatchesReference) {
  for (DType dtype : kDTypes) {
    Tensor x = filled({7, 13}, dtype, 5);
    Tensor cols = Tensor::empty({7, 5}, dtype), expected = cols.clone();
    slice(x, -1, 4, 5, cols);
    reference_copy(x, {0, 4}, expected, {0, 0}, {7, 5});
    EXPECT_TRUE(same_bytes(cols, expected)) << "x[:, 4:9] of " << x.to_string();

    Tensor rows = Tensor::empty({2, 13}, dtype), expected_rows = rows.clone();
    slice(x, 0, 5, 2, rows);
    reference_copy(x, {5, 0}, expected_rows, {0, 0}, {2, 13});
    EXPECT_TRUE(same_bytes(rows, expected_rows)) << "x[5:7] of " << x.to_string();

    Tensor none = Tensor::empty({7, 0}, dtype);
    slice(x, 1, 13, 0, none);  // empty slice at the end is valid
  }
}

TEST(Concat, MatchesReference) {
  for (DType dtype : kDTypes) {
    Tensor a = filled({7, 3}, dtype, 6), b = filled({7, 0}, dtype, 7), c = filled({7, 10}, dtype, 8);
    Tensor out = Tensor::empty({7, 13}, dtype), expected = out.clone();
    concat({a, b, c}, 1, out);
    reference_copy(a, {0, 0}, expected, {0, 0}, {7, 3});
    reference_copy(c, {0, 0}, expected, {0, 3}, {7, 10});
    EXPECT_TRUE(same_bytes(out, expected)) << "concat along dim 1, " << dtype_name(dtype);

    Tensor top = filled({2, 13}, dtype, 9), bottom = filled({5, 13}, dtype, 10);
    concat({top, bottom}, -2, out);
    reference_copy(top, {0, 0}, expected, {0, 0}, {2, 13});
    reference_copy(bottom, {0, 0}, expected, {2, 0}, {5, 13});
    EXPECT_TRUE(same_bytes(out, expected)) << "concat along dim 0, " << dtype_name(dtype);
  }
}

TEST(Slice, RejectsBadArguments) {
  Tensor x = filled({3, 4}, DType::kFloat32, 11);
  Tensor dst = Tensor::empty({2, 2}, DType::kFloat32);
  EXPECT_THAT([&] { copy_region(x, {2, 0}, dst, {0, 0}, {2, 2}); },
              ThrowsMessage<Error>(HasSubstr("copy_region: box [2:4, 0:2] lies outside 'src' float32[3, 4] in dim 0")));
  EXPECT_THAT([&] { copy_region(x, {0, 0}, dst, {1, 0}, {2, 2}); },
              ThrowsMessage<Error>(HasSubstr("copy_region: box [1:3, 0:2] lies outside 'dst' float32[2, 2] in dim 0")));
  EXPECT_THAT([&] { copy_region(x, {0, 0}, Tensor::empty({2, 2}, DType::kInt32), {0, 0}, {2, 2}); },
              ThrowsMessage<Error>(HasSubstr("copy_region: 'dst' is int32[2, 2] but 'src' is float32[3, 4]")));
  EXPECT_THAT([&] { copy_region(x, {0, 0}, Tensor::empty({4}, DType::kFloat32), {0}, {2}); },
              ThrowsMessage<Error>(HasSubstr("copy_region: 'src' float32[3, 4] and 'dst' float32[4] differ in rank")));
  EXPECT_THAT([&] { copy_region(x, {0}, dst, {0, 0}, {2, 2}); },
              ThrowsMessage<Error>(HasSubstr("copy_region: 1 start indices for 'src' float32[3, 4]")));
  EXPECT_THAT([&] { slice(x, 1, 3, 2, dst); },
              ThrowsMessage<Error>(HasSubstr("slice: [3, 5) out of range for dim 1 of 'x' float32[3, 4]")));
  EXPECT_THAT([&] { slice(x, 1, 0, 2, dst); },
              ThrowsMessage<Error>(HasSubstr("slice: 'out' is float32[2, 2], expected float32[3, 2]")));
  EXPECT_THAT([&] { concat({x, dst}, 0, Tensor::empty({5, 4}, DType::kFloat32)); },
              ThrowsMessage<Error>(HasSubstr("concat: inputs[1] float32[2, 2] does not fit 'out' float32[5, 4]")));
  EXPECT_THAT([&] { concat({x, x}, 0, Tensor::empty({5, 4}, DType::kFloat32)); },
              ThrowsMessage<Error>(HasSubstr("concat: inputs add up to 6 along dim 0, but 'out' float32[5, 4] has 5")));
  EXPECT_THAT([&] { concat({}, 0, dst); }, ThrowsMessage<Error>(HasSubstr("concat: no inputs")));
}

}  // namespace
}  // namespace hspmd::kernels
