// The Unicode character classes that byte-level BPE pre-tokenizers split on (regex \p{L}, \p{N}),
// from generated range tables (scripts/gen-unicode-classes.py, Unicode 14):
//
//   is_unicode_letter(U'é') && is_unicode_letter(U'語') && !is_unicode_letter(U'😀')
//   is_unicode_number(U'7') && is_unicode_number(U'٣') && is_unicode_number(U'½')
#pragma once

namespace hspmd::data {

bool is_unicode_letter(char32_t code_point);  // general category L*
bool is_unicode_number(char32_t code_point);  // general category N*
const char* unicode_classes_version();        // "14.0.0"

}  // namespace hspmd::data
