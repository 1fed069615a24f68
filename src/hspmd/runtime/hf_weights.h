// Hugging Face weights as save_pretrained writes them, checked against a model (models/model.h).
//
//   weights/                           a save_pretrained directory, or just the .safetensors file
//     model.safetensors                one file, or
//     model.safetensors.index.json     {"weight_map": {"model.norm.weight": "model-00002-of-00002.safetensors", ...}}
//     model-0000N-of-0000M.safetensors   and the shards it lists
//
//   HfWeightsAudit a = audit_hf_weights("hf/", model, true);      // headers only, no tensor data read
//   a.missing;  a.extra;  a.mismatched;  a.ok();
//
// The audit is what `hspmd model info --weights` prints and what HfWeights refuses to read past:
// every tensor the config implies present with its shape, none left over (tensors the model
// recomputes rather than loads, Model::recomputes_hf_tensor, such as the "rotary_emb.inv_freq"
// buffers of older exports, are not extra).
//
//   HfWeights w("hf/", model);           // audited, no tensor data read yet
//   Tensor q = w.read("model.layers.0.self_attn.q_proj.weight", region);   // float32
// read() reads only the rows (dim 0) a region spans, so each rank of a distributed run reads its
// own slices and nothing else.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hspmd/core/safetensors.h"
#include "hspmd/core/tensor.h"
#include "hspmd/models/model.h"
#include "hspmd/sharding/region.h"

namespace hspmd::runtime {

// The safetensors files of `path` (a file, or a directory as above), in a fixed order. Error
// naming the path when it holds none, or when the index names a missing shard.
std::vector<std::string> hf_weight_files(const std::string& path);

// True for a .safetensors file or a directory holding model.safetensors or its index: a Hugging
// Face checkpoint rather than an hspmd training checkpoint (trainer_state.json).
bool is_hf_weights(const std::string& path);

struct HfWeightsAudit {
  struct Found {
    std::string file;  // which safetensors file holds it
    safetensors::TensorInfo info;
  };
  std::vector<Found> found;             // every parameter of the model, Model::parameters() order
  std::vector<std::string> missing;     // parameter names absent from the files
  std::vector<std::string> extra;       // tensor names the config does not imply
  std::vector<std::string> mismatched;  // "tensor 'NAME' has shape [8, 16], the config implies [16, 16]"
  bool ok() const { return missing.empty() && extra.empty() && mismatched.empty(); }
  // Every problem, one per line ("tensor 'model.norm.weight' is missing", ...); empty when ok().
  std::string problems() const;
};

// Reads the headers of `path`'s files. A shape that differs from the config's, or a dtype other
// than the config's "torch_dtype"/"dtype" (Model::hf_weights_dtype), is mismatched when
// `check_dtype`.
HfWeightsAudit audit_hf_weights(const std::string& path, const models::Model& model, bool check_dtype);

// Hugging Face weights to read slice by slice, stored dtype converted to float32.
class HfWeights {
 public:
  // Error naming the path and the first missing, mis-shaped or unexpected tensor.
  HfWeights(const std::string& path, const models::Model& model);

  // `region` (global coordinates) of a parameter, float32.
  Tensor read(const std::string& name, const sharding::Region& region) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::map<std::string, std::shared_ptr<safetensors::Reader>> tensors_;  // parameter -> its file
};

}  // namespace hspmd::runtime
