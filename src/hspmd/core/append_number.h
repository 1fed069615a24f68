// Integers appended to a text in place (std::to_chars), for the texts that hold millions of
// numbers: `hspmd explain` of thousands of ranks writes every rank's ops, each with its peers,
// regions and bytes, and a temporary std::string per number was a large part of writing it.
//
//   std::string out = "bytes=";
//   append_number(out, 4096);   // "bytes=4096"
#pragma once

#include <charconv>
#include <cstdint>
#include <string>

namespace hspmd {

inline void append_number(std::string& out, int64_t value) {
  char digits[24];  // a sign and 19 digits
  out.append(digits, std::to_chars(digits, digits + sizeof digits, value).ptr);
}

}  // namespace hspmd
