// `hspmd checkpoint info` on checkpoints that real `hspmd train` runs write: a single-process one
// and a distributed one (2 ranks, one shard file each), then the errors for a directory that is
// not a checkpoint and for a corrupted file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/cli_testlib.h"

namespace hspmd::cli {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

// configs/llama-tiny.json: 4 layers, H 128, F 352, 4 heads of D 32 over 2 key/value heads, V 260.
constexpr int64_t kH = 128, kF = 352, kV = 260, kKv = 2 * 32;
constexpr int64_t kPerLayer = 2 * kH + kH * kH + 2 * kKv * kH + kH * kH + 3 * kF * kH;
constexpr int64_t kParameters = 2 * kV * kH + kH + 4 * kPerLayer;
constexpr int64_t kTensors = 2 + 1 + 4 * 9;  // embed, lm_head, final norm; 9 per layer

class CheckpointCli : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    const testing::RunResult r = run("data prepare --input " + testing::source_file("data/corpus/kjv-genesis-2kings.txt") +
                               " --output " + path("kjv") + " --append-eos");
    ASSERT_EQ(r.code, 0) << r.err;
  }
  std::string train(int steps) const {
    return "train --model " + testing::source_file("configs/llama-tiny.json") + " --data " + path("kjv") +
           " --steps " + std::to_string(steps) + " --seq-len 64 --global-batch-tokens 512 --warmup 2 --threads 1";
  }
};

TEST_F(CheckpointCli, InfoOfASingleProcessCheckpoint) {
  const testing::RunResult t = run(train(2) + " --lr 0.002 --save " + path("ckpt"));
  ASSERT_EQ(t.code, 0) << t.out << t.err;
  const testing::RunResult r = run("checkpoint info " + path("ckpt"));
  ASSERT_EQ(r.code, 0) << r.err;
  // One process writes the format every run writes: a sharded checkpoint of one rank.
  EXPECT_THAT(r.out, AllOf(HasSubstr("format      hspmd-sharded-checkpoint-v1 (1 rank, 1 shard file)"),
                           HasSubstr("step        2\n"),
                           HasSubstr("4 layers, hidden 128, 4 heads (2 key/value), intermediate 352, vocab 260, " +
                                     std::to_string(kParameters) + " parameters"),
                           HasSubstr("lr=0.002"), HasSubstr("steps=2"), HasSubstr("seq_len=64")))
      << r.out;
  // Weights and both AdamW moments, float32.
  EXPECT_THAT(r.out, HasSubstr("tensors     " + std::to_string(3 * kTensors) + " (" + std::to_string(kTensors) +
                               " weights, " + std::to_string(2 * kTensors) + " AdamW moments), " +
                               std::to_string(3 * 4 * kParameters) + " bytes"))
      << r.out;
}

TEST_F(CheckpointCli, InfoOfADistributedCheckpoint) {
  const testing::RunResult t = run(train(2) + " --nproc 2 --strategy " +
                             testing::source_file("examples/strategies/local-dp2.json") + " --save " + path("ckpt"));
  ASSERT_EQ(t.code, 0) << t.out << t.err;
  const testing::RunResult r = run("checkpoint info " + path("ckpt"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("format      hspmd-sharded-checkpoint-v1 (2 ranks, 2 shard files)"),
                           HasSubstr("step        2\n"), HasSubstr(std::to_string(kParameters) + " parameters"),
                           HasSubstr("steps=2")))
      << r.out;
  EXPECT_THAT(r.out, HasSubstr("tensors     " + std::to_string(3 * kTensors) + " (" + std::to_string(kTensors) +
                               " weights, " + std::to_string(2 * kTensors) + " AdamW moments), " +
                               std::to_string(3 * 4 * kParameters) + " bytes"))
      << r.out;
  EXPECT_THAT(r.out, HasSubstr("index.json + 2 rank files"));

  // A flipped byte in a shard file is caught by its CRC-32, and named.
  const fs::path shard = fs::path(path("ckpt")) / "rank-00001.safetensors";
  ASSERT_TRUE(fs::exists(shard));
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    const char c = static_cast<char>(f.get());
    f.seekp(-5, std::ios::end);
    f.put(static_cast<char>(c ^ 0x40));
  }
  const testing::RunResult bad = run("checkpoint info " + path("ckpt"));
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, AllOf(HasSubstr("rank-00001.safetensors"), HasSubstr("CRC")));
}

// A distributed checkpoint exported for Hugging Face: the weights check against the config and
// evaluate to the checkpoint's own loss.
TEST_F(CheckpointCli, ExportToHuggingFaceEvaluatesLikeTheCheckpoint) {
  const testing::RunResult t = run(train(2) + " --nproc 4 --strategy " +
                                   testing::source_file("examples/strategies/local-hetero-4.json") + " --save " +
                                   path("ckpt"));
  ASSERT_EQ(t.code, 0) << t.out << t.err;
  const testing::RunResult e = run("checkpoint export " + path("ckpt") + " --to-hf " + path("hf") +
                                   " --max-shard-bytes 1000000");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_THAT(e.out, AllOf(HasSubstr("model-00001-of-"), HasSubstr("model.safetensors.index.json")));
  const testing::RunResult info = run("model info " + path("hf/config.json") + " --weights " + path("hf"));
  EXPECT_EQ(info.code, 0) << info.out << info.err;
  const std::string eval_args = " --data " + path("kjv") + " --max-tokens 2000 --seq-len 64 --threads 1";
  const testing::RunResult from_hf = run("eval --model " + path("hf") + eval_args);
  const testing::RunResult from_ckpt =
      run("eval --model " + testing::source_file("configs/llama-tiny.json") + " --weights " + path("ckpt") + eval_args);
  ASSERT_EQ(from_hf.code, 0) << from_hf.err;
  ASSERT_EQ(from_ckpt.code, 0) << from_ckpt.err;
  const auto loss = [](const std::string& out) { return out.substr(out.find("mean loss"), 20); };
  EXPECT_EQ(loss(from_hf.out), loss(from_ckpt.out)) << from_hf.out << from_ckpt.out;
  // The output directory is never overwritten.
  const testing::RunResult again = run("checkpoint export " + path("ckpt") + " --to-hf " + path("hf"));
  EXPECT_EQ(again.code, 1);
  EXPECT_THAT(again.err, HasSubstr("already exists"));
}

TEST_F(CheckpointCli, ADirectoryThatIsNotACheckpointIsNamed) {
  fs::create_directories(path("empty"));
  testing::RunResult r = run("checkpoint info " + path("empty"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "hspmd: error: " + path("empty") +
                       " is not an hspmd checkpoint: it has neither index.json nor trainer_state.json "
                       "(older single-process format)\n");
  r = run("checkpoint info " + path("absent"));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("does not exist"));
  r = run("checkpoint info --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("CRC-32"));
}

// A file given where a checkpoint or weights belong is called what it is, not "does not exist".
TEST_F(CheckpointCli, AFileThatIsNotACheckpointIsNamed) {
  const std::string file = write_file("notes.txt", "not weights\n");
  testing::RunResult r = run("eval --model " + testing::source_file("configs/llama-tiny.json") + " --weights " + file +
                             " --data " + path("kjv") + " --max-tokens 256 --seq-len 64");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "hspmd: error: --weights " + file +
                       " is neither a checkpoint directory (hspmd train --save) nor Hugging Face weights (a "
                       ".safetensors file, or a directory with model.safetensors or its index)\n");
  r = run("checkpoint info " + file);
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr(file + " is a file, not a checkpoint"));
}

}  // namespace
}  // namespace hspmd::cli
