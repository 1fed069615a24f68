#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/data_testlib.h"
#include "hspmd/core/error.h"
#include "hspmd/data/bpe_tokenizer.h"
#include "hspmd/data/byte_level.h"
#include "hspmd/data/tokenizer.h"
#include "hspmd/data/unicode_classes.h"

namespace hspmd::data {
namespace {

using nlohmann::json;
using testing::error_of;
using Pieces = std::vector<std::string_view>;

TEST(ByteTokenizer, RoundTripsUtf8AndNamesSpecials) {
  ByteTokenizer tok;
  std::string text = "héllo, 世界 😀\n\ttab";
  std::vector<int32_t> ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());  // one id per byte
  EXPECT_EQ(ids[1], 0xC3);             // first byte of "é"
  EXPECT_EQ(tok.decode(ids), text);
  std::string invalid = "\xff\xfe";
  EXPECT_EQ(tok.decode(tok.encode(invalid)), invalid);
  std::vector<int32_t> special = {ByteTokenizer::kBos, 'h', 'i', ByteTokenizer::kEos};
  EXPECT_EQ(tok.decode(special), "<bos>hi<eos>");
  EXPECT_EQ(tok.vocab_size(), 260u);
  EXPECT_EQ(tok.id(), "byte");
  EXPECT_THROW(tok.decode(std::vector<int32_t>{260}), Error);
  EXPECT_EQ(load_tokenizer("")->id(), "byte");
}

TEST(ByteLevel, MapsEveryByteToADistinctPrintableCharacter) {
  const auto& table = byte_to_unicode();
  EXPECT_EQ(table[' '], "Ġ");  // U+0120
  EXPECT_EQ(table['a'], "a");
  EXPECT_EQ(table['\n'], "Ċ");  // U+010A
  for (int b = 0; b < 256; ++b) {
    size_t length = 0;
    EXPECT_EQ(unicode_to_byte(decode_utf8(table[b], 0, length)), b) << b;
  }
}

TEST(ByteLevel, UnicodeLetterAndNumberClasses) {
  for (char32_t c : {U'a', U'Z', U'é', U'ß', U'Ж', U'語', U'ª', U'µ'}) EXPECT_TRUE(is_unicode_letter(c)) << static_cast<uint32_t>(c);
  for (char32_t c : {U'1', U'٣', U'½', U'²', U'Ⅻ'}) EXPECT_TRUE(is_unicode_number(c)) << static_cast<uint32_t>(c);
  for (char32_t c : {U' ', U'!', U'—', U'😀', U'\u0301', U'×'}) {
    EXPECT_FALSE(is_unicode_letter(c) || is_unicode_number(c)) << static_cast<uint32_t>(c);
  }
}

TEST(ByteLevel, Gpt2SplitMatchesTheRegex) {
  EXPECT_EQ(split_pretokens("Hello world's 2024!", SplitRule::kGpt2),
            (Pieces{"Hello", " world", "'s", " 2024", "!"}));
  EXPECT_EQ(split_pretokens("a   b  ", SplitRule::kGpt2), (Pieces{"a", "  ", " b", "  "}));
  EXPECT_EQ(split_pretokens("DON'T", SplitRule::kGpt2), (Pieces{"DON", "'", "T"}));  // case-sensitive
  EXPECT_EQ(split_pretokens("héllo wörld 日本語 hi😀", SplitRule::kGpt2),
            (Pieces{"héllo", " wörld", " 日本語", " hi", "😀"}));
  // A combining accent (U+0301) is a mark, not a letter: it splits off, as in the regex.
  EXPECT_EQ(split_pretokens("cafe\u0301 ٣٤ x", SplitRule::kGpt2), (Pieces{"cafe", "\u0301", " ٣٤", " x"}));
}

TEST(ByteLevel, Llama3SplitMatchesTheRegex) {
  EXPECT_EQ(split_pretokens("I'm HAPPY 12345 (hi)\n\n  x", SplitRule::kLlama3),
            (Pieces{"I", "'m", " HAPPY", " ", "123", "45", " (", "hi", ")\n\n", " ", " x"}));
  EXPECT_EQ(split_pretokens("DON'T", SplitRule::kLlama3), (Pieces{"DON", "'T"}));  // case-insensitive
  EXPECT_EQ(split_pretokens("a\n\n b", SplitRule::kLlama3), (Pieces{"a", "\n\n", " b"}));
}

// A tokenizer.json small enough to follow by hand (GPT-2 layout).
json tiny_tokenizer(bool pair_merges) {
  json vocab = {{"h", 0},  {"e", 1},  {"l", 2},    {"o", 3},     {"w", 4},       {"r", 5},  {"d", 6},   {"Ġ", 7},
                {"he", 8}, {"ll", 9}, {"hell", 10}, {"hello", 11}, {"Ġhello", 12}, {"or", 13}, {"wor", 14}, {"!", 15}};
  std::vector<std::pair<std::string, std::string>> merges = {{"h", "e"},     {"l", "l"}, {"he", "ll"}, {"hell", "o"},
                                                             {"Ġ", "hello"}, {"o", "r"}, {"w", "or"}};
  json merge_list = json::array();
  for (const auto& [a, b] : merges) merge_list.push_back(pair_merges ? json::array({a, b}) : json(a + " " + b));
  return {{"version", "1.0"},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"added_tokens", {{{"id", 16}, {"content", "<|endoftext|>"}, {"special", true}}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
}

TEST(BpeTokenizer, EncodesAKnownStringWithEitherMergeForm) {
  const std::string text = "hello hello world!<|endoftext|>";
  const std::vector<int32_t> expected = {11, 12, 7, 14, 2, 6, 15, 16};  // hello Ġhello Ġ wor l d ! <|endoftext|>
  for (bool pairs : {false, true}) {
    BpeTokenizer tok = BpeTokenizer::from_json_text(tiny_tokenizer(pairs).dump(), "tiny.json");
    EXPECT_EQ(tok.encode(text), expected) << "pair merges: " << pairs;
    EXPECT_EQ(tok.decode(expected), text);
    EXPECT_EQ(tok.vocab_size(), 17u);
    EXPECT_EQ(tok.eos_id(), 16);
    EXPECT_EQ(tok.bos_id(), 16);  // GPT-2 uses <|endoftext|> for both
    EXPECT_EQ(tok.id().substr(0, 4), "bpe:");
  }
  // The id is a hash of the file: another vocabulary gets another id.
  json other = tiny_tokenizer(false);
  other["model"]["vocab"]["x"] = 17;
  EXPECT_NE(BpeTokenizer::from_json_text(other.dump(), "o").id(), BpeTokenizer::from_json_text(tiny_tokenizer(false).dump(), "t").id());
}

TEST(BpeTokenizer, PrefixSpaceUnknownTokenAndIgnoreMerges) {
  json j = tiny_tokenizer(false);
  j["pre_tokenizer"]["add_prefix_space"] = true;
  EXPECT_EQ(BpeTokenizer::from_json_text(j.dump(), "t").encode("hello"), (std::vector<int32_t>{12}));

  // "é" is bytes C3 A9 -> characters "Ã" "©": not in the vocabulary.
  std::string error = error_of([&] { BpeTokenizer::from_json_text(tiny_tokenizer(false).dump(), "tiny.json").encode("hé"); });
  EXPECT_NE(error.find("tiny.json"), std::string::npos) << error;
  EXPECT_NE(error.find("not in the vocabulary"), std::string::npos) << error;
  j = tiny_tokenizer(false);
  j["model"]["vocab"]["<unk>"] = 17;
  j["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(BpeTokenizer::from_json_text(j.dump(), "t").encode("hé"), (std::vector<int32_t>{0, 17, 17}));

  // ignore_merges: a piece that is itself in the vocabulary is taken whole (Llama 3).
  j = tiny_tokenizer(false);
  j["model"]["vocab"]["dd"] = 17;
  EXPECT_EQ(BpeTokenizer::from_json_text(j.dump(), "t").encode("dd"), (std::vector<int32_t>{6, 6}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(BpeTokenizer::from_json_text(j.dump(), "t").encode("dd"), (std::vector<int32_t>{17}));
}

TEST(BpeTokenizer, Llama3StyleSequencePreTokenizer) {
  json j = tiny_tokenizer(false);
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  BpeTokenizer tok = BpeTokenizer::from_json_text(j.dump(), "llama3.json");
  EXPECT_EQ(tok.encode("hello world!"), (std::vector<int32_t>{11, 7, 14, 2, 6, 15}));
}

TEST(BpeTokenizer, UnsupportedKindsFailNamingFileAndField) {
  auto error_for = [](json j) { return error_of([&] { BpeTokenizer::from_json_text(j.dump(), "my/tokenizer.json"); }); };
  json j = tiny_tokenizer(false);
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(error_for(j).find("my/tokenizer.json: model type \"WordPiece\" is not supported"), std::string::npos);
  j = tiny_tokenizer(false);
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_NE(error_for(j).find("normalizer \"NFC\" is not supported"), std::string::npos);
  j = tiny_tokenizer(false);
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
  EXPECT_NE(error_for(j).find("pre_tokenizer \"Metaspace\" is not supported"), std::string::npos);
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "\\d+"}}}}, {{"type", "ByteLevel"}}}}};
  EXPECT_NE(error_for(j).find("Split pattern \"\\\\d+\" is not supported"), std::string::npos) << error_for(j);
  j = tiny_tokenizer(false);
  j["model"]["merges"][0] = "h e x";
  EXPECT_NE(error_for(j).find("merge 0 \"h e x\""), std::string::npos);
  j = tiny_tokenizer(false);
  j["model"].erase("vocab");
  EXPECT_NE(error_for(j).find("model.vocab missing"), std::string::npos);
  EXPECT_NE(error_of([] { BpeTokenizer::from_json_text("{not json", "bad.json"); }).find("bad.json: not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([] { load_tokenizer("/nonexistent/tokenizer.json"); }).find("cannot open tokenizer"),
            std::string::npos);
}

TEST(BpeTokenizer, KeyOfTheWrongJsonTypeIsAnErrorNamingTheFile) {
  // Found by the fuzzer: model.type an object made nlohmann's type_error escape.
  nlohmann::json j = tiny_tokenizer(false);
  j["model"]["type"] = nlohmann::json::object();
  try {
    BpeTokenizer::from_json_text(j.dump(), "odd.json");
    FAIL() << "accepted model.type {}";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("odd.json: unexpected JSON"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hspmd::data
