#include "hspmd/core/error.h"

#include <cstring>
#include <exception>

namespace hspmd::detail {

ErrorMessage::ErrorMessage(const char* file, int line, const char* kind, const char* condition)
    : internal_(std::strcmp(kind, "internal error") == 0) {
  // Keep the path short: from "src/" on when present.
  const char* shown = std::strstr(file, "src/hspmd/");
  std::ostringstream origin;
  origin << (shown ? shown : file) << ":" << line << ": " << kind;
  if (condition != nullptr) origin << " (" << condition << ")";
  origin_ = origin.str();
}

std::string ErrorMessage::what() const {
  std::string message = stream_.str();
  if (internal_ || message.empty()) return message.empty() ? origin_ : origin_ + ": " + message;
  return message;
}

void ThrowError::operator=(const ErrorMessage& message) const {
  // Raised while handling another Error (the usual `catch (const Error& e) { HSPMD_THROW() << where
  // << e.what(); }` that adds the file name): keep where that one came from too.
  std::string origin = message.origin();
  if (std::exception_ptr current = std::current_exception()) {
    try {
      std::rethrow_exception(current);
    } catch (const Error& inner) {
      if (!inner.origin().empty()) origin += ", from " + inner.origin();
    } catch (...) {
    }
  }
  throw Error(message.what(), origin);
}

}  // namespace hspmd::detail
