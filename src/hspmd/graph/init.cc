#include "hspmd/graph/init.h"

#include <sstream>

#include "hspmd/core/philox.h"
#include "hspmd/core/random.h"

namespace hspmd::graph {

std::string InitSpec::to_string() const {
  switch (kind) {
    case Kind::kZeros: return "zeros";
    case Kind::kOnes: return "ones";
    case Kind::kNormal: {
      std::ostringstream out;
      out << "normal(" << std << ")";
      return out.str();
    }
  }
  return "?";
}

Tensor init_tensor(const std::string& name, const Shape& shape, DType dtype, const InitSpec& spec, uint64_t seed,
                   uint64_t offset, Allocator* allocator) {
  HSPMD_CHECK(is_floating(dtype)) << "parameter '" << name << "': initializers need a floating dtype, got "
                                  << dtype_name(dtype);
  switch (spec.kind) {
    case InitSpec::Kind::kZeros: return Tensor::zeros(shape, dtype, allocator);
    case InitSpec::Kind::kOnes: return Tensor::full(shape, dtype, 1.0, allocator);
    case InitSpec::Kind::kNormal: {
      HSPMD_CHECK(spec.std >= 0) << "parameter '" << name << "': normal std must be >= 0, got " << spec.std;
      Tensor t = Tensor::empty(shape, dtype, allocator);
      // The stream is the name's hash: parameters get independent values under one seed.
      fill_normal(t, seed, 0.0, spec.std, stable_hash(name.data(), name.size()), offset);
      return t;
    }
  }
  HSPMD_THROW() << "parameter '" << name << "': unknown initializer";
}

}  // namespace hspmd::graph
