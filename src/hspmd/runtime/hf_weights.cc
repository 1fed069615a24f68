#include "hspmd/runtime/hf_weights.h"

#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "hspmd/core/error.h"
#include "hspmd/core/json_file.h"
#include "hspmd/kernels/cast.h"
#include "hspmd/kernels/slice.h"

namespace hspmd::runtime {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

}  // namespace

bool is_hf_weights(const std::string& path) {
  if (fs::is_regular_file(path)) return path.ends_with(".safetensors");
  const fs::path dir(path);
  return fs::is_directory(dir) && (fs::exists(dir / kSingleFile) || fs::exists(dir / kIndexFile));
}

std::vector<std::string> hf_weight_files(const std::string& path) {
  HSPMD_CHECK(fs::exists(path)) << "weights " << path << " do not exist";
  if (!fs::is_directory(path)) return {path};
  const fs::path dir(path);
  if (fs::exists(dir / kSingleFile)) return {(dir / kSingleFile).string()};
  const std::string index = (dir / kIndexFile).string();
  HSPMD_CHECK(fs::exists(index)) << "weights directory " << path << " holds neither " << kSingleFile << " nor "
                                 << kIndexFile;
  nlohmann::json j = parse_json_object(read_text_file(index, "weights index"), index);
  HSPMD_CHECK(j.contains("weight_map") && j.at("weight_map").is_object())
      << index << ": missing object \"weight_map\"";
  std::set<std::string> shards;
  for (const auto& [name, file] : j.at("weight_map").items()) {
    HSPMD_CHECK(file.is_string() && fs::path(file.get<std::string>()).filename() == file.get<std::string>())
        << index << ": weight_map[\"" << name << "\"] must name a file in the index's directory";
    shards.insert(file.get<std::string>());
  }
  std::vector<std::string> files;
  for (const std::string& shard : shards) {
    const fs::path file = dir / shard;
    HSPMD_CHECK(fs::is_regular_file(file)) << index << " names shard " << shard << ", which does not exist";
    files.push_back(file.string());
  }
  return files;
}

std::string HfWeightsAudit::problems() const {
  std::string out;
  for (const std::string& name : missing) out += "tensor '" + name + "' is missing\n";
  for (const std::string& name : extra) {
    out += "unexpected tensor '" + name + "' (the config implies no such parameter)\n";
  }
  for (const std::string& line : mismatched) out += line + "\n";
  return out;
}

HfWeightsAudit audit_hf_weights(const std::string& path, const models::Model& model, bool check_dtype) {
  std::map<std::string, HfWeightsAudit::Found> tensors;
  for (const std::string& file : hf_weight_files(path)) {
    safetensors::Reader reader(file);
    for (const safetensors::TensorInfo& info : reader.tensors()) {
      auto [it, fresh] = tensors.emplace(info.name, HfWeightsAudit::Found{file, info});
      HSPMD_CHECK(fresh) << "weights " << path << ": tensor " << info.name << " is in both " << it->second.file
                         << " and " << file;
    }
  }
  HfWeightsAudit audit;
  std::set<std::string> wanted;
  const std::string dtype = model.hf_weights_dtype();
  for (const models::ParamSpec& p : model.parameters()) {
    wanted.insert(p.name);
    auto it = tensors.find(p.name);
    if (it == tensors.end()) {
      audit.missing.push_back(p.name);
      continue;
    }
    const safetensors::TensorInfo& info = it->second.info;
    if (info.shape != p.shape) {
      audit.mismatched.push_back("tensor '" + p.name + "' has shape " + info.shape.to_string() +
                                 ", the config implies " + p.shape.to_string());
    } else if (!is_floating(info.dtype)) {
      audit.mismatched.push_back("tensor '" + p.name + "' is " + std::string(dtype_name(info.dtype)) +
                                 ", weights must be floating point");
    } else if (check_dtype && dtype_name(info.dtype) != dtype) {
      audit.mismatched.push_back("tensor '" + p.name + "' is " + std::string(dtype_name(info.dtype)) +
                                 ", the config's dtype is " + dtype);
    }
    audit.found.push_back(it->second);
  }
  for (const auto& [name, found] : tensors) {
    if (!wanted.count(name) && !model.recomputes_hf_tensor(name)) audit.extra.push_back(name);
  }
  return audit;
}

HfWeights::HfWeights(const std::string& path, const models::Model& model) : path_(path) {
  // The stored dtype may differ from the config's: the values are converted to float32 either way.
  const HfWeightsAudit audit = audit_hf_weights(path, model, /*check_dtype=*/false);
  HSPMD_CHECK(audit.missing.empty()) << path << ": tensor '" << audit.missing.front() << "' is missing";
  HSPMD_CHECK(audit.mismatched.empty()) << path << ": " << audit.mismatched.front();
  HSPMD_CHECK(audit.extra.empty()) << path << ": unexpected tensor '" << audit.extra.front()
                                   << "' (the weights are for another model config)";
  std::map<std::string, std::shared_ptr<safetensors::Reader>> files;
  for (const HfWeightsAudit::Found& found : audit.found) {
    auto& reader = files[found.file];
    if (!reader) reader = std::make_shared<safetensors::Reader>(found.file);
    tensors_[found.info.name] = reader;
  }
}

Tensor HfWeights::read(const std::string& name, const sharding::Region& region) const {
  auto it = tensors_.find(name);
  HSPMD_CHECK(it != tensors_.end()) << path_ << ": no parameter '" << name << "'";
  const safetensors::Reader& reader = *it->second;
  // Only the rows the region spans; then the columns, in memory.
  Tensor rows = reader.info(name).shape.rank() == 0
                    ? reader.read(name)
                    : reader.read_rows(name, region.begin[0], region.end[0] - region.begin[0]);
  if (rows.dtype() != DType::kFloat32) {
    Tensor f = Tensor::empty(rows.shape(), DType::kFloat32);
    kernels::cast(rows, f);
    rows = f;
  }
  if (rows.shape() == region.shape()) return rows;
  Tensor out = Tensor::empty(region.shape(), DType::kFloat32);
  std::vector<int64_t> starts = region.begin;
  starts[0] = 0;
  kernels::copy_region(rows, starts, out, std::vector<int64_t>(starts.size(), 0), region.shape().dims());
  return out;
}

}  // namespace hspmd::runtime
