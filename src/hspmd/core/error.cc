#include "hspmd/core/error.h"

#include <cstring>

namespace hspmd::detail {

ErrorMessage::ErrorMessage(const char* file, int line, const char* kind, const char* condition) {
  // Keep the path short: from "src/" on when present.
  const char* shown = std::strstr(file, "src/hspmd/");
  stream_ << (shown ? shown : file) << ":" << line << ": " << kind;
  if (condition != nullptr) stream_ << " (" << condition << ")";
  stream_ << ": ";
}

void ThrowError::operator=(const ErrorMessage& message) const { throw Error(message.str()); }

}  // namespace hspmd::detail
