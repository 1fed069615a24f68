// A tiny cursor over the canonical text forms of DeviceGroup, DistState and Annotation, so the
// three parsers share one way of reading tokens and one error format:
//   "cannot parse annotation 'dup{[0-3](S0:4' at offset 15: expected '}'"
#pragma once

#include <string>
#include <string_view>

namespace hspmd::sharding::detail {

class TextCursor {
 public:
  TextCursor(std::string_view text, const char* what) : text_(text), what_(what) {}

  void skip_spaces();
  bool at_end();
  // True (and consumes it) when the next non-space character is c.
  bool accept(char c);
  // True (and consumes it) when the text continues with word.
  bool accept_word(std::string_view word);
  void expect(char c);
  long long integer();  // optionally signed decimal integer
  void expect_end();
  [[noreturn]] void fail(const std::string& expected) const;

 private:
  std::string_view text_;
  size_t pos_ = 0;
  const char* what_;
};

}  // namespace hspmd::sharding::detail
