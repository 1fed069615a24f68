#include "hspmd/runtime/sharded_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>
#include <utility>

#include "hspmd/core/atomic_file.h"
#include "hspmd/core/error.h"
#include "hspmd/core/json_file.h"
#include "hspmd/kernels/slice.h"
#include "hspmd/runtime/checkpoint.h"

namespace hspmd::runtime {
namespace {

namespace fs = std::filesystem;
using sharding::Region;

constexpr const char* kFormat = "hspmd-sharded-checkpoint-v1";
constexpr const char* kManifestFormat = "hspmd-rank-manifest-v1";
constexpr const char* kIndexFile = "index.json";

std::string staging_dir(const std::string& dir) { return checkpoint_dir_path(dir) + ".staging"; }

std::string rank_file(int rank, const char* extension) {
  char name[64];
  std::snprintf(name, sizeof(name), "rank-%05d.%s", rank, extension);
  return name;
}

nlohmann::json region_json(const Region& r) {
  nlohmann::json out = nlohmann::json::array();
  for (int d = 0; d < r.rank(); ++d) out.push_back({r.begin[d], r.end[d]});
  return out;
}

// A region of a tensor of `shape` from its JSON form [[b0, e0], [b1, e1], ...]; `where` names the
// entry in errors.
Region parse_region(const nlohmann::json& j, const Shape& shape, const std::string& where) {
  Region r;
  try {
    HSPMD_CHECK(j.is_array() && static_cast<int>(j.size()) == shape.rank())
        << where << ": region " << j.dump() << " does not have one [begin, end] per dim of " << shape.to_string();
    for (int d = 0; d < shape.rank(); ++d) {
      const nlohmann::json& dim = j.at(d);
      HSPMD_CHECK(dim.is_array() && dim.size() == 2) << where << ": region " << j.dump() << " is malformed";
      r.begin.push_back(dim.at(0).get<int64_t>());
      r.end.push_back(dim.at(1).get<int64_t>());
      HSPMD_CHECK(0 <= r.begin[d] && r.begin[d] <= r.end[d] && r.end[d] <= shape[d])
          << where << ": region " << j.dump() << " exceeds shape " << shape.to_string();
    }
  } catch (const nlohmann::json::exception& e) {
    HSPMD_THROW() << where << ": malformed region " << j.dump() << ": " << e.what();
  }
  return r;
}

Shape parse_shape(const nlohmann::json& j, const std::string& where) {
  try {
    std::vector<int64_t> dims = j.get<std::vector<int64_t>>();
    for (int64_t d : dims) HSPMD_CHECK(d >= 0) << where << ": negative dimension in shape " << j.dump();
    return Shape(std::move(dims));
  } catch (const nlohmann::json::exception& e) {
    HSPMD_THROW() << where << ": malformed shape " << j.dump() << ": " << e.what();
  }
}

// One tensor of the index: its shape and where each saved piece of it lives.
struct PieceRef {
  std::string file;
  std::string key;
  Region region;
};
struct TensorIndex {
  Shape shape;
  std::vector<PieceRef> pieces;
};

// Whether r is a region of a tensor of `shape`: one well-ordered interval per dim, inside it.
bool is_region_of(const Region& r, const Shape& shape) {
  if (r.rank() != shape.rank() || r.end.size() != r.begin.size()) return false;
  for (int d = 0; d < r.rank(); ++d) {
    if (r.begin[d] < 0 || r.begin[d] > r.end[d] || r.end[d] > shape[d]) return false;
  }
  return true;
}

std::string describe(const PieceRef& p) { return p.region.to_string() + " (" + p.file + ")"; }

// The saved pieces of a tensor must tile it exactly: pairwise disjoint, and (then) covering it iff
// their element counts add up to its own. Checked when saving, and again when loading so that an
// edited index cannot make read() return uninitialized elements.
void check_tiling(const std::string& name, const TensorIndex& t, const std::string& where) {
  for (size_t i = 0; i < t.pieces.size(); ++i) {
    for (size_t k = i + 1; k < t.pieces.size(); ++k) {
      HSPMD_CHECK(!t.pieces[i].region.intersect(t.pieces[k].region))
          << where << ": tensor '" << name << "' " << t.shape.to_string() << ": saved regions "
          << describe(t.pieces[i]) << " and " << describe(t.pieces[k])
          << " overlap (save each region once, e.g. from its first holder)";
    }
  }
  int64_t covered = 0;
  for (const PieceRef& p : t.pieces) covered += p.region.numel();
  if (covered == t.shape.numel()) return;
  std::ostringstream saved;
  for (size_t i = 0; i < t.pieces.size(); ++i) saved << (i ? ", " : "") << describe(t.pieces[i]);
  HSPMD_THROW() << where << ": tensor '" << name << "' " << t.shape.to_string()
                << " has a gap: the saved regions cover "
                << covered << " of its " << t.shape.numel() << " elements; saved: " << saved.str();
}

// Parses the "tensors" object of an index (or of the manifests, assembled) and checks every tensor's
// tiling; every piece must name a file in `files`.
std::map<std::string, TensorIndex> parse_tensors(const nlohmann::json& tensors, const std::set<std::string>& files,
                                                 const std::string& where) {
  HSPMD_CHECK(tensors.is_object()) << where << ": \"tensors\" is not an object";
  std::map<std::string, TensorIndex> out;
  for (const auto& [name, entry] : tensors.items()) {
    const std::string at = where + ": tensor '" + name + "'";
    TensorIndex t;
    t.shape = parse_shape(json_member(entry, "shape", at), at);
    const nlohmann::json& shards = json_member(entry, "shards", at);
    HSPMD_CHECK(shards.is_array()) << at << ": \"shards\" is not an array";
    for (const nlohmann::json& s : shards) {
      PieceRef p;
      try {
        p.file = json_member(s, "file", at).get<std::string>();
        p.key = json_member(s, "key", at).get<std::string>();
      } catch (const nlohmann::json::exception& e) {
        HSPMD_THROW() << at << ": malformed shard " << s.dump() << ": " << e.what();
      }
      HSPMD_CHECK(files.count(p.file)) << at << ": shard file " << p.file << " is not listed in \"files\"";
      p.region = parse_region(json_member(s, "region", at), t.shape, at);
      t.pieces.push_back(std::move(p));
    }
    check_tiling(name, t, where);
    out.emplace(name, std::move(t));
  }
  return out;
}

// Adds one rank's manifest to the index being built: its file's digest to `files` (after checking
// that the file is still the one the rank checksummed) and its shards to `tensors`.
void add_manifest(const std::string& manifest_path, const std::string& file_path, nlohmann::json& tensors,
                  nlohmann::json& files) {
  const std::string file = fs::path(file_path).filename().string();
  try {
    const nlohmann::json m = parse_json_object(read_text_file(manifest_path, "rank manifest"), manifest_path);
    HSPMD_CHECK(m.value("format", std::string()) == kManifestFormat && m.value("file", std::string()) == file)
        << manifest_path << ": not a manifest of " << file;
    const nlohmann::json& digest = json_member(m, "digest", manifest_path);
    verify_file_digest(file_path, digest, manifest_path);
    files[file] = digest;
    for (const nlohmann::json& s : json_member(m, "shards", manifest_path)) {
      const std::string name = json_member(s, "name", manifest_path).get<std::string>();
      const nlohmann::json& shape = json_member(s, "shape", manifest_path);
      nlohmann::json& t = tensors[name];
      if (t.is_null()) t = {{"shape", shape}, {"shards", nlohmann::json::array()}};
      HSPMD_CHECK(t["shape"] == shape) << "tensor '" << name << "': " << file << " saves it with shape "
                                       << shape.dump() << ", an earlier rank with " << t["shape"].dump();
      t["shards"].push_back({{"file", file},
                             {"key", json_member(s, "key", manifest_path)},
                             {"region", json_member(s, "region", manifest_path)}});
    }
  } catch (const nlohmann::json::exception& e) {
    HSPMD_THROW() << manifest_path << ": malformed manifest: " << e.what();
  }
}

void write_json(const std::string& path, const nlohmann::json& j) {
  const std::string text = j.dump(2) + "\n";
  AtomicFile out(path);
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace

void prepare_sharded_save(const std::string& dir) {
  const std::string staging = staging_dir(dir);
  // A staging dir left behind is a save that crashed before its swap: the checkpoint under `dir` is
  // still the previous complete one, and the leftovers are discarded.
  fs::remove_all(staging);
  fs::create_directories(staging);
}

void write_rank_shards(const std::string& dir, int rank, const std::vector<SavedShard>& shards) {
  HSPMD_CHECK(rank >= 0) << "write_rank_shards: rank " << rank << " is negative";
  if (shards.empty()) return;  // a rank holding only duplicates of others' regions
  const std::string staging = staging_dir(dir);
  HSPMD_CHECK(fs::is_directory(staging)) << "rank " << rank << ": staging directory " << staging
                                         << " does not exist (prepare_sharded_save must run on rank 0 first, "
                                            "followed by a barrier)";
  const std::string file = rank_file(rank, "safetensors");
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::set<std::string> keys;
  nlohmann::json listed = nlohmann::json::array();
  for (const SavedShard& s : shards) {
    HSPMD_CHECK(!s.name.empty()) << "rank " << rank << ": a saved shard has an empty tensor name";
    HSPMD_CHECK(is_region_of(s.region, s.global_shape))
        << "rank " << rank << ": tensor '" << s.name << "': region " << s.region.to_string() << " is not inside shape "
        << s.global_shape.to_string();
    HSPMD_CHECK(s.data.dtype() == DType::kFloat32 && s.data.shape() == s.region.shape())
        << "rank " << rank << ": tensor '" << s.name << "' region " << s.region.to_string() << ": data is "
        << s.data.to_string() << ", expected float32" << s.region.shape().to_string();
    const std::string key = s.name + "@" + s.region.to_string();
    HSPMD_CHECK(keys.insert(key).second) << "rank " << rank << ": tensor '" << s.name << "' region "
                                         << s.region.to_string() << " is saved twice";
    tensors.emplace_back(key, s.data);
    listed.push_back({{"name", s.name},
                      {"key", key},
                      {"shape", s.global_shape.dims()},
                      {"region", region_json(s.region)}});
  }
  safetensors::save(staging + "/" + file, tensors, {{"format", "pt"}});
  // Each rank checksums its own file (in parallel with the others) right after writing it; the
  // manifest is written last, so its presence says the rank's file is complete.
  write_json(staging + "/" + rank_file(rank, "json"), {{"format", kManifestFormat},
                                                      {"rank", rank},
                                                      {"file", file},
                                                      {"digest", file_digest(staging + "/" + file)},
                                                      {"shards", listed}});
}

void finish_sharded_save(const std::string& dir, int world_size, const nlohmann::json& state) {
  HSPMD_CHECK(world_size > 0) << "finish_sharded_save: world_size " << world_size << " is not positive";
  const std::string staging = staging_dir(dir);
  HSPMD_CHECK(fs::is_directory(staging)) << "finish_sharded_save: staging directory " << staging
                                         << " does not exist (was prepare_sharded_save called?)";
  // A manifest of a rank outside the world means the ranks disagree on the world size.
  for (const fs::directory_entry& e : fs::directory_iterator(staging)) {
    const std::string n = e.path().filename().string();
    int r = -1;
    char tail[8] = {};
    if (std::sscanf(n.c_str(), "rank-%d.%7s", &r, tail) == 2 && std::string(tail) == "json") {
      HSPMD_CHECK(r >= 0 && r < world_size) << staging << ": manifest " << n << " was written by rank " << r
                                            << ", but the world size is " << world_size;
    }
  }

  nlohmann::json tensors = nlohmann::json::object();
  nlohmann::json files = nlohmann::json::object();
  std::vector<std::string> manifests;
  for (int rank = 0; rank < world_size; ++rank) {
    const std::string manifest_path = staging + "/" + rank_file(rank, "json");
    const std::string file = rank_file(rank, "safetensors");
    if (!fs::exists(manifest_path)) {
      HSPMD_CHECK(!fs::exists(staging + "/" + file))
          << staging << ": rank " << rank << " wrote " << file << " but no manifest (did it crash while saving?)";
      continue;  // the rank had nothing to save
    }
    manifests.push_back(manifest_path);
    add_manifest(manifest_path, staging + "/" + file, tensors, files);
  }
  std::set<std::string> file_names;
  for (const auto& [file, digest] : files.items()) file_names.insert(file);
  // The same parser open() uses: what is written here is what a load will accept.
  parse_tensors(tensors, file_names, "sharded checkpoint " + checkpoint_dir_path(dir));

  write_json(staging + "/" + kIndexFile,
             {{"format", kFormat},
              {"world_size", world_size},
              {"tensors", tensors},
              {"files", files},
              {"state", state}});
  // index.json is the only manifest of a finished checkpoint.
  for (const std::string& m : manifests) fs::remove(m);
  swap_in_directory(staging, checkpoint_dir_path(dir));
}

ShardedCheckpoint ShardedCheckpoint::open(const std::string& dir) {
  HSPMD_CHECK(fs::is_directory(dir)) << "checkpoint directory " << dir
                                     << (fs::exists(dir) ? " is a file, not a checkpoint (a directory written by "
                                                           "`hspmd train --save`)"
                                                         : " does not exist");
  ShardedCheckpoint c;
  c.dir_ = dir;
  std::map<std::string, TensorIndex> tensors;
  const std::string index_path = dir + "/" + kIndexFile;
  if (fs::exists(index_path)) {
    const nlohmann::json index = parse_json_object(read_text_file(index_path, "checkpoint index"), index_path);
    HSPMD_CHECK(index.value("format", std::string()) == kFormat)
        << index_path << ": not an hspmd sharded checkpoint (\"format\" is not \"" << kFormat << "\")";
    const nlohmann::json& files = json_member(index, "files", index_path);
    HSPMD_CHECK(files.is_object()) << index_path << ": \"files\" is not an object";
    std::set<std::string> names;
    for (const auto& [file, digest] : files.items()) {
      HSPMD_CHECK(fs::path(file).filename().string() == file && file != "." && file != "..")
          << index_path << ": file name " << file << " is not a plain name in the checkpoint directory";
      verify_file_digest(dir + "/" + file, digest, index_path);
      names.insert(file);
    }
    tensors = parse_tensors(json_member(index, "tensors", index_path), names, index_path);
    c.state_ = json_member(index, "state", index_path);
  } else if (fs::exists(dir + "/" + kTrainerStateFile)) {
    // A single-process checkpoint: every tensor whole, in one of two files.
    c.state_ = read_trainer_state(dir);
    for (const char* file : {kModelFile, kOptimizerFile}) {
      auto reader = std::make_shared<safetensors::Reader>(dir + "/" + file);
      c.readers_[file] = reader;
      for (const safetensors::TensorInfo& info : reader->tensors()) {
        HSPMD_CHECK(!tensors.count(info.name)) << dir << ": tensor '" << info.name << "' is in both " << kModelFile
                                               << " and " << kOptimizerFile;
        tensors[info.name] = {info.shape, {{file, info.name, Region::full(info.shape)}}};
      }
    }
  } else {
    HSPMD_THROW() << dir << " is not a checkpoint directory: it has neither " << kIndexFile << " (sharded) nor "
                  << kTrainerStateFile << " (single-process)";
  }

  for (auto& [name, t] : tensors) {
    Entry e{t.shape, {}};
    for (PieceRef& p : t.pieces) {
      auto& reader = c.readers_[p.file];
      if (!reader) reader = std::make_shared<safetensors::Reader>(dir + "/" + p.file);
      HSPMD_CHECK(reader->contains(p.key)) << reader->path() << ": tensor '" << p.key << "' is missing";
      const safetensors::TensorInfo& info = reader->info(p.key);
      HSPMD_CHECK(info.dtype == DType::kFloat32 && info.shape == p.region.shape())
          << reader->path() << ": tensor '" << p.key << "' is " << dtype_name(info.dtype) << info.shape.to_string()
          << ", the index expects float32" << p.region.shape().to_string();
      e.pieces.push_back({std::move(p.file), std::move(p.key), std::move(p.region)});
    }
    c.tensors_.emplace(name, std::move(e));
  }
  return c;
}

const Shape& ShardedCheckpoint::shape(const std::string& name) const {
  auto it = tensors_.find(name);
  HSPMD_CHECK(it != tensors_.end()) << "checkpoint " << dir_ << " has no tensor '" << name << "'";
  return it->second.shape;
}

Tensor ShardedCheckpoint::read(const std::string& name, const Region& region) const {
  const Shape& full_shape = shape(name);
  const Entry& e = tensors_.at(name);
  HSPMD_CHECK(is_region_of(region, full_shape))
      << "checkpoint " << dir_ << ": region " << region.to_string() << " of tensor '" << name
      << "' exceeds its shape " << full_shape.to_string();

  Tensor out = Tensor::empty(region.shape(), DType::kFloat32);
  int64_t covered = 0;
  for (const Piece& p : e.pieces) {
    std::optional<Region> overlap = p.region.intersect(region);
    if (!overlap) continue;
    const safetensors::Reader& reader = *readers_.at(p.file);
    // Read only the rows of the piece the overlap spans (all of a scalar).
    std::vector<int64_t> src_start(overlap->rank()), dst_start(overlap->rank());
    Tensor piece;
    if (overlap->rank() == 0) {
      piece = reader.read(p.key);
    } else {
      piece = reader.read_rows(p.key, overlap->begin[0] - p.region.begin[0], overlap->extent(0));
    }
    for (int d = 0; d < overlap->rank(); ++d) {
      src_start[d] = d == 0 ? 0 : overlap->begin[d] - p.region.begin[d];
      dst_start[d] = overlap->begin[d] - region.begin[d];
    }
    kernels::copy_region(piece, src_start, out, dst_start, overlap->shape().dims());
    covered += overlap->numel();
  }
  // The pieces are disjoint (checked at open), so counting elements proves full coverage.
  HSPMD_CHECK(covered == region.numel()) << "checkpoint " << dir_ << ": region " << region.to_string() << " of tensor '"
                                         << name << "' is covered by saved shards for only " << covered << " of "
                                         << region.numel() << " elements";
  return out;
}

nlohmann::json read_checkpoint_state(const std::string& dir) {
  const std::string index_path = dir + "/" + kIndexFile;
  if (!fs::exists(index_path)) return ShardedCheckpoint::open(dir).state();  // single-process, or an error
  const nlohmann::json index = parse_json_object(read_text_file(index_path, "checkpoint index"), index_path);
  return json_member(index, "state", index_path);
}

graph::TensorMap read_checkpoint_weights(const std::string& dir, const models::LlamaConfig& config) {
  const ShardedCheckpoint c = ShardedCheckpoint::open(dir);
  check_same_config(json_member(c.state(), "config", dir), config, dir);
  graph::TensorMap weights;
  for (const models::LlamaParam& p : models::llama_parameters(config)) {
    weights.emplace(p.name, c.read(p.name, Region::full(p.shape)));
  }
  return weights;
}

}  // namespace hspmd::runtime
