// Tensor: a contiguous, row-major view into shared storage.
//
//   Tensor x = Tensor::empty({B, S, H}, DType::kFloat32);   // on Allocator::process_default()
//   Tensor mb = x.narrow(0, 2, 2);      // micro-batch rows 2..3: a view, no copy
//   Tensor flat = x.reshape({B * S, H}); // a view, no copy
//   float* p = flat.data<float>();       // checks the dtype (and that the memory is host memory)
//
// Device: a tensor lives where its allocator's memory does (core/allocator.h). A GPU rank's
// allocator makes tensors in GPU memory: data() and raw_data() refuse them (the host cannot read
// that memory; an Error names the tensor and its device), kernels take device_data(), and
// clone(allocator) / copy_from / to_host() copy between the host and the device:
//
//   Tensor w_gpu = w.clone(&gpu_allocator);           // host -> device (pinned staging)
//   kernel(w_gpu.device_data<float>(), ...);
//   Tensor w_back = w_gpu.to_host();                   // device -> host, returns with the data
//
// Views share storage (copying a Tensor copies a handle). Only views that stay contiguous exist:
// narrow(d, ...) needs every dimension before d to have size 1. Slices along other dims are
// copies made by the kernels (kernels::slice).
// A tensor may outlive the Allocator object it was allocated from: its storage holds a handle on
// the allocator's pool (core/allocator.h), and frees into it.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "hspmd/core/allocator.h"
#include "hspmd/core/device.h"
#include "hspmd/core/dtype.h"
#include "hspmd/core/error.h"
#include "hspmd/core/shape.h"

namespace hspmd {

// A block of memory from one allocator's pool; freed into it when the last view goes away.
class Storage {
 public:
  Storage(size_t bytes, const Allocator& allocator);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // This storage's own handle on the pool: valid as long as the storage is.
  Allocator* allocator() { return &allocator_; }
  Device device() const { return allocator_.device(); }
  bool on_host() const { return allocator_.device().type == DeviceType::kCPU; }

 private:
  Allocator allocator_;  // first: constructed before, destroyed after, the memory it hands out
  void* data_;
  size_t bytes_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage

  // Uninitialized contents. allocator == nullptr means Allocator::process_default().
  static Tensor empty(const Shape& shape, DType dtype, Allocator* allocator = nullptr);
  static Tensor zeros(const Shape& shape, DType dtype, Allocator* allocator = nullptr);
  // Every element set to value (converted to dtype).
  static Tensor full(const Shape& shape, DType dtype, double value, Allocator* allocator = nullptr);
  template <typename T>
  static Tensor from_vector(const Shape& shape, const std::vector<T>& values, Allocator* allocator = nullptr);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  // Where the storage lives (Device::cpu() for an undefined tensor).
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  bool on_host() const { return !storage_ || storage_->on_host(); }
  int rank() const { return shape_.rank(); }
  int64_t dim(int d) const { return shape_.dim(d); }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  // A handle on the pool this tensor's memory came from (nullptr if undefined), valid while the
  // tensor is. Each storage has its own handle: compare pools with ==, not the pointers.
  Allocator* allocator() const { return storage_ ? storage_->allocator() : nullptr; }

  // Host memory: an Error for a tensor on a GPU (use device_data there, or to_host()).
  void* raw_data() const {
    if (!on_host()) throw_not_on_host();
    return device_raw_data();
  }
  template <typename T>
  T* data() const {
    HSPMD_CHECK(defined()) << "data() of an undefined tensor";
    HSPMD_CHECK(dtype_ == dtype_of<T>()) << "tensor is " << dtype_name(dtype_) << ", accessed as "
                                         << dtype_name(dtype_of<T>());
    return static_cast<T*>(raw_data());
  }
  // The address on the tensor's own device, wherever that is: for kernels of that device.
  void* device_raw_data() const { return static_cast<char*>(storage_->data()) + offset_bytes_; }
  template <typename T>
  T* device_data() const {
    HSPMD_CHECK(defined()) << "device_data() of an undefined tensor";
    HSPMD_CHECK(dtype_ == dtype_of<T>()) << "tensor is " << dtype_name(dtype_) << ", accessed as "
                                         << dtype_name(dtype_of<T>());
    return static_cast<T*>(device_raw_data());
  }

  // View of [start, start + length) along dim; every dim before it must have size 1.
  Tensor narrow(int dim, int64_t start, int64_t length) const;
  // View with the same elements in a new shape; one entry may be -1 (inferred).
  // (Pass shape.dims() to reshape to a Shape.)
  Tensor reshape(const std::vector<int64_t>& dims) const;

  // A copy with its own storage; allocator == nullptr keeps this tensor's allocator (its device).
  // Another allocator's device makes it a host <-> device copy.
  Tensor clone(Allocator* allocator = nullptr) const;
  // This tensor when it is on the host, else a host copy (Allocator::process_default()).
  Tensor to_host() const;
  // Copies src's elements into this tensor; shapes (numel) and dtypes must match. Either may be
  // on a device (the device's backend copies).
  void copy_from(const Tensor& src);
  void fill(double value);

  template <typename T>
  std::vector<T> to_vector() const {
    const T* p = data<T>();
    return std::vector<T>(p, p + numel());
  }
  // Element i (flat index) converted to double, for any dtype; for tests and logging.
  double element_as_double(int64_t i) const;
  bool shares_storage_with(const Tensor& other) const { return storage_ && storage_ == other.storage_; }

  std::string to_string() const;  // "float32[2, 3]"

 private:
  [[noreturn]] void throw_not_on_host() const;

  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::kFloat32;
};

template <typename T>
Tensor Tensor::from_vector(const Shape& shape, const std::vector<T>& values, Allocator* allocator) {
  HSPMD_CHECK(static_cast<int64_t>(values.size()) == shape.numel())
      << values.size() << " values for shape " << shape.to_string();
  Tensor t = empty(shape, dtype_of<T>(), allocator);
  if (values.empty()) return t;
  if (t.on_host()) {
    std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  } else {
    t.copy_from(from_vector(shape, values));
  }
  return t;
}

}  // namespace hspmd
