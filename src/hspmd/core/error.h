// Errors: one exception type, two ways to raise it.
//
//   HSPMD_CHECK(n % tp == 0) << "hidden size " << n << " is not divisible by TP degree " << tp;
//     -> user/config errors; the message names file:line, the failed condition and the context.
//   HSPMD_ASSERT(offset <= size) << "offset " << offset;
//     -> internal invariants (a bug in hspmd, not in the input).
//   HSPMD_THROW() << "unknown dtype '" << text << "'";
//     -> unconditional error.
//
// Library code never exits; the CLI catches Error and prints what() as one line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace hspmd {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Thrown when an allocation would exceed an allocator's capacity.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

namespace detail {

// Collects the message of a failed check; ThrowError turns it into an exception.
class ErrorMessage {
 public:
  ErrorMessage(const char* file, int line, const char* kind, const char* condition);
  template <typename T>
  ErrorMessage& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }
  std::string str() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
};

// `ThrowError() = message << ...`: assignment binds after every <<, so the whole message is built
// before the throw.
struct ThrowError {
  [[noreturn]] void operator=(const ErrorMessage& message) const;
};

}  // namespace detail
}  // namespace hspmd

#define HSPMD_CHECK(cond)                                         \
  if (cond) {                                                     \
  } else                                                          \
    ::hspmd::detail::ThrowError() =                               \
        ::hspmd::detail::ErrorMessage(__FILE__, __LINE__, "check failed", #cond)

#define HSPMD_ASSERT(cond)                                        \
  if (cond) {                                                     \
  } else                                                          \
    ::hspmd::detail::ThrowError() =                               \
        ::hspmd::detail::ErrorMessage(__FILE__, __LINE__, "internal error", #cond)

#define HSPMD_THROW() \
  ::hspmd::detail::ThrowError() = ::hspmd::detail::ErrorMessage(__FILE__, __LINE__, "error", nullptr)
