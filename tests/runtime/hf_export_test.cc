// Export of a checkpoint to Hugging Face's save_pretrained layout, and reading Hugging Face weights
// slice by slice (runtime/hf_weights.h): a trained checkpoint exported whole and sharded reads back
// bit-exactly, and an existing directory is never overwritten.
#include "hspmd/runtime/hf_export.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "hspmd/data/token_dataset.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/runtime/checkpoint.h"
#include "hspmd/runtime/hf_weights.h"
#include "hspmd/runtime/sharded_checkpoint.h"
#include "hspmd/runtime/trainer.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class HfExportTest : public testing::TempDirTest {
 protected:
  // A checkpoint after two steps, so the weights are not the initial ones.
  graph::TensorMap trained(const std::string& dir) {
    data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
    Trainer t(models::llama(testing::tiny_config()), ds, testing::tiny_options(2));
    while (!t.done()) t.step();
    t.save(dir);
    graph::TensorMap copy;
    for (const auto& [name, w] : t.parameters()) copy.emplace(name, w.clone());
    return copy;
  }
};

TEST_F(HfExportTest, OneFileOrShardsReadBackBitExactly) {
  const graph::TensorMap weights = trained(path("ckpt"));
  EXPECT_THAT(export_to_hf(path("ckpt"), path("hf")), ElementsAre("config.json", "model.safetensors"));
  // Small shards: every file holds consecutive weights, the index maps each weight to its file.
  const std::vector<std::string> files = export_to_hf(path("ckpt"), path("sharded"), {.max_shard_bytes = 40'000});
  ASSERT_GT(files.size(), 3u);
  EXPECT_EQ(files.back(), "model.safetensors.index.json");
  const nlohmann::json index = nlohmann::json::parse(std::ifstream(path("sharded/model.safetensors.index.json")));
  EXPECT_EQ(index.at("weight_map").size(), weights.size());
  int64_t total = 0;
  for (const auto& [name, w] : weights) total += static_cast<int64_t>(w.nbytes());
  EXPECT_EQ(index.at("metadata").at("total_size").get<int64_t>(), total);

  const models::LlamaConfig config = models::LlamaConfig::from_file(path("hf/config.json"));
  EXPECT_EQ(config.to_json_text(), testing::tiny_config().to_json_text());
  for (const std::string& dir : {path("hf"), path("sharded")}) {
    const HfWeights back(dir, models::Llama(config));
    for (const auto& [name, w] : weights) {
      EXPECT_EQ(back.read(name, sharding::Region::full(w.shape())).to_vector<float>(), w.to_vector<float>())
          << dir << " " << name;
    }
  }
  // A slice reads only its rows and columns.
  const HfWeights back(path("sharded"), models::Llama(config));
  const Tensor& q = weights.at("model.layers.1.self_attn.q_proj.weight");
  const Tensor part = back.read("model.layers.1.self_attn.q_proj.weight", {{4, 8}, {12, 24}});
  for (int64_t r = 0; r < 8; ++r) {
    for (int64_t c = 0; c < 16; ++c) {
      EXPECT_EQ(part.data<float>()[r * 16 + c], q.data<float>()[(4 + r) * q.shape()[1] + 8 + c]);
    }
  }
}

TEST_F(HfExportTest, ExistingDirectoryIsRefusedAndBadIndexNamed) {
  trained(path("ckpt"));
  std::filesystem::create_directories(path("taken"));
  EXPECT_THAT(testing::error_of([&] { export_to_hf(path("ckpt"), path("taken")); }), HasSubstr("already exists"));
  export_to_hf(path("ckpt"), path("sharded"), {.max_shard_bytes = 40'000});
  const nlohmann::json index = nlohmann::json::parse(std::ifstream(path("sharded/model.safetensors.index.json")));
  nlohmann::json bad = index;
  bad["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
  std::ofstream(path("sharded/model.safetensors.index.json")) << bad.dump();
  EXPECT_THAT(testing::error_of([&] { HfWeights(path("sharded"), models::Llama(testing::tiny_config())); }),
              HasSubstr("weight_map[\"model.norm.weight\"]"));
}

}  // namespace
}  // namespace hspmd::runtime
