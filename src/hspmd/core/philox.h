// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11). A value is a pure function of
// (key, counter), so any shard of a tensor can generate exactly its slice of the same global random
// tensor without materializing the rest (architecture §9):
//
//   float w = philox_normal(seed, stream, global_index);   // same on every rank and strategy
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace hspmd {

// One Philox4x32-10 block: four independent uniform 32-bit words.
std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo);

// Uniform in [0, 1) and standard normal (Box-Muller) values for element `index` of stream `stream`.
double philox_uniform(uint64_t seed, uint64_t stream, uint64_t index);
double philox_normal(uint64_t seed, uint64_t stream, uint64_t index);

// A stable 64-bit hash of a string (FNV-1a), to derive a stream id from a tensor name.
uint64_t stable_hash(const char* text, size_t length);

}  // namespace hspmd
