// Byte-level BPE from a Hugging Face tokenizer.json (GPT-2, Llama 3, Qwen 2 style).
//
//   {"model": {"type": "BPE", "vocab": {"h": 0, "i": 1, "hi": 2, "Ġ": 3},
//              "merges": ["h i"]},                       // or [["h", "i"]] (newer files)
//    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
//    "added_tokens": [{"id": 4, "content": "<|endoftext|>", "special": true}]}
//
//   BpeTokenizer tok = BpeTokenizer::from_file("tokenizer.json");
//   tok.encode("hi hi<|endoftext|>") == {2, 3, 2, 4}   // "hi", "Ġ"+... per the merges, then the added token
//
// Encoding: the text is cut at added tokens (exact match, longest first); each other segment is
// pre-tokenized (byte_level.h), each piece's bytes are mapped to byte-level characters and merged
// pair by pair, lowest merge rank first (all occurrences of the best pair per round), then looked
// up in the vocabulary (unk_token when a piece is missing and the model has one, else an Error).
//
// Supported: model.type "BPE" with vocab + merges (both forms), ignore_merges, unk_token;
// pre_tokenizer ByteLevel (use_regex -> GPT-2 split, add_prefix_space) or a Sequence of a Split whose
// regex is GPT-2's or Llama 3's followed by ByteLevel; normalizer null; added_tokens.
// Not supported (clear Error naming the file and the field): other model types (WordPiece,
// Unigram, WordLevel), normalizers, Metaspace / SentencePiece-style pre-tokenizers (Llama 2),
// other Split patterns, continuing_subword_prefix / end_of_word_suffix. Post-processors (e.g.
// adding <|begin_of_text|>) are not applied: `hspmd data prepare --append-eos` marks document ends.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "hspmd/data/byte_level.h"
#include "hspmd/data/tokenizer.h"

namespace hspmd::data {

class BpeTokenizer final : public Tokenizer {
 public:
  // `source` names the file in errors.
  static BpeTokenizer from_json_text(const std::string& text, const std::string& source);
  static BpeTokenizer from_file(const std::string& path);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  uint32_t vocab_size() const override { return static_cast<uint32_t>(id_to_token_.size()); }
  std::string id() const override { return id_; }
  std::optional<int32_t> bos_id() const override { return bos_; }
  std::optional<int32_t> eos_id() const override { return eos_; }

  // The id of a vocabulary or added token, if present.
  std::optional<int32_t> token_id(const std::string& token) const;

 private:
  BpeTokenizer() = default;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_segment(std::string_view segment, std::vector<int32_t>& out) const;

  std::string source_;
  std::string id_;
  std::unordered_map<std::string, int32_t> vocab_;       // byte-level token string -> id
  std::unordered_map<std::string, int32_t> merge_rank_;  // left + '\0' + right -> rank
  std::vector<std::string> id_to_token_;                 // id -> token string ("" for unused ids)
  std::vector<bool> is_added_;                           // id -> added token (decoded verbatim)
  std::unordered_map<std::string, int32_t> added_;       // content -> id
  // Added tokens by their first byte, longest first, for the longest-match scan in encode().
  std::vector<std::vector<std::pair<std::string, int32_t>>> added_by_first_byte_ =
      std::vector<std::vector<std::pair<std::string, int32_t>>>(256);
  std::optional<int32_t> unk_, bos_, eos_;
  SplitRule split_rule_ = SplitRule::kGpt2;
  bool use_split_ = true;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
};

}  // namespace hspmd::data
