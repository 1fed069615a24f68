// Hugging Face Llama weights, read slice by slice: one `model.safetensors` file, or a set sharded
// the way Hugging Face writes large models (`model.safetensors.index.json` mapping each tensor to
// its file). Opening checks the names, shapes and dtypes of every tensor against the model config
// without reading any data; read() then reads only the rows (dim 0) a slice spans, so each rank of
// a distributed run reads its own part and nothing else.
//
//   HfWeights w("llama/", config);            // a directory, a .safetensors file or an index.json
//   Tensor q = w.read("model.layers.0.self_attn.q_proj.weight", region);   // float32
//
// Accepted: float32, bfloat16, float16 and float64 tensors (converted to float32), the
// "rotary_emb.inv_freq" buffers older exports carry and, with tied embeddings, an lm_head.weight.
// Anything else left over is an error: the file is for another model.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "hspmd/core/safetensors.h"
#include "hspmd/core/tensor.h"
#include "hspmd/models/llama_config.h"
#include "hspmd/sharding/region.h"

namespace hspmd::runtime {

class HfWeights {
 public:
  // Error naming the file and tensor that is missing, mis-shaped, not floating point, or unexpected.
  HfWeights(const std::string& path, const models::LlamaConfig& config);

  // `region` (global coordinates) of a parameter, float32.
  Tensor read(const std::string& name, const sharding::Region& region) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::map<std::string, std::shared_ptr<safetensors::Reader>> files_;  // by file path
  std::map<std::string, const safetensors::Reader*> tensors_;         // parameter -> its file
};

}  // namespace hspmd::runtime
