// Token datasets on disk: a directory with tokens.bin (the token ids of every document, back to
// back) and index.bin (a header + the offset of each document). docs/dataset-format.md is the
// byte-level specification; TokenDatasetWriter and TokenDataset are its only writer and reader.
//
//   TokenDatasetWriter w("data/kjv", {.vocab_size = 260, .tokenizer_id = "byte"});
//   w.add_document(tokens_of_doc0);         // ids in [0, vocab_size)
//   w.finish();                              // both files appear atomically
//
//   TokenDataset ds = TokenDataset::open("data/kjv");   // mmap, header and offsets validated
//   ds.num_documents(); ds.vocab_size(); ds.tokenizer_id();
//   std::vector<int32_t> doc = ds.document(7);           // or ds.read(7, begin, length, out)
//
// Token width: uint16 when vocab_size <= 65536 (byte-level 260, GPT-2 50257: half the disk and page
// cache), uint32 above (Llama 3: 128256). The header records which, so readers never guess.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace hspmd::data {

struct DatasetHeader {
  uint32_t version = 1;
  uint32_t token_bytes = 2;  // 2 (uint16) or 4 (uint32), little-endian
  uint32_t vocab_size = 0;   // every token id is < vocab_size
  uint64_t num_documents = 0;
  uint64_t num_tokens = 0;
  std::string tokenizer_id;  // at most 31 ASCII characters, e.g. "byte" or "bpe:1f3a...": see Tokenizer::id()
};

inline constexpr const char* kTokensFile = "tokens.bin";
inline constexpr const char* kIndexFile = "index.bin";
// The held-out validation split of a dataset (`hspmd data prepare --val-fraction`) is a dataset of
// its own in this subdirectory: same vocabulary and tokenizer, disjoint documents.
inline constexpr const char* kValidationDir = "val";

class TokenDatasetWriter {
 public:
  struct Options {
    uint32_t vocab_size = 0;   // required
    std::string tokenizer_id;  // required; recorded so a dataset/tokenizer mismatch can be detected
  };
  // Creates `dir` if needed. Files are written under temp names and renamed by finish().
  TokenDatasetWriter(std::string dir, Options options);
  ~TokenDatasetWriter();
  TokenDatasetWriter(const TokenDatasetWriter&) = delete;
  TokenDatasetWriter& operator=(const TokenDatasetWriter&) = delete;

  // Appends one document; Error when an id is outside [0, vocab_size) (naming the document, the
  // position and the id). Empty documents are allowed (they hold no tokens and are never batched).
  void add_document(std::span<const int32_t> tokens);
  uint64_t num_documents() const { return offsets_.size() - 1; }
  uint64_t num_tokens() const { return offsets_.back(); }
  // Writes index.bin and renames both files into place. Without it, nothing appears.
  void finish();

 private:
  struct Files;
  std::string dir_;
  Options options_;
  uint32_t token_bytes_;
  std::vector<uint64_t> offsets_{0};
  std::vector<char> buffer_;  // encoded tokens awaiting a write
  std::unique_ptr<Files> files_;  // the two AtomicFiles (kept out of this header)
};

class TokenDataset {
 public:
  // Maps both files and validates them; every Error names the file at fault.
  static TokenDataset open(const std::string& dir);
  // Whether the dataset in `dir` has a validation split (dir/val/index.bin exists).
  static bool has_validation(const std::string& dir);
  // Opens the validation split of the dataset in `dir`; Error when there is none (saying how to make
  // one) or when its vocabulary or tokenizer differ from the training split's.
  static TokenDataset open_validation(const std::string& dir);
  TokenDataset(TokenDataset&&) noexcept;
  TokenDataset& operator=(TokenDataset&&) noexcept;
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;
  ~TokenDataset();

  const std::string& dir() const { return dir_; }
  const DatasetHeader& header() const { return header_; }
  uint64_t num_documents() const { return header_.num_documents; }
  uint64_t num_tokens() const { return header_.num_tokens; }
  uint32_t vocab_size() const { return header_.vocab_size; }
  const std::string& tokenizer_id() const { return header_.tokenizer_id; }

  uint64_t document_begin(uint64_t doc) const;  // offset of its first token in tokens.bin
  uint64_t document_length(uint64_t doc) const;
  // Tokens [begin, begin + length) of document doc, appended to out.
  void read(uint64_t doc, uint64_t begin, uint64_t length, std::vector<int32_t>& out) const;
  std::vector<int32_t> document(uint64_t doc) const;
  // The first token id >= limit, in document order, with where it is; nullopt when every id is
  // below limit. Reads the whole dataset: for a run whose model has a smaller vocabulary than the
  // one the dataset was prepared for.
  struct TokenPosition {
    uint64_t doc = 0, position = 0;
    int32_t id = 0;
  };
  std::optional<TokenPosition> first_token_at_least(uint32_t limit) const;

 private:
  TokenDataset() = default;
  void unmap();

  std::string dir_;
  DatasetHeader header_;
  const uint64_t* offsets_ = nullptr;     // [num_documents + 1], inside the index mapping
  const unsigned char* tokens_ = nullptr;  // inside the tokens mapping
  void* index_map_ = nullptr;
  size_t index_map_bytes_ = 0;
  void* tokens_map_ = nullptr;
  size_t tokens_map_bytes_ = 0;
};

}  // namespace hspmd::data
