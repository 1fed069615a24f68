// Shared by the fuzz targets: the one outcome a parser may have on bad input besides success is a
// clean hspmd::Error. Anything else (a crash, a sanitizer report, another exception type, a hang)
// is a finding; libFuzzer reports an escaping exception as a crash (std::terminate -> abort).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "hspmd/core/error.h"

namespace hspmd::fuzz {

inline std::string as_text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Runs parse(); an hspmd::Error is the expected way to refuse bad input.
template <typename Parse>
void expect_clean(Parse&& parse) {
  try {
    parse();
  } catch (const hspmd::Error&) {
  }
}

}  // namespace hspmd::fuzz
