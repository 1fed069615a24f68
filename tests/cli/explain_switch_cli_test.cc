// `hspmd explain --switch` on switches small enough to derive by hand: the bytes per sender ->
// receiver pair it prints must equal the sizes computed here from the Llama parameter shapes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "cli/cli_testlib.h"

namespace hspmd::cli {
namespace {

using ::testing::HasSubstr;

// H 8, F 16, 1 layer, 2 query and 2 key/value heads of D 4 (TP 2 splits both), vocabulary 10, untied.
constexpr int64_t kH = 8, kF = 16, kV = 10, kD = 4, kHeads = 2, kKvHeads = 2;
constexpr int64_t kEmbed = kV * kH;                        // model.embed_tokens.weight
constexpr int64_t kLmHead = kV * kH;                       // lm_head.weight
constexpr int64_t kNorms = 3 * kH;                         // input, post-attention, final
constexpr int64_t kQ = kHeads * kD * kH, kO = kH * kHeads * kD;
constexpr int64_t kK = kKvHeads * kD * kH, kVProj = kKvHeads * kD * kH;
constexpr int64_t kMlp = 3 * kF * kH;                      // gate, up, down
constexpr int64_t kAllFloats = kEmbed + kLmHead + kNorms + kQ + kO + kK + kVProj + kMlp;
static_assert(kAllFloats == 824);

class ExplainSwitchCli : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    model_ = write_file("model.json", R"({"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 10})");
    // Ranks 0 and 1 on different nodes, so the link of the pair is named "inter-node".
    cluster_ = write_file("cluster.json", R"({"name": "two-nodes", "devices": [
        {"id": 0, "node": 0, "type": "cpu", "memory": 1e9, "peak_flops": 1e11},
        {"id": 1, "node": 1, "type": "cpu", "memory": 1e9, "peak_flops": 1e11}],
        "intra_node_bandwidth": 1e10, "inter_node_bandwidth": 1e9})");
  }
  std::string strategy(const std::string& name, const std::string& ranks) const {
    return write_file(name + ".json", R"({"name": ")" + name + R"(", "pipelines": [{"micro_batch_size": 1,
        "num_micro_batches": 1, "stages": [{"ranks": ")" + ranks + R"(", "layers": "0-0"}]}]})");
  }
  testing::RunResult explain_switch(const std::string& a, const std::string& b, const std::string& states) const {
    return run("explain --switch " + a + " " + b + " --model " + model_ + " --cluster " + cluster_ + " --states " +
               states);
  }
  std::string model_, cluster_;
};

// Every float32 of every tensor moves from rank 0 to rank 1; with AdamW, three times as many.
TEST_F(ExplainSwitchCli, MovingEverythingToAnotherRankSendsTheWholeModel) {
  const std::string a = strategy("on-0", "0"), b = strategy("on-1", "1");
  testing::RunResult r = explain_switch(a, b, "params");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("  0 -> 1: "));
  EXPECT_THAT(r.out, HasSubstr("(" + std::to_string(4 * kAllFloats) + " bytes), 1 message, inter-node"));
  EXPECT_THAT(r.out, HasSubstr("sent "));
  EXPECT_THAT(r.out, HasSubstr("(" + std::to_string(4 * kAllFloats) + " bytes), local copies 0"));

  r = explain_switch(a, b, "params+adam");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("(" + std::to_string(3 * 4 * kAllFloats) + " bytes), 1 message, inter-node"));
}

// From one rank to tensor parallelism over ranks 0 and 1: rank 1 receives its half of every matrix
// (column-parallel q/k/v/gate/up, row-parallel o/down, vocabulary-parallel embedding and lm_head)
// and a full copy of each replicated norm weight; rank 0 keeps its half locally.
TEST_F(ExplainSwitchCli, SplittingOneRankIntoTensorParallelSendsHalfTheMatricesAndTheNorms) {
  const std::string a = strategy("on-0", "0"), b = strategy("tp2", "0-1");
  const testing::RunResult r = explain_switch(a, b, "params");
  ASSERT_EQ(r.code, 0) << r.err;
  constexpr int64_t kToRank1 = (kEmbed + kLmHead + kQ + kO + kK + kVProj + kMlp) / 2 + kNorms;
  static_assert(kToRank1 == 424);
  EXPECT_THAT(r.out, HasSubstr("  0 -> 1: "));
  EXPECT_THAT(r.out, HasSubstr("(" + std::to_string(4 * kToRank1) + " bytes), 1 message, inter-node")) << r.out;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("  1 -> 0: ")));
}

// bf16-only (--states bf16-params), rank 0 keeping the master state: each step under TP 2 sends rank
// 1 its half of the matrices and the norms as bf16 (2 bytes), and rank 1 sends back its half of the
// matrices' gradients as float32 (rank 0 holds every norm gradient itself); beside it, the full
// switch of weights and both moments.
TEST_F(ExplainSwitchCli, Bf16ParamsPrintsEachStepsMovesBesideTheFullSwitch) {
  const std::string a = strategy("on-0", "0"), b = strategy("tp2", "0-1");
  const testing::RunResult r = explain_switch(a, b, "bf16-params");
  ASSERT_EQ(r.code, 0) << r.err;
  constexpr int64_t kToRank1 = (kEmbed + kLmHead + kQ + kO + kK + kVProj + kMlp) / 2 + kNorms;
  constexpr int64_t kParamsOut = 2 * kToRank1, kGradsBack = 4 * (kToRank1 - kNorms);
  EXPECT_THAT(r.out, HasSubstr("params out (bf16, 2 bytes an element): 1 messages, "));
  EXPECT_THAT(r.out, HasSubstr("inter-node " + std::to_string(kParamsOut) + " B (" + std::to_string(kParamsOut) +
                               " bytes); local copies")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("grads back (float32, 4 bytes an element): 1 messages, ")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("(" + std::to_string(kGradsBack) + " bytes): intra-node")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("per step: ")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("(" + std::to_string(kParamsOut + kGradsBack) + " bytes)")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("(" + std::to_string(3 * 4 * kToRank1) + " bytes): intra-node")) << r.out;
}

}  // namespace
}  // namespace hspmd::cli
