// Box copies between tensors (the data movement of resharding), and slice/concat on top of them.
//
// copy_region finds the longest contiguous run the box has in both tensors: the innermost dims where
// the box spans the whole dim in src and dst merge into one run, copied with one memcpy. The outer
// dims are walked with an odometer that tracks the src and dst offsets; threads split the runs.
//   src [4, 6, 8], box starts {1, 0, 0}, extents {2, 6, 8} into dst [2, 6, 8]: one run of 96 elements.
//   src [4, 6, 8], box extents {4, 3, 8}: dims 1-2 give runs of 24 elements, 4 of them.
#include "hspmd/kernels/slice.h"

#include <omp.h>

#include <cstring>
#include <sstream>
#include <string>

#include "hspmd/kernels/cpu/typed_visit.h"

namespace hspmd::kernels {
namespace {

// Copies below this many bytes stay on one thread.
constexpr int64_t kParallelBytes = int64_t{1} << 18;

std::string box_text(const std::vector<int64_t>& starts, const std::vector<int64_t>& extents) {
  std::ostringstream s;
  s << "[";
  for (size_t d = 0; d < starts.size(); ++d) s << (d ? ", " : "") << starts[d] << ":" << starts[d] + extents[d];
  s << "]";
  return s.str();
}

std::vector<int64_t> row_major_strides(const Shape& shape) {
  std::vector<int64_t> strides(static_cast<size_t>(shape.rank()));
  int64_t stride = 1;
  for (int d = shape.rank(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape.dims()[d];
  }
  return strides;
}

void check_box(const char* name, const Tensor& t, const std::vector<int64_t>& starts,
               const std::vector<int64_t>& extents) {
  HSPMD_CHECK(static_cast<int>(starts.size()) == t.rank())
      << "copy_region: " << starts.size() << " start indices for '" << name << "' " << t.to_string();
  for (int d = 0; d < t.rank(); ++d) {
    HSPMD_CHECK(starts[d] >= 0 && extents[d] >= 0 && starts[d] + extents[d] <= t.dim(d))
        << "copy_region: box " << box_text(starts, extents) << " lies outside '" << name << "' " << t.to_string()
        << " in dim " << d;
  }
}

}  // namespace

void copy_region(const Tensor& src, const std::vector<int64_t>& src_starts, const Tensor& dst,
                 const std::vector<int64_t>& dst_starts, const std::vector<int64_t>& extents) {
  const char* kernel = "copy_region";
  cpu::check_defined(kernel, "src", src);
  cpu::check_same_dtype(kernel, "src", src, "dst", dst);
  HSPMD_CHECK(src.rank() == dst.rank()) << kernel << ": 'src' " << src.to_string() << " and 'dst' "
                                        << dst.to_string() << " differ in rank";
  const int rank = src.rank();
  HSPMD_CHECK(static_cast<int>(extents.size()) == rank)
      << kernel << ": " << extents.size() << " extents for rank-" << rank << " tensors";
  check_box("src", src, src_starts, extents);
  check_box("dst", dst, dst_starts, extents);
  for (int64_t e : extents) {
    if (e == 0) return;
  }

  // The run covers dims [inner, rank); dims before `inner` are walked one run at a time.
  int inner = rank;
  int64_t run = 1;
  while (inner > 0) {
    --inner;
    run *= extents[inner];
    if (extents[inner] != src.dim(inner) || extents[inner] != dst.dim(inner)) break;
  }
  const std::vector<int64_t> src_strides = row_major_strides(src.shape());
  const std::vector<int64_t> dst_strides = row_major_strides(dst.shape());
  int64_t src_base = 0, dst_base = 0, runs = 1;
  for (int d = 0; d < rank; ++d) {
    src_base += src_starts[d] * src_strides[d];
    dst_base += dst_starts[d] * dst_strides[d];
    if (d < inner) runs *= extents[d];
  }
  const size_t esize = dtype_size(src.dtype());
  const size_t run_bytes = static_cast<size_t>(run) * esize;
  const char* s = static_cast<const char*>(src.raw_data());
  char* t = static_cast<char*>(dst.raw_data());
  // Copies runs [begin, end): an odometer over the outer dims [0, inner) tracks both offsets.
  auto copy_runs = [&](int64_t begin, int64_t end) {
    std::vector<int64_t> index(static_cast<size_t>(inner));
    int64_t so = src_base, to = dst_base;
    for (int64_t d = inner, rest = begin; d-- > 0;) {
      index[d] = rest % extents[d];
      rest /= extents[d];
      so += index[d] * src_strides[d];
      to += index[d] * dst_strides[d];
    }
    for (int64_t r = begin; r < end; ++r) {
      std::memcpy(t + static_cast<size_t>(to) * esize, s + static_cast<size_t>(so) * esize, run_bytes);
      for (int d = inner; d-- > 0;) {
        so += src_strides[d];
        to += dst_strides[d];
        if (++index[d] < extents[d]) break;
        so -= extents[d] * src_strides[d];
        to -= extents[d] * dst_strides[d];
        index[d] = 0;
      }
    }
  };
  if (runs == 1 || static_cast<int64_t>(run_bytes) * runs < kParallelBytes) {
    copy_runs(0, runs);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), me = omp_get_thread_num();
    copy_runs(runs * me / threads, runs * (me + 1) / threads);
  }
}

void slice(const Tensor& x, int dim, int64_t start, int64_t length, const Tensor& out) {
  cpu::check_defined("slice", "x", x);
  cpu::check_defined("slice", "out", out);
  HSPMD_CHECK(dim >= -x.rank() && dim < x.rank()) << "slice: dim " << dim << " out of range for 'x' " << x.to_string();
  const int d = x.shape().canonical_dim(dim);
  HSPMD_CHECK(start >= 0 && length >= 0 && start + length <= x.dim(d))
      << "slice: [" << start << ", " << start + length << ") out of range for dim " << d << " of 'x' "
      << x.to_string();
  const Shape expected = x.shape().with_dim(d, length);
  HSPMD_CHECK(out.shape() == expected && out.dtype() == x.dtype())
      << "slice: 'out' is " << out.to_string() << ", expected " << dtype_name(x.dtype()) << expected.to_string();
  std::vector<int64_t> starts(static_cast<size_t>(x.rank()), 0);
  starts[d] = start;
  copy_region(x, starts, out, std::vector<int64_t>(starts.size(), 0), expected.dims());
}

void concat(const std::vector<Tensor>& inputs, int dim, const Tensor& out) {
  cpu::check_defined("concat", "out", out);
  HSPMD_CHECK(!inputs.empty()) << "concat: no inputs for 'out' " << out.to_string();
  HSPMD_CHECK(dim >= -out.rank() && dim < out.rank())
      << "concat: dim " << dim << " out of range for 'out' " << out.to_string();
  const int d = out.shape().canonical_dim(dim);
  int64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    cpu::check_defined("concat", ("inputs[" + std::to_string(i) + "]").c_str(), in);
    HSPMD_CHECK(in.dtype() == out.dtype() && in.rank() == out.rank() &&
                in.shape().with_dim(d, out.dim(d)) == out.shape())
        << "concat: inputs[" << i << "] " << in.to_string() << " does not fit 'out' " << out.to_string()
        << " along dim " << d << " (dtype, rank and the other dims must match)";
    total += in.dim(d);
  }
  HSPMD_CHECK(total == out.dim(d)) << "concat: inputs add up to " << total << " along dim " << d << ", but 'out' "
                                   << out.to_string() << " has " << out.dim(d);
  std::vector<int64_t> zeros(static_cast<size_t>(out.rank()), 0), dst_starts = zeros;
  for (const Tensor& in : inputs) {
    copy_region(in, zeros, out, dst_starts, in.shape().dims());
    dst_starts[d] += in.dim(d);
  }
}

}  // namespace hspmd::kernels
