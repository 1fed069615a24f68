#include "hspmd/sharding/text_cursor.h"

#include <cctype>

#include "hspmd/core/error.h"

namespace hspmd::sharding::detail {

void TextCursor::skip_spaces() {
  while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
}

bool TextCursor::at_end() {
  skip_spaces();
  return pos_ == text_.size();
}

bool TextCursor::accept(char c) {
  skip_spaces();
  if (pos_ < text_.size() && text_[pos_] == c) {
    ++pos_;
    return true;
  }
  return false;
}

bool TextCursor::accept_word(std::string_view word) {
  skip_spaces();
  if (text_.substr(pos_, word.size()) == word) {
    pos_ += word.size();
    return true;
  }
  return false;
}

void TextCursor::expect(char c) {
  if (!accept(c)) fail(std::string("'") + c + "'");
}

long long TextCursor::integer() {
  skip_spaces();
  size_t start = pos_;
  if (pos_ < text_.size() && (text_[pos_] == '-' || text_[pos_] == '+')) ++pos_;
  size_t digits = pos_;
  while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  if (pos_ == digits || pos_ - digits > 12) {
    pos_ = start;
    fail("an integer");
  }
  return std::stoll(std::string(text_.substr(start, pos_ - start)));
}

void TextCursor::expect_end() {
  if (!at_end()) fail("end of text");
}

void TextCursor::fail(const std::string& expected) const {
  HSPMD_THROW() << "cannot parse " << what_ << " '" << text_ << "' at offset " << pos_ << ": expected "
                << expected;
}

}  // namespace hspmd::sharding::detail
