#include "hspmd/core/tensor.h"

namespace hspmd {

Storage::Storage(size_t bytes, const Allocator& allocator)
    : allocator_(allocator), data_(allocator_.allocate(bytes)), bytes_(bytes) {}

Storage::~Storage() { allocator_.deallocate(data_, bytes_); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Allocator* allocator) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(t.nbytes(), allocator ? *allocator : Allocator::process_default());
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Allocator* allocator) {
  Tensor t = empty(shape, dtype, allocator);
  if (t.nbytes() == 0) return t;
  // All-zero bits is 0 for every dtype.
  if (t.on_host()) {
    std::memset(t.raw_data(), 0, t.nbytes());
  } else {
    t.allocator()->backend().zero(t.device_raw_data(), t.nbytes());
  }
  return t;
}

Tensor Tensor::full(const Shape& shape, DType dtype, double value, Allocator* allocator) {
  Tensor t = empty(shape, dtype, allocator);
  t.fill(value);
  return t;
}

namespace {
template <typename T>
void fill_as(void* data, int64_t n, T value) {
  T* p = static_cast<T*>(data);
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}
}  // namespace

void Tensor::fill(double value) {
  if (!on_host()) {  // filled on the host, then copied: fills are for initialization, not steps
    copy_from(full(shape_, dtype_, value));
    return;
  }
  switch (dtype_) {
    case DType::kFloat32: fill_as(raw_data(), numel(), static_cast<float>(value)); break;
    case DType::kFloat64: fill_as(raw_data(), numel(), value); break;
    case DType::kBFloat16: fill_as(raw_data(), numel(), BFloat16(static_cast<float>(value))); break;
    case DType::kInt32: fill_as(raw_data(), numel(), static_cast<int32_t>(value)); break;
    case DType::kInt64: fill_as(raw_data(), numel(), static_cast<int64_t>(value)); break;
  }
}

Tensor Tensor::narrow(int dim, int64_t start, int64_t length) const {
  HSPMD_CHECK(defined()) << "narrow of an undefined tensor";
  int d = shape_.canonical_dim(dim);
  HSPMD_CHECK(start >= 0 && length >= 0 && start + length <= shape_.dims()[d])
      << "narrow [" << start << ", " << start + length << ") out of range for dim " << d << " of "
      << to_string();
  HSPMD_CHECK(shape_.numel_between(0, d) == 1)
      << "narrow along dim " << d << " of " << to_string()
      << " would not be contiguous (earlier dims must have size 1); use kernels::slice to copy";
  Tensor view = *this;
  view.shape_ = shape_.with_dim(d, length);
  view.offset_bytes_ += static_cast<size_t>(start * shape_.numel_between(d + 1, rank())) * dtype_size(dtype_);
  return view;
}

Tensor Tensor::reshape(const std::vector<int64_t>& dims) const {
  std::vector<int64_t> resolved = dims;
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      HSPMD_CHECK(inferred < 0) << "reshape of " << to_string() << ": more than one -1";
      inferred = static_cast<int>(i);
    } else {
      known *= dims[i];
    }
  }
  if (inferred >= 0) {
    HSPMD_CHECK(known != 0 && numel() % known == 0) << "reshape of " << to_string() << ": cannot infer -1";
    resolved[inferred] = numel() / known;
  }
  Shape shape(resolved);
  HSPMD_CHECK(shape.numel() == numel()) << "reshape of " << to_string() << " to " << shape.to_string()
                                        << " changes the number of elements";
  Tensor view = *this;
  view.shape_ = shape;
  return view;
}

Tensor Tensor::clone(Allocator* allocator) const {
  Tensor t = empty(shape_, dtype_, allocator ? allocator : this->allocator());
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to_host() const {
  if (on_host()) return *this;
  return clone(&Allocator::process_default());
}

void Tensor::copy_from(const Tensor& src) {
  HSPMD_CHECK(src.dtype_ == dtype_ && src.numel() == numel())
      << "copy_from " << src.to_string() << " into " << to_string();
  if (nbytes() == 0) return;
  if (on_host() && src.on_host()) {
    std::memmove(raw_data(), src.raw_data(), nbytes());
    return;
  }
  // The device side's backend knows how to reach its memory (both device-side: this one's).
  MemoryBackend& backend = (on_host() ? src.allocator() : allocator())->backend();
  backend.copy(device_raw_data(), device(), src.device_raw_data(), src.device(), nbytes());
}

void Tensor::throw_not_on_host() const {
  HSPMD_THROW() << "tensor " << to_string() << " lives on " << device().to_string()
                << ": its memory is not host memory (copy it with to_host(), or pass device_data() to a "
                << device().to_string() << " kernel)";
}

double Tensor::element_as_double(int64_t i) const {
  HSPMD_CHECK(i >= 0 && i < numel()) << "element " << i << " out of range for " << to_string();
  switch (dtype_) {
    case DType::kFloat32: return static_cast<const float*>(raw_data())[i];
    case DType::kFloat64: return static_cast<const double*>(raw_data())[i];
    case DType::kBFloat16: return static_cast<float>(static_cast<const BFloat16*>(raw_data())[i]);
    case DType::kInt32: return static_cast<const int32_t*>(raw_data())[i];
    case DType::kInt64: return static_cast<double>(static_cast<const int64_t*>(raw_data())[i]);
  }
  return 0;
}

std::string Tensor::to_string() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype_)) + shape_.to_string();
}

}  // namespace hspmd
