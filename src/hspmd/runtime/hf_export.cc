#include "hspmd/runtime/hf_export.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <utility>

#include <nlohmann/json.hpp>

#include "hspmd/core/atomic_file.h"
#include "hspmd/core/error.h"
#include "hspmd/core/json_file.h"
#include "hspmd/core/safetensors.h"
#include "hspmd/models/model_factory.h"
#include "hspmd/runtime/checkpoint.h"
#include "hspmd/runtime/sharded_checkpoint.h"

namespace hspmd::runtime {

namespace fs = std::filesystem;

namespace {

void write_text(const std::string& path, const std::string& text) {
  AtomicFile file(path);
  file.write(text.data(), text.size());
  file.commit();
}

std::string shard_name(size_t index, size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return buf;
}

}  // namespace

std::vector<std::string> export_to_hf(const std::string& checkpoint_dir, const std::string& out,
                                      const HfExportOptions& options) {
  HSPMD_CHECK(options.max_shard_bytes > 0) << "export: the shard size must be positive";
  const std::string target = checkpoint_dir_path(out);
  HSPMD_CHECK(!fs::exists(target)) << "export: " << out << " already exists; give a new directory";
  const ShardedCheckpoint c = ShardedCheckpoint::open(checkpoint_dir);
  const std::shared_ptr<const models::Model> model =
      models::model_from_config_text(json_member(c.state(), "config", checkpoint_dir).dump(), checkpoint_dir);

  // Consecutive weights per file, each file at most max_shard_bytes (a larger tensor alone).
  std::vector<std::vector<models::ParamSpec>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const models::ParamSpec& p : model->parameters()) {
    const int64_t bytes = p.shape.numel() * 4;
    if (!shards.back().empty() && in_shard + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(p);
    in_shard += bytes;
    total += bytes;
  }

  const std::string staging = target + ".tmp." + std::to_string(::getpid());
  fs::remove_all(staging);
  fs::create_directories(staging);
  std::vector<std::string> files{"config.json"};
  try {
    write_text(staging + "/config.json", model->config_json().dump(2) + "\n");
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string name = shards.size() == 1 ? "model.safetensors" : shard_name(i, shards.size());
      std::vector<std::pair<std::string, Tensor>> tensors;
      for (const models::ParamSpec& p : shards[i]) {
        tensors.emplace_back(p.name, c.read(p.name, sharding::Region::full(p.shape)));
        weight_map[p.name] = name;
      }
      safetensors::save(staging + "/" + name, tensors, {{"format", "pt"}});
      files.push_back(name);
    }
    if (shards.size() > 1) {
      const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
      write_text(staging + "/model.safetensors.index.json", index.dump(2) + "\n");
      files.push_back("model.safetensors.index.json");
    }
    swap_in_directory(staging, target);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    throw;
  }
  return files;
}

}  // namespace hspmd::runtime
