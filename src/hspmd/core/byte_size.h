// Byte counts as people write and read them, in binary units, for every layer that prints a size
// (memory estimates, capacities, switch and resolution reports) or reads one (device files):
//
//   format_bytes(100)                        -> "100 B"
//   format_bytes(1.5 * 1024 * 1024 * 1024)   -> "1.50 GiB"
//   parse_bytes("64MiB", "devices[0].memory") -> 67108864
//   parse_bytes("64 MB", "devices[0].memory") -> Error "devices[0].memory: unknown unit "MB" in ..."
#pragma once

#include <cstdint>
#include <string>

namespace hspmd {

// Below 1 KiB the whole count in bytes; above, two decimals in the largest unit (up to TiB) that
// keeps the figure at least 1.
std::string format_bytes(double bytes);

// A positive size: a number, optionally followed by spaces, then B, KiB, MiB or GiB. Error naming
// `where` and the text for anything else (other units, no number, zero, negative, not finite).
int64_t parse_bytes(const std::string& text, const std::string& where);

}  // namespace hspmd
