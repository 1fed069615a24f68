// Tensors on a device other than the host, without a GPU: a fake device backend (host memory
// that says it is cuda:3, core/fake_device_testlib.h) checks what Tensor
// does for device tensors: data() refuses them naming the device, device_data() serves kernels,
// and zeros, fill, from_vector, clone, copy_from and to_host go through the backend. The CUDA
// backend itself is tested on a GPU (tests/gpu/device_tensor_test.cc).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/fake_device_testlib.h"
#include "hspmd/core/error.h"
#include "hspmd/core/tensor.h"

namespace hspmd {
namespace {

using testing::FakeDeviceMemory;

class DeviceTensorTest : public ::testing::Test {
 protected:
  std::shared_ptr<FakeDeviceMemory> memory_ = std::make_shared<FakeDeviceMemory>();
  Allocator device_{memory_};
};

TEST_F(DeviceTensorTest, ATensorLivesOnItsAllocatorsDevice) {
  EXPECT_EQ(Allocator().device(), Device::cpu());
  EXPECT_EQ(Tensor::empty({2}, DType::kFloat32).device(), Device::cpu());
  EXPECT_TRUE(Tensor().on_host());
  const Tensor t = Tensor::empty({2, 3}, DType::kFloat32, &device_);
  EXPECT_EQ(t.device().to_string(), "cuda:3");
  EXPECT_FALSE(t.on_host());
  EXPECT_EQ(t.narrow(0, 1, 1).device(), t.device());  // views keep the storage's device
  EXPECT_EQ(memory_->current_bytes(), 24u);
}

TEST_F(DeviceTensorTest, HostAccessToADeviceTensorIsAnErrorNamingTheDevice) {
  const Tensor t = Tensor::empty({2, 3}, DType::kFloat32, &device_);
  try {
    t.data<float>();
    FAIL() << "data() of a device tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float32[2, 3] lives on cuda:3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("to_host()"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.raw_data(), Error);
  EXPECT_THROW(t.to_vector<float>(), Error);
  EXPECT_THROW(t.element_as_double(0), Error);
  EXPECT_NE(t.device_data<float>(), nullptr);
  EXPECT_THROW(t.device_data<double>(), Error);  // the dtype is still checked
}

TEST_F(DeviceTensorTest, CopiesBetweenHostAndDeviceGoThroughTheBackend) {
  const Tensor host = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  const Tensor on_device = host.clone(&device_);
  EXPECT_EQ(memory_->to_device, 1);
  EXPECT_EQ(on_device.device().to_string(), "cuda:3");
  const Tensor back = on_device.to_host();
  EXPECT_EQ(memory_->to_host, 1);
  EXPECT_TRUE(back.on_host());
  EXPECT_EQ(back.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));

  const Tensor copy = on_device.clone();  // keeps the device: a copy within it
  EXPECT_EQ(memory_->within, 1);
  EXPECT_EQ(copy.device(), on_device.device());

  const Tensor from_values = Tensor::from_vector<int64_t>({3}, {7, 8, 9}, &device_);
  EXPECT_EQ(memory_->to_device, 2);
  EXPECT_EQ(from_values.to_host().to_vector<int64_t>(), (std::vector<int64_t>{7, 8, 9}));
}

TEST_F(DeviceTensorTest, ZerosAndFillOnTheDevice) {
  const Tensor z = Tensor::zeros({5}, DType::kBFloat16, &device_);
  EXPECT_EQ(memory_->zeroed, 1);
  EXPECT_EQ(z.to_host().element_as_double(4), 0.0);
  const Tensor f = Tensor::full({3}, DType::kFloat32, 2.5, &device_);
  EXPECT_EQ(f.to_host().to_vector<float>(), (std::vector<float>{2.5f, 2.5f, 2.5f}));
}

TEST_F(DeviceTensorTest, HostTensorsNeverReachABackendCopy) {
  const Tensor host = Tensor::from_vector<float>({2}, {1, 2});
  EXPECT_TRUE(host.to_host().shares_storage_with(host));  // already on the host: no copy
  Tensor other = Tensor::empty({2}, DType::kFloat32);
  other.copy_from(host);
  EXPECT_EQ(other.to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ(memory_->to_device + memory_->to_host + memory_->within, 0);
}

}  // namespace
}  // namespace hspmd
