// Tokenizers turn text into token ids and back. Two kinds:
//
//   ByteTokenizer bytes;                       // the default: one token per UTF-8 byte
//   bytes.encode("héllo") == {104, 195, 169, 108, 108, 111};
//   bytes.eos_id() == 257;  bytes.vocab_size() == 260;  bytes.id() == "byte"
//
//   auto tok = load_tokenizer("tokenizer.json");  // Hugging Face byte-level BPE (bpe_tokenizer.h)
//   auto byte = load_tokenizer("");               // ByteTokenizer
//
// Byte-level vocabulary (docs/dataset-format.md): ids 0..255 are the bytes, then four specials:
// <bos> = 256, <eos> = 257, <pad> = 258, <sep> = 259 (vocab_size 260, as in configs/llama-tiny.json).
// A Tokenizer's id() is recorded in every dataset, so a dataset made by one tokenizer is never
// silently trained or evaluated with another's vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hspmd::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // Every id this tokenizer produces is < vocab_size().
  virtual uint32_t vocab_size() const = 0;
  // Short identity (at most 31 characters) stored in datasets: "byte", or "bpe:<hash of the file>".
  virtual std::string id() const = 0;
  // Special tokens, when the vocabulary has them.
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
};

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256, kEos = 257, kPad = 258, kSep = 259;
  static constexpr uint32_t kVocabSize = 260;

  std::vector<int32_t> encode(std::string_view text) const override;
  // Bytes are emitted as they are (so invalid UTF-8 round-trips); specials as "<bos>", "<eos>", ...
  std::string decode(std::span<const int32_t> ids) const override;
  uint32_t vocab_size() const override { return kVocabSize; }
  std::string id() const override { return "byte"; }
  std::optional<int32_t> bos_id() const override { return kBos; }
  std::optional<int32_t> eos_id() const override { return kEos; }
};

// "" -> ByteTokenizer; otherwise a Hugging Face tokenizer.json (Error naming the file when it is
// missing, malformed or of an unsupported kind).
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& tokenizer_json_path);

}  // namespace hspmd::data
