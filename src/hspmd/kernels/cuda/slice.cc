#include "hspmd/kernels/cuda/slice.h"

#include "hspmd/core/cuda/cuda_error.h"
#include "hspmd/core/region_copy.h"

namespace hspmd::kernels::cuda {

namespace {

void run(const StridedCopy& c, const void* src, void* dst, cudaStream_t stream) {
  const char* s = static_cast<const char*>(src) + c.src_offset;
  char* d = static_cast<char*>(dst) + c.dst_offset;
  const auto width = static_cast<size_t>(c.width), height = static_cast<size_t>(c.height);
  if (c.depth == 1) {
    HSPMD_CUDA_CHECK(cudaMemcpy2DAsync(d, static_cast<size_t>(c.dst_pitch), s, static_cast<size_t>(c.src_pitch), width,
                                       height, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  cudaMemcpy3DParms p{};
  p.srcPtr = cudaPitchedPtr{.ptr = const_cast<char*>(s), .pitch = static_cast<size_t>(c.src_pitch), .xsize = width,
                            .ysize = static_cast<size_t>(c.src_rows)};
  p.dstPtr = cudaPitchedPtr{.ptr = d, .pitch = static_cast<size_t>(c.dst_pitch), .xsize = width,
                            .ysize = static_cast<size_t>(c.dst_rows)};
  p.extent = cudaExtent{.width = width, .height = height, .depth = static_cast<size_t>(c.depth)};
  p.kind = cudaMemcpyDeviceToDevice;
  HSPMD_CUDA_CHECK(cudaMemcpy3DAsync(&p, stream));
}

int checked_dim(const char* kernel, int dim, size_t rank) {
  if (dim < 0) dim += static_cast<int>(rank);
  HSPMD_CHECK(dim >= 0 && static_cast<size_t>(dim) < rank) << kernel << ": dim out of range for rank " << rank;
  return dim;
}

}  // namespace

void copy_region(const void* src, const Dims& src_shape, const Dims& src_starts, void* dst, const Dims& dst_shape,
                 const Dims& dst_starts, const Dims& extents, DType dtype, cudaStream_t stream) {
  for (const StridedCopy& c :
       plan_region_copy(src_shape, src_starts, dst_shape, dst_starts, extents, static_cast<int64_t>(dtype_size(dtype)))) {
    run(c, src, dst, stream);
  }
}

void slice(const void* x, const Dims& shape, int dim, int64_t start, int64_t length, void* out, DType dtype,
           cudaStream_t stream) {
  dim = checked_dim("cuda slice", dim, shape.size());
  Dims starts(shape.size(), 0), extents = shape;
  starts[dim] = start;
  extents[dim] = length;
  copy_region(x, shape, starts, out, extents, Dims(shape.size(), 0), extents, dtype, stream);
}

void concat(const std::vector<const void*>& inputs, const std::vector<Dims>& shapes, int dim, void* out, DType dtype,
            cudaStream_t stream) {
  HSPMD_CHECK(!inputs.empty() && inputs.size() == shapes.size())
      << "cuda concat: " << inputs.size() << " inputs with " << shapes.size() << " shapes";
  dim = checked_dim("cuda concat", dim, shapes[0].size());
  Dims out_shape = shapes[0];
  out_shape[dim] = 0;
  for (const Dims& s : shapes) out_shape[dim] += s.size() > static_cast<size_t>(dim) ? s[dim] : 0;
  int64_t offset = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Dims starts(out_shape.size(), 0);
    starts[dim] = offset;
    // plan_region_copy checks each input's rank and its other dimensions against out_shape.
    copy_region(inputs[i], shapes[i], Dims(shapes[i].size(), 0), out, out_shape, starts, shapes[i], dtype, stream);
    offset += shapes[i][dim];
  }
}

}  // namespace hspmd::kernels::cuda
