// safetensors files: the checkpoint format of Hugging Face models, read and written here.
//
// Layout (all integers little-endian):
//   [8 bytes]  N = length of the JSON header
//   [N bytes]  JSON: {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [260, 128],
//                     "data_offsets": [0, 66560]}, ..., "__metadata__": {"step": "42"}}
//              padded with spaces so the data section starts at an 8-byte aligned file offset
//   [rest]     data section: tensor bytes at [begin, end) relative to its start, row-major
//
//   safetensors::save("ckpt/model.safetensors", {{"w", w}, {"b", b}}, {{"step", "42"}});
//   safetensors::Reader r("ckpt/model.safetensors");          // reads and validates the header only
//   for (const auto& t : r.tensors()) ...                      // names, dtypes, shapes; no data read
//   Tensor w = r.read("w");                                    // one tensor
//   Tensor rows = r.read_rows("w", 128, 64);                   // rows [128, 192) of dim 0 (a shard)
//
// Dtypes: "F32", "F64", "BF16", "I32", "I64" (the dtypes of hspmd::DType); a file holding another
// dtype is refused at open with an error naming the tensor. Writes are atomic: a temp file in the
// same directory, fsync, rename, fsync of the directory, so a crash leaves the old file or the new
// one, never a torn one. Reads are validated (truncation, offsets out of range, overlaps, holes,
// byte counts that disagree with dtype x shape, bad JSON): every Error names the file and, where
// there is one, the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hspmd/core/tensor.h"

namespace hspmd::safetensors {

// One tensor's entry in the header. begin/end are byte offsets into the data section.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

using Metadata = std::map<std::string, std::string>;

// The safetensors dtype code of a DType ("F32", "BF16", ...) and back (Error on unknown codes).
std::string dtype_code(DType dtype);
DType parse_dtype_code(const std::string& code);

// Writes tensors (in any order; names must be unique and non-empty, and not "__metadata__")
// and string metadata to `path` atomically. Tensors are laid out by decreasing element size, then
// name, so every tensor's data is aligned to its element size.
void save(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
          const Metadata& metadata = {});

// Reads every tensor of a file (convenience for small files and tests).
std::map<std::string, Tensor> load_all(const std::string& path, Allocator* allocator = nullptr);

// Opens a file, reads and validates its header; tensor data is read on demand.
class Reader {
 public:
  explicit Reader(std::string path);
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  Reader(Reader&&) noexcept;
  Reader& operator=(Reader&&) noexcept;
  ~Reader();

  const std::string& path() const { return path_; }
  // Every tensor, in data order (ascending begin offset).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const Metadata& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Error naming the file and the tensor when absent.
  const TensorInfo& info(const std::string& name) const;

  // The whole tensor.
  Tensor read(const std::string& name, Allocator* allocator = nullptr) const;
  // Rows [start, start + count) along dim 0 (rank >= 1): the shard a rank owns when a parameter is
  // split along its first dimension, without reading the rest.
  Tensor read_rows(const std::string& name, int64_t start, int64_t count, Allocator* allocator = nullptr) const;
  // Raw bytes [offset, offset + length) of one tensor's data into out (for arbitrary slicing).
  void read_bytes(const std::string& name, uint64_t offset, uint64_t length, void* out) const;

 private:
  void read_header();  // validates the header into tensors_ and metadata_
  void read_at(uint64_t file_offset, uint64_t length, void* out, const std::string& what) const;

  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;  // file offset of the data section
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;  // name -> position in tensors_
  Metadata metadata_;
};

}  // namespace hspmd::safetensors
