#include "hspmd/data/token_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "hspmd/core/atomic_file.h"
#include "hspmd/core/error.h"

namespace hspmd::data {
namespace {

static_assert(std::endian::native == std::endian::little, "the dataset format is little-endian");

constexpr char kTokensMagic[8] = {'H', 'S', 'P', 'M', 'D', 'T', 'O', 'K'};
constexpr char kIndexMagic[8] = {'H', 'S', 'P', 'M', 'D', 'I', 'D', 'X'};
constexpr uint32_t kVersion = 1;
constexpr size_t kTokensHeaderBytes = 16;
constexpr size_t kIndexHeaderBytes = 72;
constexpr size_t kTokenizerIdBytes = 32;  // NUL-padded, so at most 31 characters
constexpr size_t kFlushBytes = 1 << 20;

// The fixed part of index.bin, exactly as on disk (docs/dataset-format.md).
struct IndexHeader {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;
  uint32_t vocab_size;
  uint32_t reserved;
  uint64_t num_documents;
  uint64_t num_tokens;
  char tokenizer_id[kTokenizerIdBytes];
};
static_assert(sizeof(IndexHeader) == kIndexHeaderBytes);

struct TokensHeader {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;
};
static_assert(sizeof(TokensHeader) == kTokensHeaderBytes);

uint32_t token_bytes_for(uint32_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

std::string join(const std::string& dir, const char* file) { return (std::filesystem::path(dir) / file).string(); }

// Maps a whole file read-only; returns its size.
void* map_file(const std::string& path, size_t& bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HSPMD_CHECK(fd >= 0) << "cannot open " << path << ": " << std::strerror(errno)
                       << " (is this a dataset directory made by `hspmd data prepare`?)";
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    HSPMD_THROW() << "cannot stat " << path << ": " << std::strerror(err);
  }
  bytes = static_cast<size_t>(st.st_size);
  void* p = bytes == 0 ? nullptr : ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  HSPMD_CHECK(p != MAP_FAILED) << "cannot mmap " << path << ": " << std::strerror(err);
  return p;
}

}  // namespace

struct TokenDatasetWriter::Files {
  explicit Files(const std::string& tokens_path) : tokens(tokens_path) {}
  AtomicFile tokens;
  std::unique_ptr<AtomicFile> index;  // created by finish()
};

TokenDatasetWriter::TokenDatasetWriter(std::string dir, Options options)
    : dir_(std::move(dir)), options_(std::move(options)), token_bytes_(token_bytes_for(options_.vocab_size)) {
  HSPMD_CHECK(options_.vocab_size > 0) << "dataset " << dir_ << ": vocab_size must be positive";
  HSPMD_CHECK(!options_.tokenizer_id.empty() && options_.tokenizer_id.size() < kTokenizerIdBytes)
      << "dataset " << dir_ << ": tokenizer id \"" << options_.tokenizer_id << "\" must have 1 to "
      << kTokenizerIdBytes - 1 << " characters";
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  HSPMD_CHECK(!ec) << "cannot create dataset directory " << dir_ << ": " << ec.message();
  files_ = std::make_unique<Files>(join(dir_, kTokensFile));
  TokensHeader header{};
  std::memcpy(header.magic, kTokensMagic, 8);
  header.version = kVersion;
  header.token_bytes = token_bytes_;
  files_->tokens.write(&header, sizeof(header));
}

TokenDatasetWriter::~TokenDatasetWriter() = default;

void TokenDatasetWriter::add_document(std::span<const int32_t> tokens) {
  HSPMD_CHECK(files_ && !files_->index) << "dataset " << dir_ << ": add_document after finish";
  for (size_t i = 0; i < tokens.size(); ++i) {
    int32_t id = tokens[i];
    HSPMD_CHECK(id >= 0 && static_cast<uint32_t>(id) < options_.vocab_size)
        << "dataset " << dir_ << ": document " << num_documents() << ", token " << i << ": id " << id
        << " is outside the vocabulary [0, " << options_.vocab_size << ")";
    if (token_bytes_ == 2) {
      uint16_t v = static_cast<uint16_t>(id);
      buffer_.insert(buffer_.end(), reinterpret_cast<char*>(&v), reinterpret_cast<char*>(&v) + 2);
    } else {
      uint32_t v = static_cast<uint32_t>(id);
      buffer_.insert(buffer_.end(), reinterpret_cast<char*>(&v), reinterpret_cast<char*>(&v) + 4);
    }
  }
  offsets_.push_back(offsets_.back() + tokens.size());
  if (buffer_.size() >= kFlushBytes) {
    files_->tokens.write(buffer_.data(), buffer_.size());
    buffer_.clear();
  }
}

void TokenDatasetWriter::finish() {
  HSPMD_CHECK(files_ && !files_->index) << "dataset " << dir_ << ": finish called twice";
  files_->tokens.write(buffer_.data(), buffer_.size());
  buffer_.clear();
  IndexHeader header{};
  std::memcpy(header.magic, kIndexMagic, 8);
  header.version = kVersion;
  header.token_bytes = token_bytes_;
  header.vocab_size = options_.vocab_size;
  header.num_documents = num_documents();
  header.num_tokens = num_tokens();
  std::memcpy(header.tokenizer_id, options_.tokenizer_id.data(), options_.tokenizer_id.size());
  files_->index = std::make_unique<AtomicFile>(join(dir_, kIndexFile));
  files_->index->write(&header, sizeof(header));
  files_->index->write(offsets_.data(), offsets_.size() * sizeof(uint64_t));
  // tokens.bin first: a reader racing with a re-prepare sees a size mismatch, never silent garbage.
  files_->tokens.commit();
  files_->index->commit();
}

TokenDataset TokenDataset::open(const std::string& dir) {
  TokenDataset ds;
  ds.dir_ = dir;
  std::string index_path = join(dir, kIndexFile), tokens_path = join(dir, kTokensFile);
  ds.index_map_ = map_file(index_path, ds.index_map_bytes_);
  HSPMD_CHECK(ds.index_map_bytes_ >= kIndexHeaderBytes)
      << index_path << ": truncated (" << ds.index_map_bytes_ << " bytes, header needs " << kIndexHeaderBytes << ")";
  IndexHeader h;
  std::memcpy(&h, ds.index_map_, sizeof(h));
  HSPMD_CHECK(std::memcmp(h.magic, kIndexMagic, 8) == 0) << index_path << ": not an hspmd dataset index (bad magic)";
  HSPMD_CHECK(h.version == kVersion) << index_path << ": format version " << h.version << ", this build reads "
                                     << kVersion;
  HSPMD_CHECK(h.token_bytes == token_bytes_for(h.vocab_size) && h.vocab_size > 0)
      << index_path << ": token width " << h.token_bytes << " bytes does not fit vocab_size " << h.vocab_size;
  HSPMD_CHECK(h.tokenizer_id[kTokenizerIdBytes - 1] == '\0') << index_path << ": tokenizer id is not terminated";
  ds.header_ = DatasetHeader{h.version, h.token_bytes, h.vocab_size, h.num_documents, h.num_tokens,
                             std::string(h.tokenizer_id)};
  uint64_t expected_index = kIndexHeaderBytes + (h.num_documents + 1) * sizeof(uint64_t);
  HSPMD_CHECK(h.num_documents < (1ull << 40) && ds.index_map_bytes_ == expected_index)
      << index_path << ": " << ds.index_map_bytes_ << " bytes, expected " << expected_index << " for "
      << h.num_documents << " documents (truncated or corrupted)";
  ds.offsets_ = reinterpret_cast<const uint64_t*>(static_cast<const char*>(ds.index_map_) + kIndexHeaderBytes);
  HSPMD_CHECK(ds.offsets_[0] == 0 && ds.offsets_[h.num_documents] == h.num_tokens)
      << index_path << ": offsets must run from 0 to num_tokens " << h.num_tokens;
  for (uint64_t d = 0; d < h.num_documents; ++d) {
    HSPMD_CHECK(ds.offsets_[d] <= ds.offsets_[d + 1])
        << index_path << ": offsets decrease at document " << d << " (corrupted index)";
  }

  ds.tokens_map_ = map_file(tokens_path, ds.tokens_map_bytes_);
  // num_tokens is bounded first so the product below cannot wrap around to the file's size.
  uint64_t expected_tokens = kTokensHeaderBytes + h.num_tokens * h.token_bytes;
  HSPMD_CHECK(h.num_tokens < (1ull << 48) && ds.tokens_map_bytes_ == expected_tokens)
      << tokens_path << ": " << ds.tokens_map_bytes_ << " bytes, the index says " << expected_tokens << " ("
      << h.num_tokens << " tokens of " << h.token_bytes << " bytes + header): truncated or from another dataset";
  TokensHeader th;
  std::memcpy(&th, ds.tokens_map_, sizeof(th));
  HSPMD_CHECK(std::memcmp(th.magic, kTokensMagic, 8) == 0 && th.version == kVersion &&
              th.token_bytes == h.token_bytes)
      << tokens_path << ": bad header (magic, version or token width disagree with " << kIndexFile << ")";
  ds.tokens_ = static_cast<const unsigned char*>(ds.tokens_map_) + kTokensHeaderBytes;
  return ds;
}

bool TokenDataset::has_validation(const std::string& dir) {
  return std::filesystem::exists(std::filesystem::path(dir) / kValidationDir / kIndexFile);
}

TokenDataset TokenDataset::open_validation(const std::string& dir) {
  const std::string val_dir = join(dir, kValidationDir);
  HSPMD_CHECK(has_validation(dir)) << "dataset " << dir << " has no validation split (" << val_dir
                                   << " is missing): make one with `hspmd data prepare --val-fraction F`";
  TokenDataset train = open(dir);
  TokenDataset val = open(val_dir);
  HSPMD_CHECK(val.vocab_size() == train.vocab_size() && val.tokenizer_id() == train.tokenizer_id())
      << val_dir << ": vocab_size " << val.vocab_size() << " and tokenizer '" << val.tokenizer_id()
      << "' differ from the training split's (" << train.vocab_size() << ", '" << train.tokenizer_id()
      << "'): the two splits come from different prepare runs";
  return val;
}

TokenDataset::TokenDataset(TokenDataset&& other) noexcept { *this = std::move(other); }

TokenDataset& TokenDataset::operator=(TokenDataset&& other) noexcept {
  if (this != &other) {
    unmap();
    dir_ = std::move(other.dir_);
    header_ = std::move(other.header_);
    offsets_ = std::exchange(other.offsets_, nullptr);
    tokens_ = std::exchange(other.tokens_, nullptr);
    index_map_ = std::exchange(other.index_map_, nullptr);
    index_map_bytes_ = std::exchange(other.index_map_bytes_, 0);
    tokens_map_ = std::exchange(other.tokens_map_, nullptr);
    tokens_map_bytes_ = std::exchange(other.tokens_map_bytes_, 0);
  }
  return *this;
}

TokenDataset::~TokenDataset() { unmap(); }

void TokenDataset::unmap() {
  if (index_map_ != nullptr) ::munmap(index_map_, index_map_bytes_);
  if (tokens_map_ != nullptr) ::munmap(tokens_map_, tokens_map_bytes_);
  index_map_ = tokens_map_ = nullptr;
}

uint64_t TokenDataset::document_begin(uint64_t doc) const {
  HSPMD_CHECK(doc < num_documents()) << "dataset " << dir_ << ": document " << doc << " out of range ("
                                     << num_documents() << " documents)";
  return offsets_[doc];
}

uint64_t TokenDataset::document_length(uint64_t doc) const { return offsets_[doc + 1] - document_begin(doc); }

void TokenDataset::read(uint64_t doc, uint64_t begin, uint64_t length, std::vector<int32_t>& out) const {
  uint64_t doc_length = document_length(doc);
  HSPMD_CHECK(begin <= doc_length && length <= doc_length - begin)
      << "dataset " << dir_ << ": tokens [" << begin << ", " << begin + length << ") out of range for document " << doc
      << " of " << doc_length << " tokens";
  uint64_t first = offsets_[doc] + begin;
  size_t start = out.size();
  out.resize(start + length);
  uint32_t max_id = 0;
  for (uint64_t i = 0; i < length; ++i) {
    uint32_t v = 0;  // little-endian: the low bytes come first
    std::memcpy(&v, tokens_ + (first + i) * header_.token_bytes, header_.token_bytes);
    max_id = std::max(max_id, v);
    out[start + i] = static_cast<int32_t>(v);
  }
  // Cheap here, and it turns a corrupted tokens.bin into an error instead of an out-of-range embedding.
  HSPMD_CHECK(max_id < header_.vocab_size) << join(dir_, kTokensFile) << ": document " << doc << " holds token id "
                                           << max_id << " >= vocab_size " << header_.vocab_size << " (corrupted)";
}

std::vector<int32_t> TokenDataset::document(uint64_t doc) const {
  std::vector<int32_t> out;
  read(doc, 0, document_length(doc), out);
  return out;
}

std::optional<TokenDataset::TokenPosition> TokenDataset::first_token_at_least(uint32_t limit) const {
  std::vector<int32_t> tokens;
  for (uint64_t doc = 0; doc < num_documents(); ++doc) {
    tokens.clear();
    read(doc, 0, document_length(doc), tokens);
    for (uint64_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] >= 0 && static_cast<uint32_t>(tokens[i]) >= limit) return TokenPosition{doc, i, tokens[i]};
    }
  }
  return std::nullopt;
}

}  // namespace hspmd::data
