// Checkpoints: save -> resume reproduces the uninterrupted run's losses exactly; truncated,
// corrupted and mismatched checkpoints are refused with errors naming the file and tensor;
// Hugging Face weights (BF16, extra buffers) load and training continues from them.
#include "hspmd/runtime/checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "hspmd/core/safetensors.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/kernels/cast.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/runtime/trainer.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

namespace fs = std::filesystem;
using testing::corpus_dataset;
using testing::error_of;
using testing::tiny_config;
using testing::tiny_options;

class CheckpointTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    ds_ = std::make_unique<data::TokenDataset>(data::TokenDataset::open(corpus_dataset()));
  }
  // Trains `steps` steps of a run scheduled for `total` and saves it to dir.
  std::vector<double> train_and_save(int64_t steps, int64_t total, const std::string& dir) {
    TrainerOptions o = tiny_options(steps);
    o.decay_steps = total;
    Trainer t(models::llama(tiny_config()), *ds_, o);
    std::vector<double> losses;
    while (!t.done()) losses.push_back(t.step().loss);
    save_checkpoint(dir, t.checkpoint(), t.model());
    return losses;
  }
  std::unique_ptr<data::TokenDataset> ds_;
};

void flip_byte(const std::string& path, uint64_t offset_from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-static_cast<std::streamoff>(offset_from_end), std::ios::end);
  char c = 0;
  f.read(&c, 1);
  f.seekp(-static_cast<std::streamoff>(offset_from_end), std::ios::end);
  c = static_cast<char>(c ^ 0x10);
  f.write(&c, 1);
}

TEST(Crc32, MatchesTheStandardCheckValue) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  // Continuing a running CRC equals one pass.
  EXPECT_EQ(crc32("6789", 4, crc32("12345", 5)), 0xCBF43926u);
}

TEST_F(CheckpointTest, ResumeReproducesTheUninterruptedRunExactly) {
  // Uninterrupted: 12 steps. Interrupted: 5 steps on the same 12-step schedule, then resumed.
  TrainerOptions full = tiny_options(12);
  Trainer a(models::llama(tiny_config()), *ds_, full);
  std::vector<double> expected;
  while (!a.done()) expected.push_back(a.step().loss);

  std::vector<double> got = train_and_save(5, 12, path("ckpt"));
  Checkpoint c = load_checkpoint(path("ckpt"), models::Llama(tiny_config()));
  EXPECT_EQ(c.state.step, 5);
  EXPECT_EQ(c.state.loader.steps, 5u);
  Trainer b(models::llama(tiny_config()), *ds_, full);
  b.restore(c);
  EXPECT_EQ(b.step_count(), 5);
  while (!b.done()) got.push_back(b.step().loss);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "step " << i + 1;  // bit-identical
  // And the final weights agree bit for bit.
  for (const auto& [name, w] : a.parameters()) {
    EXPECT_EQ(w.to_vector<float>(), b.parameters().at(name).to_vector<float>()) << name;
  }
}

TEST_F(CheckpointTest, SavingOverAnOldCheckpointReplacesItAndLeavesNoTempFiles) {
  train_and_save(2, 10, path("ckpt"));
  train_and_save(3, 10, path("ckpt"));
  EXPECT_EQ(load_checkpoint(path("ckpt"), models::Llama(tiny_config())).state.step, 3);
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir_)) entries.push_back(e.path().filename().string());
  EXPECT_EQ(entries, std::vector<std::string>{"ckpt"});
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(path("ckpt"))) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{kModelFile, kOptimizerFile, kTrainerStateFile}));
}

TEST_F(CheckpointTest, TruncatedFileIsRefusedNamingIt) {
  train_and_save(1, 10, path("ckpt"));
  const std::string model = path("ckpt") + "/" + kModelFile;
  fs::resize_file(model, fs::file_size(model) - 100);
  std::string e = error_of([&] { load_checkpoint(path("ckpt"), models::Llama(tiny_config())); });
  EXPECT_NE(e.find(model), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST_F(CheckpointTest, CorruptedTensorDataIsRefusedNamingTheFile) {
  train_and_save(1, 10, path("ckpt"));
  const std::string opt = path("ckpt") + "/" + kOptimizerFile;
  flip_byte(opt, 7);  // inside the last tensor's data: the header still parses
  std::string e = error_of([&] { load_checkpoint(path("ckpt"), models::Llama(tiny_config())); });
  EXPECT_NE(e.find(opt), std::string::npos) << e;
  EXPECT_NE(e.find("corrupted"), std::string::npos) << e;
}

TEST_F(CheckpointTest, TruncatedStateFileIsRefusedNamingIt) {
  train_and_save(1, 10, path("ckpt"));
  const std::string state = path("ckpt") + "/" + kTrainerStateFile;
  fs::resize_file(state, fs::file_size(state) / 2);
  std::string e = error_of([&] { load_checkpoint(path("ckpt"), models::Llama(tiny_config())); });
  EXPECT_NE(e.find(state), std::string::npos) << e;
  EXPECT_NE(error_of([&] { load_checkpoint(path("nowhere"), models::Llama(tiny_config())); }).find("does not exist"),
            std::string::npos);
}

TEST_F(CheckpointTest, CheckpointOfAnotherModelIsRefused) {
  train_and_save(1, 10, path("ckpt"));
  models::LlamaConfig other = tiny_config();
  other.num_hidden_layers = 3;
  std::string e = error_of([&] { load_checkpoint(path("ckpt"), models::Llama(other)); });
  EXPECT_NE(e.find("\"num_hidden_layers\": 2, the run's (--model) has 3"), std::string::npos) << e;
}

TEST_F(CheckpointTest, MissingOrMisShapedTensorsAreNamed) {
  // A checkpoint whose model file lacks one tensor and has another mis-shaped: rewrite the model
  // file and its recorded digest, so the checks after the checksum are exercised.
  Trainer t(models::llama(tiny_config()), *ds_, tiny_options(1));
  Checkpoint c = t.checkpoint();
  save_checkpoint(path("ckpt"), c, t.model());
  const std::string model = path("ckpt") + "/" + kModelFile;
  auto tensors = safetensors::load_all(model);
  tensors.erase("model.norm.weight");
  safetensors::save(path("missing.safetensors"), {tensors.begin(), tensors.end()});
  std::string e = error_of([&] { load_hf_weights(path("missing.safetensors"), models::Llama(tiny_config())); });
  EXPECT_NE(e.find("'model.norm.weight' is missing"), std::string::npos) << e;
  EXPECT_NE(e.find("missing.safetensors"), std::string::npos) << e;

  tensors = safetensors::load_all(model);
  tensors["model.layers.1.mlp.up_proj.weight"] = Tensor::zeros(Shape{64, 31}, DType::kFloat32);
  safetensors::save(path("shape.safetensors"), {tensors.begin(), tensors.end()});
  e = error_of([&] { load_hf_weights(path("shape.safetensors"), models::Llama(tiny_config())); });
  EXPECT_NE(e.find("'model.layers.1.mlp.up_proj.weight' has shape [64, 31]"), std::string::npos) << e;

  tensors = safetensors::load_all(model);
  tensors["model.layers.2.mlp.up_proj.weight"] = Tensor::zeros(Shape{64, 32}, DType::kFloat32);
  safetensors::save(path("extra.safetensors"), {tensors.begin(), tensors.end()});
  e = error_of([&] { load_hf_weights(path("extra.safetensors"), models::Llama(tiny_config())); });
  EXPECT_NE(e.find("unexpected tensor 'model.layers.2.mlp.up_proj.weight'"), std::string::npos) << e;
}

TEST_F(CheckpointTest, HuggingFaceWeightsOnlyContinueTraining) {
  // Train a few steps, export the weights the way Hugging Face stores them (BF16, plus rotary
  // buffers), load them into a fresh run: its first loss is that of the trained weights.
  TrainerOptions o = tiny_options(20);
  Trainer trained(models::llama(tiny_config()), *ds_, o);
  for (int i = 0; i < 20; ++i) trained.step();
  std::vector<std::pair<std::string, Tensor>> hf;
  for (const auto& [name, w] : trained.parameters()) {
    Tensor bf = Tensor::empty(w.shape(), DType::kBFloat16);
    kernels::cast(w, bf);
    hf.emplace_back(name, bf);
  }
  hf.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", Tensor::zeros(Shape{4}, DType::kFloat32));
  safetensors::save(path("model.safetensors"), hf);

  graph::TensorMap weights = load_hf_weights(path("model.safetensors"), models::Llama(tiny_config()));
  EXPECT_EQ(weights.size(), trained.parameters().size());
  EXPECT_EQ(weights.at("model.norm.weight").dtype(), DType::kFloat32);

  TrainerOptions cont = tiny_options(10);
  cont.seed = 11;  // another data order: the loss then measures the weights, not memorization
  Trainer fresh(models::llama(tiny_config()), *ds_, cont);
  Trainer from_hf(models::llama(tiny_config()), *ds_, cont);
  from_hf.load_weights(weights);
  EXPECT_EQ(from_hf.checkpoint().exp_avg.at("lm_head.weight").to_vector<float>(),
            std::vector<float>(260 * 32, 0.0f));  // fresh optimizer state
  double fresh_first = fresh.step().loss;
  double hf_first = from_hf.step().loss;
  EXPECT_LT(hf_first, fresh_first - 1.0) << "loaded weights should start far below an untrained model";
  double hf_last = hf_first;
  while (!from_hf.done()) hf_last = from_hf.step().loss;
  EXPECT_TRUE(std::isfinite(hf_last));
  EXPECT_LT(hf_last, hf_first + 0.2);  // training continues without blowing up
}

}  // namespace
}  // namespace hspmd::runtime
