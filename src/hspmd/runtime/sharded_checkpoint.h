// Strategy-independent checkpoints (architecture §7): each rank writes the shards it holds,
// rank 0 writes an index of which file holds which region of which tensor; a run under ANY other
// strategy loads it by reading, for each of its own shards, the overlapping pieces of the saved
// ones (resharding at load). Tensors are addressed by name: "<param>" (weights),
// "<param>.exp_avg", "<param>.exp_avg_sq" (AdamW moments), all float32.
//
//   dir/
//     index.json          {"format": "hspmd-sharded-checkpoint-v1", "world_size": 4,
//                          "tensors": {"model.norm.weight": {"shape": [128],
//                              "shards": [{"file": "rank-00002.safetensors",
//                                          "key": "model.norm.weight@[0:128]", "region": [[0, 128]]}]}, ...},
//                          "files": {"rank-00002.safetensors": {"bytes": 123, "crc32": "9a0f1c2d"}, ...},
//                          "state": {...caller's JSON: step, loader, config, options, strategy...}}
//     rank-00000.safetensors ...   one per rank that wrote shards; key = "<name>@<region text>"
//
// Saving is collective and atomic. Every rank calls, in order, with a barrier of all ranks between:
//   1. prepare_sharded_save(dir)          (rank 0) creates an empty staging dir "<dir>.staging",
//      discarding one a crashed save left behind
//   2. write_rank_shards(dir, rank, shards)   (every rank; an empty list writes nothing) writes
//      "<dir>.staging/rank-XXXXX.safetensors", checksums it (the ranks in parallel), then writes the
//      small manifest "rank-XXXXX.json" (name, key, shape, region per shard, and the digest) last,
//      so a manifest's presence says its rank's file is complete
//   3. finish_sharded_save(dir, world, state) (rank 0) reads every rank's manifest, re-checks each
//      file's size and CRC against it, checks that the saved regions of each tensor tile it exactly
//      (no gap, no overlap: the caller saves each region once, e.g. from its first holder), writes
//      index.json, removes the manifests (index.json is the only one a finished checkpoint has),
//      then swaps the staging dir into place (runtime::swap_in_directory: the old checkpoint or
//      the new one survives a crash; the old one is then deleted).
// Ranks may be threads of one process or separate processes sharing the file system.
// Errors name the tensor (a gap or overlap, with the regions) or the file (missing, truncated, CRC).
//
// Loading: ShardedCheckpoint::open(dir) verifies sizes and checksums of every file listed, the
// tiling of every tensor and each piece's dtype and shape; then read(name, region) assembles any
// region of any tensor from the saved shards, reading from each overlapping piece only the rows
// (dim 0) the overlap spans. Nothing is cached but the open file handles. open() also
// accepts a single-process checkpoint directory (runtime/checkpoint.h: model.safetensors,
// optimizer.safetensors, trainer_state.json), whose tensors are whole, so a run can move from one
// process to many and back; state() is then trainer_state.json (verified as load_checkpoint does).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hspmd/core/safetensors.h"
#include "hspmd/core/tensor.h"
#include "hspmd/graph/graph.h"
#include "hspmd/models/model.h"
#include "hspmd/sharding/region.h"

namespace hspmd::runtime {

struct SavedShard {
  std::string name;          // "<param>" or "<param>.exp_avg" / "<param>.exp_avg_sq"
  Shape global_shape;        // of the whole tensor
  sharding::Region region;   // the part `data` holds, global coordinates
  Tensor data;               // float32, shape == region.shape()
};

void prepare_sharded_save(const std::string& dir);
void write_rank_shards(const std::string& dir, int rank, const std::vector<SavedShard>& shards);
void finish_sharded_save(const std::string& dir, int world_size, const nlohmann::json& state);

class ShardedCheckpoint {
 public:
  static ShardedCheckpoint open(const std::string& dir);
  const nlohmann::json& state() const { return state_; }
  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
  // Shape of a saved tensor; Error naming it when absent.
  const Shape& shape(const std::string& name) const;
  // The region of tensor `name` (float32), assembled from the pieces that overlap it. Error naming
  // the tensor when it is absent or the region exceeds its shape.
  Tensor read(const std::string& name, const sharding::Region& region) const;

 private:
  struct Piece {
    std::string file;
    std::string key;
    sharding::Region region;
  };
  struct Entry {
    Shape shape;
    std::vector<Piece> pieces;
  };
  std::string dir_;
  nlohmann::json state_;
  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::shared_ptr<safetensors::Reader>> readers_;
};

// The run state of any checkpoint directory (the "state" of index.json, or a single-process
// checkpoint's trainer_state.json): step, seed, loader, config, options. Tensor files are not read.
nlohmann::json read_checkpoint_state(const std::string& dir);

// The whole weights of any checkpoint directory by Hugging Face name, float32, after checking its
// model config against `model`'s (hspmd eval, export).
graph::TensorMap read_checkpoint_weights(const std::string& dir, const models::Model& model);

}  // namespace hspmd::runtime
