#include "hspmd/runtime/hf_weights.h"

#include <filesystem>
#include <set>

#include "hspmd/core/error.h"
#include "hspmd/core/json_file.h"
#include "hspmd/kernels/cast.h"
#include "hspmd/kernels/slice.h"

namespace hspmd::runtime {

namespace fs = std::filesystem;

namespace {

// The index.json of a sharded set, the one file of an unsharded one, or what a directory holds.
std::string resolve_path(const std::string& path) {
  if (!fs::is_directory(path)) return path;
  for (const char* name : {"model.safetensors.index.json", "model.safetensors"}) {
    if (fs::exists(fs::path(path) / name)) return (fs::path(path) / name).string();
  }
  HSPMD_THROW() << "weights directory " << path << " has neither model.safetensors nor model.safetensors.index.json";
}

}  // namespace

HfWeights::HfWeights(const std::string& path, const models::LlamaConfig& config) : path_(resolve_path(path)) {
  HSPMD_CHECK(fs::is_regular_file(path_)) << "weights file " << path_ << " does not exist";
  std::map<std::string, std::string> file_of;  // tensor -> file, as the index says
  if (path_.ends_with(".json")) {
    const nlohmann::json index = parse_json_object(read_text_file(path_, "weights index"), path_);
    const nlohmann::json& map = json_member(index, "weight_map", path_);
    HSPMD_CHECK(map.is_object()) << path_ << ": \"weight_map\" is not an object";
    for (const auto& [tensor, file] : map.items()) {
      HSPMD_CHECK(file.is_string() && fs::path(file.get<std::string>()).filename() == file.get<std::string>())
          << path_ << ": weight_map[\"" << tensor << "\"] is not a file name in the index's directory";
      file_of[tensor] = (fs::path(path_).parent_path() / file.get<std::string>()).string();
    }
  } else {
    const safetensors::Reader probe(path_);
    for (const safetensors::TensorInfo& info : probe.tensors()) file_of[info.name] = path_;
  }
  for (const auto& [tensor, file] : file_of) {
    auto& reader = files_[file];
    if (!reader) reader = std::make_shared<safetensors::Reader>(file);
    HSPMD_CHECK(reader->contains(tensor)) << file << ": tensor '" << tensor << "' is missing (" << path_
                                          << " places it there)";
  }

  std::set<std::string> wanted;
  for (const models::LlamaParam& p : models::llama_parameters(config)) {
    wanted.insert(p.name);
    auto it = file_of.find(p.name);
    HSPMD_CHECK(it != file_of.end()) << path_ << ": tensor '" << p.name << "' is missing";
    const safetensors::Reader& reader = *files_.at(it->second);
    const safetensors::TensorInfo& info = reader.info(p.name);
    HSPMD_CHECK(info.shape == p.shape) << reader.path() << ": tensor '" << p.name << "' has shape "
                                       << info.shape.to_string() << ", the model config expects " << p.shape.to_string();
    HSPMD_CHECK(is_floating(info.dtype)) << reader.path() << ": tensor '" << p.name << "' is "
                                         << dtype_name(info.dtype) << ", weights must be floating point";
    tensors_[p.name] = &reader;
  }
  for (const auto& [tensor, file] : file_of) {
    if (wanted.count(tensor)) continue;
    if (tensor.ends_with("rotary_emb.inv_freq")) continue;                   // a buffer older exports carry
    if (config.tie_word_embeddings && tensor == "lm_head.weight") continue;  // tied: same as embed_tokens
    HSPMD_THROW() << file << ": unexpected tensor '" << tensor << "' (the weights are for another model config)";
  }
}

Tensor HfWeights::read(const std::string& name, const sharding::Region& region) const {
  auto it = tensors_.find(name);
  HSPMD_CHECK(it != tensors_.end()) << path_ << ": no parameter '" << name << "'";
  const safetensors::Reader& reader = *it->second;
  const Shape& shape = reader.info(name).shape;
  // Only the rows the region spans; then the columns, in memory.
  Tensor rows = shape.rank() == 0 ? reader.read(name)
                                  : reader.read_rows(name, region.begin[0], region.end[0] - region.begin[0]);
  if (rows.dtype() != DType::kFloat32) {
    Tensor f = Tensor::empty(rows.shape(), DType::kFloat32);
    kernels::cast(rows, f);
    rows = f;
  }
  if (rows.shape() == region.shape()) return rows;
  Tensor out = Tensor::empty(region.shape(), DType::kFloat32);
  std::vector<int64_t> starts = region.begin;
  if (!starts.empty()) starts[0] = 0;
  kernels::copy_region(rows, starts, out, std::vector<int64_t>(starts.size(), 0), region.shape().dims());
  return out;
}

}  // namespace hspmd::runtime
