// bfloat16: the top 16 bits of an IEEE float32. Stored as 16 bits; arithmetic happens in float32.
// Conversion from float32 rounds to nearest, ties to even; NaN stays NaN (quiet).
#pragma once

#include <bit>
#include <cstdint>

namespace hspmd {

struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  explicit BFloat16(float value) : bits(round_from_float(value)) {}
  explicit operator float() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

  static uint16_t round_from_float(float value) {
    uint32_t u = std::bit_cast<uint32_t>(value);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
      return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN, sign kept
    }
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;  // round to nearest, ties to even
    return static_cast<uint16_t>(u >> 16);
  }
  friend bool operator==(BFloat16 a, BFloat16 b) { return a.bits == b.bits; }
};

}  // namespace hspmd
