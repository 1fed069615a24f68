// Filling tensors with reproducible random values (any floating dtype), e.g. test inputs:
//
//   Tensor x = Tensor::empty({7, 13}, DType::kFloat64);
//   fill_uniform(x, /*seed=*/1, -1.0, 1.0);
//
// Element i gets philox_*(seed, stream, offset + i), so a shard that passes its global offset
// reproduces its part of a larger tensor.
#pragma once

#include <cstdint>

#include "hspmd/core/tensor.h"

namespace hspmd {

void fill_uniform(Tensor& t, uint64_t seed, double low, double high, uint64_t stream = 0, uint64_t offset = 0);
void fill_normal(Tensor& t, uint64_t seed, double mean, double stddev, uint64_t stream = 0, uint64_t offset = 0);

}  // namespace hspmd
