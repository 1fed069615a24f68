// Sharded checkpoints: tensors saved by 4 "ranks" under one sharding read back bit-exactly under
// another (and whole); gaps, overlaps and corrupted shard files are refused naming the tensor or
// the file; a save that crashes before its swap leaves the previous checkpoint readable; a
// single-process checkpoint opens through the same interface.
#include "hspmd/runtime/sharded_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "hspmd/core/random.h"
#include "hspmd/kernels/slice.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/runtime/checkpoint.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

namespace fs = std::filesystem;
using sharding::Region;
using ::testing::HasSubstr;
using testing::error_of;

// The part `r` of a whole tensor.
Tensor cut(const Tensor& whole, const Region& r) {
  Tensor out = Tensor::empty(r.shape(), DType::kFloat32);
  std::vector<int64_t> zeros(r.rank(), 0);
  kernels::copy_region(whole, r.begin, out, zeros, r.shape().dims());
  return out;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kFloat32);
  fill_uniform(t, seed, -1.0, 1.0);
  return t;
}

SavedShard shard(const std::string& name, const Tensor& whole, const Region& r) {
  return {name, whole.shape(), r, cut(whole, r)};
}

class ShardedCheckpointTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    w_ = random_tensor({8, 6}, 1);
    b_ = random_tensor({6}, 2);
    m_ = random_tensor({4, 3, 2}, 3);
    s_ = random_tensor({}, 4);
  }

  // What 4 ranks hold and save (each region once, from its first holder):
  //   w [8, 6]        split 4 ways along dim 0, one quarter per rank
  //   b [6]           replicated: saved by rank 0 only
  //   w.exp_avg [4, 3, 2]  split 2 x 2 along dims 0 and 2
  //   step_scale []   a scalar, saved by rank 3
  std::vector<SavedShard> rank_shards(int rank) const {
    const Region w = Region::full(w_.shape()), m = Region::full(m_.shape());
    std::vector<SavedShard> out{shard("w", w_, w.piece(0, 4, rank)),
                                shard("w.exp_avg", m_, m.piece(0, 2, rank / 2).piece(2, 2, rank % 2))};
    if (rank == 0) out.push_back(shard("b", b_, Region::full(b_.shape())));
    if (rank == 3) out.push_back(shard("step_scale", s_, Region::full(s_.shape())));
    return out;
  }

  // The collective save, with the ranks called one after the other (the barriers are implicit).
  void save(const std::string& dir, int world, const std::function<std::vector<SavedShard>(int)>& shards_of,
            const nlohmann::json& state = {{"step", 7}}) {
    prepare_sharded_save(dir);
    for (int rank = 0; rank < world; ++rank) write_rank_shards(dir, rank, shards_of(rank));
    finish_sharded_save(dir, world, state);
  }
  void save_default(const std::string& dir) {
    save(dir, 4, [this](int r) { return rank_shards(r); });
  }

  Tensor w_, b_, m_, s_;
};

TEST_F(ShardedCheckpointTest, RegionsSavedOneWayReadBackAnotherWayBitExactly) {
  const std::string dir = path("ckpt");
  save_default(dir);
  ShardedCheckpoint c = ShardedCheckpoint::open(dir);
  EXPECT_EQ(c.state(), (nlohmann::json{{"step", 7}}));
  EXPECT_TRUE(c.contains("w"));
  EXPECT_FALSE(c.contains("w.exp_avg_sq"));
  EXPECT_EQ(c.shape("w.exp_avg"), (Shape{4, 3, 2}));

  // w: 3 column blocks (each spans all 4 saved row blocks), one box straddling 3 of them, whole.
  const Region w = Region::full(w_.shape());
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(bit_equal(c.read("w", w.piece(1, 3, k)), cut(w_, w.piece(1, 3, k)))) << k;
  const Region box{{1, 1}, {7, 5}};
  EXPECT_TRUE(bit_equal(c.read("w", box), cut(w_, box)));
  EXPECT_TRUE(bit_equal(c.read("w", w), w_));
  // The 3-d moment split along dim 1 instead, b halves, the scalar.
  const Region m = Region::full(m_.shape());
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(bit_equal(c.read("w.exp_avg", m.piece(1, 3, k)), cut(m_, m.piece(1, 3, k))));
  EXPECT_TRUE(bit_equal(c.read("w.exp_avg", m), m_));
  EXPECT_TRUE(bit_equal(c.read("b", Region{{3}, {6}}), cut(b_, Region{{3}, {6}})));
  EXPECT_TRUE(bit_equal(c.read("step_scale", Region::full(Shape{})), s_));

  // The directory holds one file per rank and the index; manifests and staging are gone.
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"index.json", "rank-00000.safetensors", "rank-00001.safetensors",
                                             "rank-00002.safetensors", "rank-00003.safetensors"}));
  EXPECT_FALSE(fs::exists(dir + ".staging"));
}

TEST_F(ShardedCheckpointTest, ARankWithNothingToSaveWritesNoFile) {
  // Ranks 4 and 5 hold replicas only.
  save(path("ckpt"), 6, [this](int r) { return r < 4 ? rank_shards(r) : std::vector<SavedShard>{}; });
  EXPECT_FALSE(fs::exists(path("ckpt/rank-00004.safetensors")));
  EXPECT_TRUE(bit_equal(ShardedCheckpoint::open(path("ckpt")).read("w", Region::full(w_.shape())), w_));
}

TEST_F(ShardedCheckpointTest, GapsAndOverlapsAreRefusedNamingTheTensorAndRegions) {
  const std::string dir = path("ckpt");
  // Rank 2 forgets its quarter of w: a gap.
  std::string e = error_of([&] {
    save(dir, 4, [this](int r) {
      std::vector<SavedShard> s = rank_shards(r);
      if (r == 2) s.erase(s.begin());
      return s;
    });
  });
  EXPECT_THAT(e, HasSubstr("tensor 'w' [8, 6] has a gap"));
  EXPECT_THAT(e, HasSubstr("cover 36 of its 48 elements"));
  // Rank 1 saves rows [1, 4) of w, overlapping rank 0's [0, 2).
  e = error_of([&] {
    save(dir, 4, [this](int r) {
      std::vector<SavedShard> s = rank_shards(r);
      if (r == 1) s[0] = shard("w", w_, Region{{1, 0}, {4, 6}});
      return s;
    });
  });
  EXPECT_THAT(e, HasSubstr("tensor 'w'"));
  EXPECT_THAT(e, HasSubstr("[0:2, 0:6] (rank-00000.safetensors) and [1:4, 0:6] (rank-00001.safetensors) overlap"));
  // Ranks disagreeing on a tensor's shape, and data that does not match its region.
  e = error_of([&] {
    save(dir, 2, [this](int r) {
      Tensor other = random_tensor({8, 7}, 5);
      return std::vector<SavedShard>{r == 0 ? shard("w", w_, Region{{0, 0}, {4, 6}})
                                            : shard("w", other, Region{{4, 0}, {8, 6}})};
    });
  });
  EXPECT_THAT(e, HasSubstr("tensor 'w': rank-00001.safetensors saves it with shape [8,7]"));
  e = error_of([&] { write_rank_shards(dir, 0, {{"w", w_.shape(), Region{{0, 0}, {4, 6}}, w_}}); });
  EXPECT_THAT(e, HasSubstr("tensor 'w' region [0:4, 0:6]: data is"));
  // None of the failed saves produced a checkpoint.
  EXPECT_FALSE(fs::exists(dir));
}

void flip_byte(const std::string& path, std::streamoff offset_from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-offset_from_end, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  f.seekp(-offset_from_end, std::ios::end);
  c = static_cast<char>(c ^ 0x10);
  f.write(&c, 1);
}

TEST_F(ShardedCheckpointTest, CorruptedOrTruncatedShardFilesAreRefusedNamingThem) {
  const std::string dir = path("ckpt");
  save_default(dir);
  const std::string file = dir + "/rank-00002.safetensors";
  flip_byte(file, 3);  // tensor data: the safetensors header still parses
  std::string e = error_of([&] { ShardedCheckpoint::open(dir); });
  EXPECT_THAT(e, HasSubstr(file));
  EXPECT_THAT(e, HasSubstr("is corrupted: CRC-32"));
  EXPECT_THAT(e, HasSubstr("index.json records"));

  fs::resize_file(file, fs::file_size(file) - 4);
  EXPECT_THAT(error_of([&] { ShardedCheckpoint::open(dir); }), HasSubstr(file + " is truncated"));
  fs::remove(file);
  EXPECT_THAT(error_of([&] { ShardedCheckpoint::open(dir); }), HasSubstr(file + " is missing"));
}

TEST_F(ShardedCheckpointTest, ACrashMidSaveLeavesThePreviousCheckpointReadable) {
  const std::string dir = path("ckpt");
  save_default(dir);
  const Tensor old_w = w_;
  // The next save crashes after two ranks wrote their new shards: no finish, staging left behind.
  w_ = random_tensor({8, 6}, 99);
  prepare_sharded_save(dir);
  write_rank_shards(dir, 0, rank_shards(0));
  write_rank_shards(dir, 1, rank_shards(1));
  ASSERT_TRUE(fs::exists(dir + ".staging"));
  EXPECT_TRUE(bit_equal(ShardedCheckpoint::open(dir).read("w", Region::full(w_.shape())), old_w));

  // The restarted job saves again from scratch: the leftovers are discarded.
  save(dir, 4, [this](int r) { return rank_shards(r); }, {{"step", 8}});
  ShardedCheckpoint c = ShardedCheckpoint::open(dir);
  EXPECT_EQ(c.state().at("step"), 8);
  EXPECT_TRUE(bit_equal(c.read("w", Region::full(w_.shape())), w_));
  EXPECT_FALSE(fs::exists(dir + ".staging"));
}

TEST_F(ShardedCheckpointTest, AnIndexWhosePiecesNoLongerTileATensorIsRefused) {
  const std::string dir = path("ckpt");
  save_default(dir);
  // Drop one of w's pieces from the index: read() would otherwise return uninitialized elements.
  nlohmann::json index = nlohmann::json::parse(std::ifstream(dir + "/index.json"));
  index["tensors"]["w"]["shards"].erase(1);
  std::ofstream(dir + "/index.json") << index.dump();
  EXPECT_THAT(error_of([&] { ShardedCheckpoint::open(dir); }), HasSubstr("tensor 'w' [8, 6] has a gap"));
}

TEST_F(ShardedCheckpointTest, ReadErrorsNameTheTensor) {
  save_default(path("ckpt"));
  ShardedCheckpoint c = ShardedCheckpoint::open(path("ckpt"));
  EXPECT_THAT(error_of([&] { c.read("nope", Region{{0}, {1}}); }), HasSubstr("has no tensor 'nope'"));
  EXPECT_THAT(error_of([&] { c.read("w", Region{{4, 0}, {9, 6}}); }),
              HasSubstr("region [4:9, 0:6] of tensor 'w' exceeds its shape [8, 6]"));
  EXPECT_THAT(error_of([&] { c.read("w", Region{{0}, {4}}); }), HasSubstr("of tensor 'w' exceeds"));
  EXPECT_THAT(error_of([&] { ShardedCheckpoint::open(path("nowhere")); }), HasSubstr("does not exist"));
  fs::create_directories(path("empty"));
  EXPECT_THAT(error_of([&] { ShardedCheckpoint::open(path("empty")); }), HasSubstr("is not a checkpoint directory"));
}

TEST_F(ShardedCheckpointTest, OpensASingleProcessCheckpoint) {
  const models::LlamaConfig config = testing::tiny_config();
  Checkpoint saved;
  uint64_t seed = 10;
  for (const models::LlamaParam& p : models::llama_parameters(config)) {
    saved.model.emplace(p.name, random_tensor(p.shape, seed++));
    saved.exp_avg.emplace(p.name, random_tensor(p.shape, seed++));
    saved.exp_avg_sq.emplace(p.name, random_tensor(p.shape, seed++));
  }
  saved.state.step = 3;
  saved.state.seed = 1;
  saved.state.config = nlohmann::json::parse(config.to_json_text());
  saved.state.options = nlohmann::json::object();
  save_checkpoint(path("single"), saved, models::Llama(config));

  ShardedCheckpoint c = ShardedCheckpoint::open(path("single"));
  EXPECT_EQ(c.state().at("step"), 3);
  EXPECT_EQ(c.state().at("format"), "hspmd-checkpoint-v1");
  for (const models::LlamaParam& p : models::llama_parameters(config)) {
    ASSERT_EQ(c.shape(p.name), p.shape) << p.name;
    // Each tensor read as the second of two halves along its last dim, as a 2-way split would.
    const Region half = Region::full(p.shape).piece(p.shape.rank() - 1, 2, 1);
    EXPECT_TRUE(bit_equal(c.read(p.name, half), cut(saved.model.at(p.name), half))) << p.name;
    EXPECT_TRUE(bit_equal(c.read(p.name + ".exp_avg", half), cut(saved.exp_avg.at(p.name), half))) << p.name;
    EXPECT_TRUE(bit_equal(c.read(p.name + ".exp_avg_sq", half), cut(saved.exp_avg_sq.at(p.name), half))) << p.name;
  }
  // Integrity is verified as load_checkpoint does.
  flip_byte(path("single") + "/" + kModelFile, 5);
  EXPECT_THAT(error_of([&] { ShardedCheckpoint::open(path("single")); }),
              HasSubstr(path("single") + "/" + kModelFile + " is corrupted"));
}

}  // namespace
}  // namespace hspmd::runtime
