// Export of a checkpoint to the layout Hugging Face transformers' save_pretrained writes, so other
// tools load it directly (transformers' AutoModelForCausalLM.from_pretrained(out)):
//
//   out/config.json                       the model config (models::Model::config_json())
//   out/model.safetensors                 every weight, float32, by Hugging Face name
// or, when the weights exceed max_shard_bytes,
//   out/model-00001-of-00003.safetensors  ...  consecutive weights per file
//   out/model.safetensors.index.json      {"metadata": {"total_size": N}, "weight_map": {name: file}}
//
// The checkpoint may come from any run (one process or any strategy); the model is the one its saved
// config's "model_type" names (models/model_factory.h), its weights are written in
// models::Model::parameters() order and read shard file by shard file, so at most one output file's
// tensors are in memory. The directory is written under a temporary name and renamed into place: a
// failed export leaves nothing behind.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hspmd::runtime {

struct HfExportOptions {
  int64_t max_shard_bytes = 5'000'000'000;  // save_pretrained's default shard size (5 GB)
};

// Returns the files written (names inside `out`). Error naming `out` when it already exists.
std::vector<std::string> export_to_hf(const std::string& checkpoint_dir, const std::string& out,
                                      const HfExportOptions& options = {});

}  // namespace hspmd::runtime
