// The two halves of GPT-2-style "byte-level" BPE that are not the merges themselves:
//
// 1. Byte <-> character mapping. Every byte gets a printable Unicode character, so any byte string
//    is a string of "characters" the BPE vocabulary can spell: printable Latin-1 bytes map to
//    themselves, the 68 others (controls, space, 0x7F-0xA0, 0xAD) to U+0100.. in byte order.
//      byte_to_unicode()[' '] == "Ġ" (U+0120);  byte_to_unicode()['a'] == "a"
//
// 2. Pre-tokenization: the regex split applied before BPE, so merges never cross word boundaries.
//    split_pretokens("Hello world's 2024!", SplitRule::kGpt2)
//        == {"Hello", " world", "'s", " 2024", "!"}
//    kGpt2 follows GPT-2's  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//    kLlama3 follows Llama 3's (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//                               ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//    The rules are hand-coded (no regex engine); \p{L} and \p{N} come from unicode_classes.h
//    and \s is Unicode White_Space, so the pieces match the regexes' for any text.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace hspmd::data {

// UTF-8 encoding of the character that stands for each byte.
const std::array<std::string, 256>& byte_to_unicode();
// The byte a character (as a code point) stands for, or -1 when it stands for none.
int unicode_to_byte(char32_t code_point);

// Decodes one UTF-8 character at text[pos]; sets length (>= 1). Invalid sequences decode as the
// single byte with code point 0xFFFFFFFF - byte, which belongs to no class (treated as a symbol).
char32_t decode_utf8(std::string_view text, size_t pos, size_t& length);
void append_utf8(std::string& out, char32_t code_point);

enum class SplitRule { kGpt2, kLlama3 };

// Pieces of text, in order, whose concatenation is text.
std::vector<std::string_view> split_pretokens(std::string_view text, SplitRule rule);

}  // namespace hspmd::data
