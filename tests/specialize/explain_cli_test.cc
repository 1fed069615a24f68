// `hspmd explain --strategy` through the built binary on local-hetero-4 (TP 2 on [0,1]; stages [2]
// -> [3] in the other pipeline): the key lines a person checks, and the error paths.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "run_hspmd.h"

namespace hspmd::specialize {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kRoot = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();

using hspmd::testing::CommandResult;
using hspmd::testing::hspmd_binary;

CommandResult run(const std::string& args) { return hspmd::testing::run_hspmd(args); }

class ExplainCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::ifstream(hspmd_binary()).good()) << hspmd_binary() << " not built (set HSPMD_BINARY_DIR)";
  }
  const std::string model_ = " --model " + kRoot + "/configs/llama-tiny.json";
  const std::string hetero_ = " --strategy " + kRoot + "/examples/strategies/local-hetero-4.json";
};

// The block of one Reshard group: from its name line to the next group's.
std::string block(const std::string& text, const std::string& head) {
  const size_t at = text.find("\n  " + head);
  if (at == std::string::npos) return "";
  const size_t end = text.find("\n  model", at + 3);
  return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

TEST_F(ExplainCliTest, StrategyOnLocalHetero4) {
  const CommandResult r = run("explain" + hetero_ + model_ + " --seq-len 64 --cluster " + kRoot +
                       "/examples/clusters/local-cpu-4.json");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string& out = r.output;
  // Pipelines and schedules: pipeline 1 has two stages and 4 micro-batches of 1 sequence.
  EXPECT_THAT(out, HasSubstr("pipeline 0: 2 micro-batches of 2 sequences (T=128, N=2)"));
  EXPECT_THAT(out, HasSubstr("stage 0  ranks [0-1]    layers 0-3     TP 2   F0 B0 F1 B1"));
  EXPECT_THAT(out, HasSubstr("stage 0  ranks [2]      layers 0-1     TP 1   F0 F1 B0 F2 B1 F3 B2 B3"));
  EXPECT_THAT(out, HasSubstr("stage 1  ranks [3]      layers 2-3     TP 1   F0 B0 F1 B1 F2 B2 F3 B3"));
  // The layer boundary of pipeline 1: rank 2 sends [T=64, H=128] float32 to rank 3.
  const std::string boundary = block(out, "model.layers.1.output  ");
  EXPECT_THAT(boundary, HasSubstr("bottom[Identity,SR]"));
  EXPECT_THAT(boundary, HasSubstr("rank 2: Send peer=3 [0:64, 0:128] bytes=32768"));
  EXPECT_THAT(boundary, HasSubstr("rank 3: Recv peer=2 [0:64, 0:128]"));
  // Tensor parallelism: the row-parallel output all-reduced over [0,1], in layers 0 and 1 ...
  const std::string attn = block(out, "model.layers.{0..1}.attn_out (2x)");
  EXPECT_THAT(attn, HasSubstr("bottom[AR,Identity]"));
  EXPECT_THAT(attn, HasSubstr("rank 0: AllReduce group=[0-1] [0:128, 0:128] bytes=65536"));
  EXPECT_THAT(attn, Not(HasSubstr("rank 2")));
  // ... gradient syncs across the pipelines into ZeRO-1 shards, and the step total per tier.
  EXPECT_THAT(out, HasSubstr("top[SplitRS]"));
  EXPECT_THAT(out, HasSubstr("Parameter gathers"));
  EXPECT_THAT(out, HasSubstr("intra-node"));
  EXPECT_THAT(out, HasSubstr("explained in"));
}

TEST_F(ExplainCliTest, GPipeWithoutClusterAndErrors) {
  const CommandResult g = run("explain" + hetero_ + model_ + " --seq-len 64 --schedule gpipe");
  ASSERT_EQ(g.code, 0) << g.output;
  EXPECT_THAT(g.output, HasSubstr("stage 0  ranks [2]      layers 0-1     TP 1   F0 F1 F2 F3 B0 B1 B2 B3"));
  EXPECT_THAT(g.output, HasSubstr("  all "));
  const CommandResult bad = run("explain" + hetero_ + model_ + " --schedule zigzag");
  EXPECT_NE(bad.code, 0);
  EXPECT_THAT(bad.output, HasSubstr("zigzag"));
  const CommandResult both = run("explain" + hetero_ + model_ + " --switch a.json b.json");
  EXPECT_NE(both.code, 0);
  EXPECT_THAT(both.output, HasSubstr("either --strategy"));
}

// Context parallelism (local-cp2-tp2: ranks 0-3, TP pairs {0,1} {2,3}, CP pairs {0,2} {1,3}): the
// K/V all-gathers over CP, their backward reduce-scatters, and the weight gradients summed over CP.
TEST_F(ExplainCliTest, ContextParallelCommunication) {
  const CommandResult r =
      run("explain --strategy " + kRoot + "/examples/strategies/local-cp2-tp2.json" + model_ + " --seq-len 64");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string& out = r.output;
  EXPECT_THAT(out, HasSubstr("stage 0  ranks [0-3]    layers 0-3     TP 2  CP 2   F0 B0 F1 B1"));
  const std::string gather = block(out, "model.layers.{0..3}.self_attn.k_all (4x)");
  EXPECT_THAT(gather, HasSubstr("bottom[AG]"));
  EXPECT_THAT(gather, HasSubstr("rank 1: AllGather group=[1,3] dim=0 [0:128, 1:2, 0:32] bytes=8192"));
  EXPECT_THAT(block(out, "model.layers.{0..3}.self_attn.v_all.bwd (4x)"),
              HasSubstr("rank 2: ReduceScatter group=[0,2] dim=0 [0:128, 0:1, 0:32] bytes=8192"));
  EXPECT_THAT(block(out, "model.layers.{0..3}.self_attn.q_proj.weight (4x)"),
              HasSubstr("rank 0: AllReduce group=[0,2] [0:64, 0:128] bytes=32768"));
  EXPECT_THAT(block(out, "model.layers.{0..3}.input_layernorm.weight (4x)"),
              HasSubstr("rank 3: AllReduce group=[1,3] [0:128] bytes=512"));
}

}  // namespace
}  // namespace hspmd::specialize
