#include "gpu/gpu_testlib.h"

#include "hspmd/kernels/cast.h"

namespace hspmd::testing {

GpuTest::GpuTest() : stream_(0), memory_({.device = 0, .capacity_bytes = 0, .name = ""}), copier_(0, size_t{1} << 20) {}

cuda::DeviceBuffer GpuTest::upload(const Tensor& host) {
  cuda::DeviceBuffer buffer(memory_, host.nbytes(), stream_.get());
  copier_.to_device(host, buffer.data(), stream_);
  return buffer;
}

Tensor GpuTest::download(const cuda::DeviceBuffer& device, const Shape& shape, DType dtype) {
  return copier_.to_host(device.data(), shape, dtype, stream_);
}

cuda::DeviceBuffer GpuTest::device_empty(const Shape& shape, DType dtype) {
  return cuda::DeviceBuffer(memory_, static_cast<size_t>(shape.numel()) * dtype_size(dtype), stream_.get());
}

Tensor to_bf16(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), DType::kBFloat16);
  kernels::cast(x, out);
  return out;
}

Tensor to_f32(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), DType::kFloat32);
  kernels::cast(x, out);
  return out;
}

}  // namespace hspmd::testing
