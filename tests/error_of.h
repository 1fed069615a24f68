// The what() of the hspmd::Error a call throws, for EXPECT_THAT(error_of(...), HasSubstr(...)).
#pragma once

#include <functional>
#include <string>

#include "hspmd/core/error.h"

namespace hspmd::testing {

// "no error" when fn returns normally.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace hspmd::testing
