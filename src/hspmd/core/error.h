// Errors: one exception type, three ways to raise it.
//
//   HSPMD_CHECK(n % tp == 0) << "hidden size " << n << " is not divisible by TP degree " << tp;
//     -> user/config errors; what() is the message alone, written for the person who made the
//        input (what is wrong, and where: file and key).
//   HSPMD_ASSERT(offset <= size) << "offset " << offset;
//     -> internal invariants (a bug in hspmd, not in the input); what() keeps the source location
//        and the condition, since a bug report needs them.
//   HSPMD_THROW() << "unknown dtype '" << text << "'";
//     -> unconditional error, shown like a failed check.
//
// Every Error also carries origin(): the source location, kind and condition that raised it, which
// the CLI prints only with --verbose (or HSPMD_VERBOSE=1). Library code never exits; the CLI
// catches every exception and prints one line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace hspmd {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, std::string origin = {})
      : std::runtime_error(what), origin_(std::move(origin)) {}
  // "src/hspmd/x.cc:79: check failed (cond)", or empty when raised without a macro; raised while
  // handling another Error, ", from <its origin>" follows.
  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
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
  // The exception's what(): the message alone, but the origin in front for internal errors and
  // in place of an empty message.
  std::string what() const;
  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
  bool internal_;
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
