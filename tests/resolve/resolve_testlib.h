// Test helpers for resolution: a host-array simulator that executes a Resolution's per-device ops
// and checks that the source shards became exactly the destination shards, and a random
// annotation generator for property tests.
#pragma once

#include <random>
#include <string>

#include "hspmd/core/shape.h"
#include "hspmd/resolve/resolver.h"
#include "hspmd/sharding/annotation.h"

namespace hspmd::resolve::testing {

// Builds integer source shards of a known global tensor (Partial shards hold random summands
// that add up to it), runs every step's ops on host arrays, and checks that each destination
// element is written exactly once, that matching Send/Recv and collective ops agree, and that
// the destination shards hold exactly the tensor (or summands adding up to it).
// Returns "" on success, else a description of the first problem.
std::string simulate(const Resolution& res, const sharding::Annotation& src, const sharding::Annotation& dst,
                     const Shape& shape);

// A random annotation over devices 0..max_devices-1 for a tensor of `shape` (every dim a multiple
// of 24, so any hsize <= 3 and degree <= 4 divides it).
sharding::DistState random_ds(std::mt19937& rng, int devices, int rank, bool allow_partial);
sharding::Annotation random_annotation(std::mt19937& rng, int max_devices, int rank, bool allow_partial);

}  // namespace hspmd::resolve::testing
