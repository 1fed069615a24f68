#include "hspmd/runtime/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "hspmd/core/atomic_file.h"
#include "hspmd/core/error.h"
#include "hspmd/core/safetensors.h"
#include "hspmd/runtime/hf_weights.h"

namespace hspmd::runtime {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "hspmd-checkpoint-v1";

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

// Size and CRC-32 of a whole file, read in 1 MiB blocks.
std::pair<uint64_t, uint32_t> digest_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HSPMD_CHECK(in.good()) << "checkpoint file " << path << " is missing or unreadable";
  std::vector<char> block(1 << 20);
  uint64_t bytes = 0;
  uint32_t crc = 0;
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    std::streamsize n = in.gcount();
    crc = crc32(block.data(), static_cast<size_t>(n), crc);
    bytes += static_cast<uint64_t>(n);
  }
  return {bytes, crc};
}

std::string hex32(uint32_t v) {
  std::ostringstream s;
  s << std::hex << std::setw(8) << std::setfill('0') << v;
  return s.str();
}

// The tensors of one safetensors file in a fixed order: checks that every expected name is there
// with its shape and that the map holds nothing else.
std::vector<std::pair<std::string, Tensor>> ordered(const graph::TensorMap& tensors,
                                                    const std::vector<std::pair<std::string, Shape>>& expected,
                                                    const std::string& what) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, shape] : expected) {
    auto it = tensors.find(name);
    HSPMD_CHECK(it != tensors.end()) << "cannot save checkpoint: " << what << " has no tensor '" << name << "'";
    HSPMD_CHECK(it->second.shape() == shape && it->second.dtype() == DType::kFloat32)
        << "cannot save checkpoint: " << what << " tensor '" << name << "' is " << it->second.to_string()
        << ", expected float32" << shape.to_string();
    out.emplace_back(name, it->second);
  }
  HSPMD_CHECK(out.size() == tensors.size()) << "cannot save checkpoint: " << what << " holds " << tensors.size()
                                            << " tensors, the model has " << out.size();
  return out;
}

std::vector<std::pair<std::string, Shape>> optimizer_tensors(const models::Model& model) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const models::ParamSpec& p : model.parameters()) {
    out.emplace_back(p.name + ".exp_avg", p.shape);
    out.emplace_back(p.name + ".exp_avg_sq", p.shape);
  }
  return out;
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Reads every expected tensor of a safetensors file, refusing missing, extra, mis-shaped and
// non-float32 ones (errors name the file and the tensor).
graph::TensorMap read_exact(const std::string& path, const std::vector<std::pair<std::string, Shape>>& expected) {
  safetensors::Reader reader(path);
  std::set<std::string> wanted;
  graph::TensorMap out;
  for (const auto& [name, shape] : expected) {
    wanted.insert(name);
    HSPMD_CHECK(reader.contains(name)) << path << ": tensor '" << name << "' is missing";
    const safetensors::TensorInfo& info = reader.info(name);
    HSPMD_CHECK(info.shape == shape) << path << ": tensor '" << name << "' has shape " << info.shape.to_string()
                                     << ", the model expects " << shape.to_string();
    HSPMD_CHECK(info.dtype == DType::kFloat32)
        << path << ": tensor '" << name << "' is " << dtype_name(info.dtype) << ", checkpoints hold float32";
    out.emplace(name, reader.read(name));
  }
  for (const safetensors::TensorInfo& info : reader.tensors()) {
    HSPMD_CHECK(wanted.count(info.name)) << path << ": unexpected tensor '" << info.name
                                         << "' (the checkpoint is for another model)";
  }
  return out;
}

}  // namespace

uint32_t crc32(const void* data, size_t length, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < length; ++i) crc = table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

std::string checkpoint_dir_path(const std::string& dir) {
  HSPMD_CHECK(!dir.empty()) << "checkpoint directory is empty";
  fs::path p = fs::absolute(fs::path(dir)).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "ckpt/" -> "ckpt"
  return p.string();
}

nlohmann::json file_digest(const std::string& path) {
  auto [bytes, crc] = digest_of(path);
  return {{"bytes", bytes}, {"crc32", hex32(crc)}};
}

void verify_file_digest(const std::string& path, const nlohmann::json& recorded, const std::string& source) {
  const std::string source_name = fs::path(source).filename().string();
  uint64_t want_bytes = 0;
  std::string want_crc;
  try {
    want_bytes = recorded.at("bytes").get<uint64_t>();
    want_crc = recorded.at("crc32").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    HSPMD_THROW() << source << ": malformed entry for " << fs::path(path).filename().string() << ": " << e.what();
  }
  auto [bytes, crc] = digest_of(path);
  HSPMD_CHECK(bytes == want_bytes) << "checkpoint file " << path << " is truncated or altered: " << bytes << " bytes, "
                                   << source_name << " records " << want_bytes;
  HSPMD_CHECK(hex32(crc) == want_crc) << "checkpoint file " << path << " is corrupted: CRC-32 " << hex32(crc) << ", "
                                      << source_name << " records " << want_crc;
}

void swap_in_directory(const std::string& staged, const std::string& dir) {
  fsync_path(staged);
  // With an old checkpoint present, RENAME_EXCHANGE makes the swap a single atomic step; the old
  // one then sits under the staged name and is removed.
  if (fs::exists(dir)) {
    HSPMD_CHECK(fs::is_directory(dir)) << "checkpoint path " << dir << " is not a directory";
    HSPMD_CHECK(::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0)
        << "cannot swap " << staged << " with " << dir << ": " << std::strerror(errno);
  } else {
    HSPMD_CHECK(::rename(staged.c_str(), dir.c_str()) == 0)
        << "cannot rename " << staged << " to " << dir << ": " << std::strerror(errno);
  }
  fsync_path(fs::path(dir).parent_path().string());
  std::error_code ignored;
  fs::remove_all(staged, ignored);  // the previous checkpoint, after an exchange
}

nlohmann::json read_trainer_state(const std::string& dir) {
  HSPMD_CHECK(fs::is_directory(dir)) << "checkpoint directory " << dir
                                     << (fs::exists(dir) ? " is a file, not a checkpoint (a directory written by "
                                                           "`hspmd train --save`)"
                                                         : " does not exist");
  const std::string state_path = dir + "/" + kTrainerStateFile;
  std::ifstream in(state_path);
  HSPMD_CHECK(in.good()) << "checkpoint file " << state_path << " is missing or unreadable";
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
    HSPMD_CHECK(j.is_object() && j.value("format", std::string()) == kFormat)
        << state_path << ": not an hspmd checkpoint (\"format\" is not \"" << kFormat << "\")";
  } catch (const nlohmann::json::exception& e) {
    HSPMD_THROW() << state_path << ": malformed trainer state (truncated or corrupted?): " << e.what();
  }
  // Verify sizes and checksums before any tensor is parsed, so truncation and bit flips are named as such.
  for (const char* file : {kModelFile, kOptimizerFile}) {
    HSPMD_CHECK(j.contains("files") && j["files"].is_object() && j["files"].contains(file))
        << state_path << ": no entry for " << file;
    verify_file_digest(dir + "/" + file, j["files"][file], state_path);
  }
  return j;
}

void save_checkpoint(const std::string& dir, const Checkpoint& c, const models::Model& m) {
  HSPMD_CHECK(!dir.empty()) << "checkpoint directory is empty";
  check_same_config(c.state.config, m, "the checkpoint to save");
  const nlohmann::json config = m.config_json();
  auto model = ordered(c.model, models::parameter_shapes(m), "model");
  // m and v live in one file, under "<param>.exp_avg" / "<param>.exp_avg_sq".
  graph::TensorMap opt;
  for (const auto& [name, t] : c.exp_avg) opt.emplace(name + ".exp_avg", t);
  for (const auto& [name, t] : c.exp_avg_sq) opt.emplace(name + ".exp_avg_sq", t);
  auto optimizer = ordered(opt, optimizer_tensors(m), "optimizer state");

  const std::string final_dir = checkpoint_dir_path(dir);
  fs::create_directories(fs::path(final_dir).parent_path());
  const std::string tmp = final_dir + ".tmp." + std::to_string(::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    safetensors::save(tmp + "/" + kModelFile, model, {{"format", "pt"}});
    safetensors::save(tmp + "/" + kOptimizerFile, optimizer, {{"step", std::to_string(c.state.step)}});
    nlohmann::json files;
    for (const char* file : {kModelFile, kOptimizerFile}) files[file] = file_digest(tmp + "/" + file);
    nlohmann::json state = {{"format", kFormat},
                            {"step", c.state.step},
                            {"seed", c.state.seed},
                            {"loader", nlohmann::json::parse(c.state.loader.to_json())},
                            {"config", config},
                            {"options", c.state.options},
                            {"files", files}};
    std::string text = state.dump(2) + "\n";
    AtomicFile out(tmp + "/" + kTrainerStateFile);
    out.write(text.data(), text.size());
    out.commit();
    swap_in_directory(tmp, final_dir);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
}

void check_same_config(const nlohmann::json& recorded, const models::Model& model, const std::string& source) {
  HSPMD_CHECK(recorded.is_object()) << source << ": the checkpoint records no model config";
  // Both sides in today's spelling, so a checkpoint written with older key names still compares.
  const nlohmann::json saved = model.canonical_config(recorded, source);
  const nlohmann::json run = model.config_json();
  for (const auto& [key, value] : run.items()) {
    HSPMD_CHECK(saved.contains(key) && saved.at(key) == value)
        << "cannot resume from " << source << ": its model config has \"" << key
        << "\": " << (saved.contains(key) ? saved.at(key).dump() : std::string("nothing")) << ", the run's (--model) has "
        << value.dump();
  }
  for (const auto& [key, value] : saved.items()) {
    HSPMD_CHECK(run.contains(key)) << "cannot resume from " << source << ": its model config has \"" << key
                                   << "\": " << value.dump() << ", which the run's (--model) does not set";
  }
}

Checkpoint load_checkpoint(const std::string& dir, const models::Model& model) {
  const nlohmann::json j = read_trainer_state(dir);  // format, sizes and checksums verified
  const std::string state_path = dir + "/" + kTrainerStateFile;
  Checkpoint c;
  try {
    c.state.step = j.at("step").get<int64_t>();
    c.state.seed = j.at("seed").get<uint64_t>();
    c.state.loader = data::LoaderState::from_json(j.at("loader").dump());
    c.state.config = model.canonical_config(j.at("config"), state_path);
    c.state.options = j.at("options");
  } catch (const nlohmann::json::exception& e) {
    HSPMD_THROW() << state_path << ": malformed trainer state (truncated or corrupted?): " << e.what();
  }
  check_same_config(j.at("config"), model, dir);

  c.model = read_exact(dir + "/" + kModelFile, models::parameter_shapes(model));
  graph::TensorMap opt = read_exact(dir + "/" + kOptimizerFile, optimizer_tensors(model));
  for (const models::ParamSpec& p : model.parameters()) {
    c.exp_avg.emplace(p.name, opt.at(p.name + ".exp_avg"));
    c.exp_avg_sq.emplace(p.name, opt.at(p.name + ".exp_avg_sq"));
  }
  return c;
}

graph::TensorMap load_hf_weights(const std::string& path, const models::Model& model) {
  const HfWeights weights(path, model);
  graph::TensorMap out;
  for (const models::ParamSpec& p : model.parameters()) {
    out.emplace(p.name, weights.read(p.name, sharding::Region::full(p.shape)));
  }
  return out;
}

}  // namespace hspmd::runtime
