#include "hspmd/core/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "hspmd/core/atomic_file.h"
#include "hspmd/core/error.h"

namespace hspmd::safetensors {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

// Like the reference implementation: a larger header is refused rather than parsed.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

std::optional<DType> find_dtype_code(const std::string& code) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32, DType::kInt64}) {
    if (code == dtype_code(d)) return d;
  }
  return std::nullopt;
}

// numel, or UINT64_MAX when it overflows (then no byte count can match it).
uint64_t checked_numel(const Shape& shape) {
  uint64_t n = 1;
  for (int64_t d : shape.dims()) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return UINT64_MAX;
  }
  return n;
}

// Parses one tensor entry of the header; every error names the file and the tensor.
TensorInfo parse_entry(const std::string& path, const std::string& name, const nlohmann::json& entry) {
  auto where = [&] { return path + ": tensor \"" + name + "\""; };
  HSPMD_CHECK(entry.is_object()) << where() << ": entry is not a JSON object";
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    HSPMD_CHECK(entry.contains(key)) << where() << ": key \"" << key << "\" missing";
  }
  TensorInfo info;
  info.name = name;
  HSPMD_CHECK(entry["dtype"].is_string()) << where() << ": \"dtype\" is not a string";
  std::string code = entry["dtype"].get<std::string>();
  auto dtype = find_dtype_code(code);
  HSPMD_CHECK(dtype) << where() << ": unsupported safetensors dtype \"" << code
                     << "\" (supported: F32, F64, BF16, I32, I64)";
  info.dtype = *dtype;
  const auto& shape = entry["shape"];
  HSPMD_CHECK(shape.is_array()) << where() << ": \"shape\" is not an array";
  std::vector<int64_t> dims;
  for (const auto& d : shape) {
    HSPMD_CHECK(d.is_number_unsigned()) << where() << ": shape " << shape.dump() << " has a non-integer or negative dim";
    HSPMD_CHECK(d.get<uint64_t>() < (1ull << 40)) << where() << ": shape " << shape.dump() << " is absurdly large";
    dims.push_back(d.get<int64_t>());
  }
  info.shape = Shape(std::move(dims));
  const auto& offsets = entry["data_offsets"];
  HSPMD_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
              offsets[1].is_number_unsigned())
      << where() << ": \"data_offsets\" must be two non-negative integers, got " << offsets.dump();
  info.begin = offsets[0].get<uint64_t>();
  info.end = offsets[1].get<uint64_t>();
  HSPMD_CHECK(info.begin <= info.end) << where() << ": data_offsets " << offsets.dump() << " are reversed";
  uint64_t expected = 0;
  bool overflow = __builtin_mul_overflow(checked_numel(info.shape), dtype_size(info.dtype), &expected);
  HSPMD_CHECK(!overflow && info.nbytes() == expected) << where() << ": data_offsets " << offsets.dump() << " span "
                                         << info.nbytes() << " bytes but " << dtype_code(info.dtype)
                                         << info.shape.to_string() << " needs " << expected;
  return info;
}

}  // namespace

std::string dtype_code(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "F32";
    case DType::kFloat64: return "F64";
    case DType::kBFloat16: return "BF16";
    case DType::kInt32: return "I32";
    case DType::kInt64: return "I64";
  }
  HSPMD_THROW() << "invalid dtype " << static_cast<int>(dtype);
}

DType parse_dtype_code(const std::string& code) {
  if (auto dtype = find_dtype_code(code)) return *dtype;
  HSPMD_THROW() << "unsupported safetensors dtype \"" << code << "\" (supported: F32, F64, BF16, I32, I64)";
}

void save(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
          const Metadata& metadata) {
  // Order by decreasing element size, then name: contiguous data stays aligned per element.
  std::vector<const std::pair<std::string, Tensor>*> order;
  for (const auto& entry : tensors) {
    HSPMD_CHECK(!entry.first.empty() && entry.first != "__metadata__")
        << path << ": invalid tensor name \"" << entry.first << "\"";
    HSPMD_CHECK(entry.second.defined()) << path << ": tensor \"" << entry.first << "\" is undefined";
    order.push_back(&entry);
  }
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) {
    size_t sa = dtype_size(a->second.dtype()), sb = dtype_size(b->second.dtype());
    return sa != sb ? sa > sb : a->first < b->first;
  });
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto* entry : order) {
    HSPMD_CHECK(!header.contains(entry->first)) << path << ": tensor \"" << entry->first << "\" given twice";
    const Tensor& t = entry->second;
    header[entry->first] = {{"dtype", dtype_code(t.dtype())},
                            {"shape", t.shape().dims()},
                            {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  // Pad with spaces (valid JSON whitespace) so the data section starts 8-byte aligned.
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  uint64_t length = text.size();
  AtomicFile out(path);
  out.write(&length, sizeof(length));
  out.write(text.data(), text.size());
  for (const auto* entry : order) out.write(entry->second.raw_data(), entry->second.nbytes());
  out.commit();
}

std::map<std::string, Tensor> load_all(const std::string& path, Allocator* allocator) {
  Reader reader(path);
  std::map<std::string, Tensor> result;
  for (const auto& info : reader.tensors()) result[info.name] = reader.read(info.name, allocator);
  return result;
}

Reader::Reader(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  HSPMD_CHECK(fd_ >= 0) << "cannot open " << path_ << ": " << std::strerror(errno);
  // A constructor that throws never runs the destructor: close the file here, or every refused
  // file would leak a descriptor.
  try {
    read_header();
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

void Reader::read_header() {
  struct stat st {};
  HSPMD_CHECK(::fstat(fd_, &st) == 0) << "cannot stat " << path_ << ": " << std::strerror(errno);
  uint64_t file_size = static_cast<uint64_t>(st.st_size);
  HSPMD_CHECK(file_size >= 8) << path_ << ": truncated safetensors file (" << file_size
                              << " bytes, less than the 8-byte header length)";
  uint64_t header_length = 0;
  read_at(0, 8, &header_length, "header length");
  HSPMD_CHECK(header_length <= kMaxHeaderBytes) << path_ << ": header length " << header_length
                                                << " exceeds the limit of " << kMaxHeaderBytes << " bytes";
  HSPMD_CHECK(8 + header_length <= file_size) << path_ << ": truncated safetensors file: header of "
                                              << header_length << " bytes but the file has " << file_size;
  std::string text(header_length, '\0');
  read_at(8, header_length, text.data(), "header");
  data_start_ = 8 + header_length;
  uint64_t data_size = file_size - data_start_;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    HSPMD_THROW() << path_ << ": the header is not valid JSON: " << e.what();
  }
  HSPMD_CHECK(header.is_object()) << path_ << ": the header is not a JSON object";
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      HSPMD_CHECK(entry.is_object()) << path_ << ": \"__metadata__\" is not an object";
      for (const auto& [key, value] : entry.items()) {
        HSPMD_CHECK(value.is_string()) << path_ << ": metadata \"" << key << "\" is not a string";
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    tensors_.push_back(parse_entry(path_, name, entry));
  }
  // The data section must be covered exactly: no overlap, no hole, nothing past the end.
  std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (const auto& t : tensors_) {
    HSPMD_CHECK(t.end <= data_size) << path_ << ": tensor \"" << t.name << "\" data [" << t.begin << ", " << t.end
                                    << ") lies beyond the end of the data (" << data_size
                                    << " bytes): truncated file or offsets out of range";
    HSPMD_CHECK(t.begin >= covered) << path_ << ": tensor \"" << t.name << "\" data [" << t.begin << ", " << t.end
                                    << ") overlaps the previous tensor (which ends at " << covered << ")";
    HSPMD_CHECK(t.begin == covered) << path_ << ": hole in the data before tensor \"" << t.name << "\" (bytes ["
                                    << covered << ", " << t.begin << ") belong to no tensor)";
    covered = t.end;
  }
  HSPMD_CHECK(covered == data_size) << path_ << ": " << (data_size - covered)
                                    << " trailing bytes after the last tensor belong to no tensor";
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

Reader::Reader(Reader&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      data_start_(other.data_start_),
      tensors_(std::move(other.tensors_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {}

Reader& Reader::operator=(Reader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    data_start_ = other.data_start_;
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

Reader::~Reader() {
  if (fd_ >= 0) ::close(fd_);
}

const TensorInfo& Reader::info(const std::string& name) const {
  auto it = index_.find(name);
  HSPMD_CHECK(it != index_.end()) << path_ << ": no tensor \"" << name << "\" (the file has " << tensors_.size()
                                  << " tensors)";
  return tensors_[it->second];
}

void Reader::read_at(uint64_t file_offset, uint64_t length, void* out, const std::string& what) const {
  char* p = static_cast<char*>(out);
  while (length > 0) {
    ssize_t n = ::pread(fd_, p, length, static_cast<off_t>(file_offset));
    if (n < 0 && errno == EINTR) continue;
    HSPMD_CHECK(n > 0) << path_ << ": cannot read " << what << ": "
                       << (n == 0 ? "unexpected end of file (truncated?)" : std::strerror(errno));
    p += n;
    file_offset += static_cast<uint64_t>(n);
    length -= static_cast<uint64_t>(n);
  }
}

Tensor Reader::read(const std::string& name, Allocator* allocator) const {
  const TensorInfo& t = info(name);
  Tensor result = Tensor::empty(t.shape, t.dtype, allocator);
  read_at(data_start_ + t.begin, t.nbytes(), result.raw_data(), "tensor \"" + name + "\"");
  return result;
}

Tensor Reader::read_rows(const std::string& name, int64_t start, int64_t count, Allocator* allocator) const {
  const TensorInfo& t = info(name);
  HSPMD_CHECK(t.shape.rank() >= 1) << path_ << ": tensor \"" << name << "\" is a scalar: no rows to read";
  HSPMD_CHECK(start >= 0 && count >= 0 && start + count <= t.shape.dim(0))
      << path_ << ": rows [" << start << ", " << start + count << ") out of range for tensor \"" << name << "\" of shape "
      << t.shape.to_string();
  uint64_t row_bytes = static_cast<uint64_t>(t.shape.numel_between(1, t.shape.rank())) * dtype_size(t.dtype);
  Tensor result = Tensor::empty(t.shape.with_dim(0, count), t.dtype, allocator);
  read_at(data_start_ + t.begin + static_cast<uint64_t>(start) * row_bytes, static_cast<uint64_t>(count) * row_bytes,
          result.raw_data(), "tensor \"" + name + "\"");
  return result;
}

void Reader::read_bytes(const std::string& name, uint64_t offset, uint64_t length, void* out) const {
  const TensorInfo& t = info(name);
  HSPMD_CHECK(offset <= t.nbytes() && length <= t.nbytes() - offset)
      << path_ << ": bytes [" << offset << ", " << offset + length << ") out of range for tensor \"" << name << "\" ("
      << t.nbytes() << " bytes)";
  read_at(data_start_ + t.begin + offset, length, out, "tensor \"" + name + "\"");
}

}  // namespace hspmd::safetensors
