// Training checkpoints: one directory holding everything needed to continue a run bit-identically.
//
//   ckpt/
//     model.safetensors       float32 weights under the model's Hugging Face names
//                             ("model.layers.3.self_attn.q_proj.weight", ...)
//     optimizer.safetensors   "<param>.exp_avg" and "<param>.exp_avg_sq" (AdamW m and v), float32
//     trainer_state.json      {"format": "hspmd-checkpoint-v1", "step": 40, "seed": 1,
//                              "loader": {"epoch":0,"cursor":812,"steps":40},
//                              "config": {...Model::config_json()...}, "options": {...trainer options...},
//                              "files": {"model.safetensors": {"bytes": 1234, "crc32": "9a0f..."}, ...}}
//
//   Checkpoint c{.model = params, .exp_avg = opt.exp_avg(), .exp_avg_sq = opt.exp_avg_sq(), .state = st};
//   save_checkpoint("runs/ckpt", c, model);                // atomic: the old directory or the new one
//   Checkpoint back = load_checkpoint("runs/ckpt", model);  // names, shapes, checksums verified
//   TensorMap w = load_hf_weights("hf/model.safetensors", model);      // weights only (HF layout)
//
// Atomicity: the directory is written under "<dir>.tmp.<pid>" (every file fsynced), then swapped
// with the old one in a single renameat2(RENAME_EXCHANGE) (or renamed into place when there is no
// old one), and the old one is removed. A crash leaves the previous checkpoint or the new one.
// Integrity: trainer_state.json records each safetensors file's size and CRC-32, so a truncated
// file or a flipped byte in tensor data is refused with an error naming the file (and the tensor,
// for missing or mis-shaped ones) before anything is loaded into a run.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "hspmd/data/loader.h"
#include "hspmd/graph/graph.h"
#include "hspmd/models/model.h"

namespace hspmd::runtime {

inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kTrainerStateFile = "trainer_state.json";

// The non-tensor part of a checkpoint.
struct TrainerState {
  int64_t step = 0;                // optimizer steps completed
  uint64_t seed = 0;               // parameter-init and data-order seed (the run's only RNG input)
  data::LoaderState loader;        // where the data loader stands
  nlohmann::json config;           // the model's config (models::Model::config_json())
  nlohmann::json options;          // the trainer options of the run (informative, and checked on resume)
};

struct Checkpoint {
  graph::TensorMap model;       // by Hugging Face name, float32
  graph::TensorMap exp_avg;     // by parameter name
  graph::TensorMap exp_avg_sq;  // by parameter name
  TrainerState state;
};

// Writes `dir` atomically (see above). Every parameter of `model` (whose config c.state.config is)
// must be in c.model, with its shape; exp_avg / exp_avg_sq likewise.
void save_checkpoint(const std::string& dir, const Checkpoint& c, const models::Model& model);

// Reads a checkpoint directory. Error naming the file when one is missing, truncated, corrupted
// (size or CRC-32 differs from trainer_state.json) or malformed; naming the tensor when one is
// missing, unexpected, mis-shaped or not float32. `model` is the model the run builds: the
// checkpoint's config must equal its config.
Checkpoint load_checkpoint(const std::string& dir, const models::Model& model);

// Error naming the first key whose value differs between a checkpoint's model config (its JSON)
// and the run's model: "cannot resume from runs/ckpt: its model config has \"hidden_size\": 128,
// the run's has 256". `source` names the checkpoint.
void check_same_config(const nlohmann::json& saved, const models::Model& model, const std::string& source);

// Weights only, whole, from Hugging Face safetensors (runtime/hf_weights.h: a file, a sharded
// set's index.json or a directory holding either; F32, BF16, F16 or F64, as float32). Every
// parameter of `model` must be present with its shape; tensors the model recomputes
// (Model::recomputes_hf_tensor: "rotary_emb.inv_freq" buffers, "lm_head.weight" when tied)
// are skipped; any other tensor is an error, since it means the file is for another model.
graph::TensorMap load_hf_weights(const std::string& path, const models::Model& model);

// CRC-32 (IEEE 802.3, the zlib one) of a byte range, continuing from `crc` (0 to start).
uint32_t crc32(const void* data, size_t length, uint32_t crc = 0);

// ---- Building blocks shared with the sharded format (sharded_checkpoint.h) ----

// "runs/ckpt/" -> "/abs/runs/ckpt": the one spelling of a checkpoint directory, so that the names
// derived from it ("<dir>.staging", "<dir>.tmp.<pid>") agree however the caller wrote it.
std::string checkpoint_dir_path(const std::string& dir);

// {"bytes": 1234, "crc32": "9a0f1c2d"} of a whole file; Error naming it when it cannot be read.
nlohmann::json file_digest(const std::string& path);

// Error naming `path` when its size or CRC-32 differs from `recorded` (a file_digest() entry read
// from the JSON file `source`): "checkpoint file ckpt/model.safetensors is corrupted: CRC-32 ...,
// trainer_state.json records ...".
void verify_file_digest(const std::string& path, const nlohmann::json& recorded, const std::string& source);

// Makes the completely written directory `staged` appear as `dir` (a checkpoint_dir_path()) in one
// atomic step: fsyncs `staged`, then renameat2(RENAME_EXCHANGE) with an existing `dir` (or a plain
// rename when there is none), fsyncs the parent and removes the old directory, now at `staged`.
// A crash at any point leaves the old checkpoint or the new one under `dir`.
void swap_in_directory(const std::string& staged, const std::string& dir);

// trainer_state.json of a single-process checkpoint, after checking its format and verifying the
// size and CRC-32 of model.safetensors and optimizer.safetensors (errors name the file). The
// tensors themselves are not read.
nlohmann::json read_trainer_state(const std::string& dir);

}  // namespace hspmd::runtime
