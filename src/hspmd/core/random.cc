#include "hspmd/core/random.h"

#include "hspmd/core/philox.h"

namespace hspmd {

namespace {
template <typename Gen>
void fill_with(Tensor& t, Gen gen) {
  HSPMD_CHECK(is_floating(t.dtype())) << "random fill of non-floating tensor " << t.to_string();
  int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kFloat32: {
      float* p = t.data<float>();
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(gen(i));
      break;
    }
    case DType::kFloat64: {
      double* p = t.data<double>();
      for (int64_t i = 0; i < n; ++i) p[i] = gen(i);
      break;
    }
    case DType::kBFloat16: {
      BFloat16* p = t.data<BFloat16>();
      for (int64_t i = 0; i < n; ++i) p[i] = BFloat16(static_cast<float>(gen(i)));
      break;
    }
    default: break;
  }
}
}  // namespace

void fill_uniform(Tensor& t, uint64_t seed, double low, double high, uint64_t stream, uint64_t offset) {
  fill_with(t, [&](int64_t i) { return low + (high - low) * philox_uniform(seed, stream, offset + i); });
}

void fill_normal(Tensor& t, uint64_t seed, double mean, double stddev, uint64_t stream, uint64_t offset) {
  fill_with(t, [&](int64_t i) { return mean + stddev * philox_normal(seed, stream, offset + i); });
}

}  // namespace hspmd
