#include "hspmd/data/byte_level.h"

#include <cctype>

#include "hspmd/data/unicode_classes.h"

namespace hspmd::data {
namespace {

enum class CharClass { kSpace, kLetter, kNumber, kOther };

bool in(char32_t c, char32_t lo, char32_t hi) { return c >= lo && c <= hi; }

// \s: the White_Space property.
bool is_space(char32_t c) {
  return c == ' ' || in(c, '\t', '\r') || c == 0x85 || c == 0xA0 || c == 0x1680 || in(c, 0x2000, 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

CharClass classify(char32_t c) {
  if (is_space(c)) return CharClass::kSpace;
  if (is_unicode_number(c)) return CharClass::kNumber;
  if (is_unicode_letter(c)) return CharClass::kLetter;
  return CharClass::kOther;
}

struct Char {
  char32_t cp;
  size_t begin;  // byte offset in the text
  CharClass cls;
};

class Splitter {
 public:
  Splitter(std::string_view text, SplitRule rule) : text_(text), rule_(rule) {
    for (size_t pos = 0; pos < text.size();) {
      size_t length = 0;
      char32_t cp = decode_utf8(text, pos, length);
      chars_.push_back({cp, pos, classify(cp)});
      pos += length;
    }
  }

  std::vector<std::string_view> run() {
    std::vector<std::string_view> pieces;
    for (size_t i = 0; i < chars_.size();) {
      size_t end = match(i);
      if (end <= i) end = i + 1;  // unreachable with these rules; keeps the loop finite regardless
      size_t b = chars_[i].begin, e = end < chars_.size() ? chars_[end].begin : text_.size();
      pieces.push_back(text_.substr(b, e - b));
      i = end;
    }
    return pieces;
  }

 private:
  CharClass cls(size_t k) const { return k < chars_.size() ? chars_[k].cls : CharClass::kSpace; }
  bool is(size_t k, CharClass c) const { return k < chars_.size() && chars_[k].cls == c; }
  char32_t cp(size_t k) const { return k < chars_.size() ? chars_[k].cp : 0; }
  bool newline(size_t k) const { return cp(k) == '\r' || cp(k) == '\n'; }
  size_t run_of(size_t k, CharClass c, size_t max = SIZE_MAX) const {
    size_t j = k;
    while (is(j, c) && j - k < max) ++j;
    return j;
  }

  // 's 't 're 've 'm 'll 'd; returns the end or i when none matches.
  size_t contraction(size_t i, bool ignore_case) const {
    if (cp(i) != '\'') return i;
    auto lower = [&](size_t k) {
      char32_t c = cp(k);
      return ignore_case && c < 0x80 ? static_cast<char32_t>(std::tolower(static_cast<int>(c))) : c;
    };
    char32_t a = lower(i + 1), b = lower(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return i;
  }

  // \s+(?!\S) then \s+: a whitespace run, minus its last character when a non-space follows and
  // the run is longer than one (that character then joins the next word, e.g. " world").
  size_t whitespace(size_t i) const {
    size_t j = run_of(i, CharClass::kSpace);
    if (j < chars_.size() && j - i >= 2) return j - 1;
    return j;
  }

  size_t match(size_t i) const {
    if (rule_ == SplitRule::kGpt2) {
      if (size_t e = contraction(i, false); e > i) return e;
      size_t j = (cp(i) == ' ') ? i + 1 : i;  // the optional leading space of the next three rules
      if (is(j, CharClass::kLetter)) return run_of(j, CharClass::kLetter);
      if (is(j, CharClass::kNumber)) return run_of(j, CharClass::kNumber);
      if (is(j, CharClass::kOther)) return run_of(j, CharClass::kOther);
      return whitespace(i);
    }
    if (size_t e = contraction(i, true); e > i) return e;
    if (is(i, CharClass::kLetter)) return run_of(i, CharClass::kLetter);
    if (!newline(i) && cls(i) != CharClass::kNumber && is(i + 1, CharClass::kLetter)) {
      return run_of(i + 1, CharClass::kLetter);
    }
    if (is(i, CharClass::kNumber)) return run_of(i, CharClass::kNumber, 3);
    size_t j = (cp(i) == ' ' && is(i + 1, CharClass::kOther)) ? i + 1 : i;
    if (is(j, CharClass::kOther)) {
      size_t e = run_of(j, CharClass::kOther);
      while (newline(e)) ++e;
      return e;
    }
    // \s*[\r\n]+: the whitespace run up to and including its last newline.
    size_t r = run_of(i, CharClass::kSpace);
    for (size_t k = r; k > i; --k) {
      if (newline(k - 1)) return k;
    }
    return whitespace(i);
  }

  std::string_view text_;
  SplitRule rule_;
  std::vector<Char> chars_;
};

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = in(b, '!', '~') || in(b, 0xA1, 0xAC) || in(b, 0xAE, 0xFF);
      append_utf8(t[b], printable ? static_cast<char32_t>(b) : next++);
    }
    return t;
  }();
  return table;
}

int unicode_to_byte(char32_t code_point) {
  static const std::array<int, 512> table = [] {
    std::array<int, 512> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) {
      size_t length = 0;
      t[decode_utf8(byte_to_unicode()[b], 0, length)] = b;
    }
    return t;
  }();
  return code_point < 512 ? table[code_point] : -1;
}

char32_t decode_utf8(std::string_view text, size_t pos, size_t& length) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char b0 = byte(pos);
  length = 1;
  char32_t invalid = 0xFFFFFFFFu - b0;
  if (b0 < 0x80) return b0;
  size_t n = (b0 & 0xE0) == 0xC0 ? 2 : (b0 & 0xF0) == 0xE0 ? 3 : (b0 & 0xF8) == 0xF0 ? 4 : 0;
  if (n == 0 || pos + n > text.size()) return invalid;
  char32_t cp = b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((byte(pos + k) & 0xC0) != 0x80) return invalid;
    cp = (cp << 6) | (byte(pos + k) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are invalid too.
  static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || in(cp, 0xD800, 0xDFFF) || cp > 0x10FFFF) return invalid;
  length = n;
  return cp;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::vector<std::string_view> split_pretokens(std::string_view text, SplitRule rule) {
  return Splitter(text, rule).run();
}

}  // namespace hspmd::data
