// Pipelines whose stages have different CP degrees (docs/context-parallelism.md): the pipeline feeds
// its tokens in one zigzag order, each stage splits that order evenly over its own CP ranks, so the
// activation crossing a boundary between two degrees is an ordinary Reshard of the token dim that
// the resolver turns into a BSR (its gradient one back), and the per-token placeholders narrow to
// each stage locally. Checked on the resolved plan of the tiny Llama (4 layers, H 128), T = 16.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/specialize/plan_report.h"

namespace hspmd::specialize {
namespace {

using V = std::vector<std::string>;

const std::string kRoot = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
constexpr int64_t kSeqLen = 16;  // one sequence per micro-batch: T = 16

models::LlamaConfig tiny(bool tied = false) {
  models::LlamaConfig c = models::LlamaConfig::from_file(kRoot + "/configs/llama-tiny.json");
  c.tie_word_embeddings = tied;
  return c;
}

// One pipeline of two stages, layers 0-1 and 2-3, given as the stages' JSON objects' ranks/tp/cp.
sharding::Strategy two_stages(const std::string& first, const std::string& second) {
  return sharding::Strategy::from_json_text(
      R"({"pipelines": [{"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"layers": "0-1", )" + first +
          R"(}, {"layers": "2-3", )" + second + "}]}]}",
      "stages.json");
}

PlanReport report(const sharding::Strategy& st, bool tied = false) {
  const models::Llama model(tiny(tied));
  return make_plan_report(model.build({}), model.compile_plan(st), {ScheduleKind::k1F1B, kSeqLen, nullptr});
}

const ReshardGroup& find(const std::vector<ReshardGroup>& groups, const std::string& name) {
  for (const ReshardGroup& g : groups) {
    if (g.display_name() == name) return g;
  }
  std::string all;
  for (const ReshardGroup& g : groups) all += " " + g.display_name();
  throw std::runtime_error("no group " + name + " in:" + all);
}

V ops_of(const ReshardGroup& g, int device) {
  for (const DeviceOps& d : g.devices) {
    if (d.device != device) continue;
    V out;
    for (const resolve::CommOp& op : d.ops) out.push_back(op.to_string());
    return out;
  }
  return {};
}

std::vector<int> stage_cps(const PlanReport& r) {
  std::vector<int> out;
  for (const StageReport& s : r.pipelines.at(0).stages) out.push_back(s.cp);
  return out;
}

TEST(ContextParallelStages, Cp2ThenCp1) {
  const sharding::Strategy st = two_stages(R"("ranks": "0-1", "cp": 2)", R"("ranks": "2")");
  const PlanReport r = report(st);
  EXPECT_EQ(stage_cps(r), (std::vector<int>{2, 1}));
  // The hand-over after layer 1: each CP rank sends its half of the tokens to the one rank.
  const ReshardGroup& out = find(r.activations, "model.layers.1.output");
  EXPECT_EQ(out.src, "dup{[0-1](S0:2)}");
  EXPECT_EQ(out.dst, "dup{[2]()}");
  EXPECT_EQ(out.classification, "bottom[BSR]");
  EXPECT_EQ(ops_of(out, 0), V{"Send peer=2 [0:8, 0:128] bytes=4096"});
  EXPECT_EQ(ops_of(out, 1), V{"Send peer=2 [8:16, 0:128] bytes=4096"});
  EXPECT_EQ(ops_of(out, 2), (V{"Recv peer=0 [0:8, 0:128] bytes=0", "Recv peer=1 [8:16, 0:128] bytes=0"}));
  // The gradient goes back split again.
  const ReshardGroup& back = find(r.activations, "model.layers.1.output.bwd");
  EXPECT_EQ(ops_of(back, 2), (V{"Send peer=0 [0:8, 0:128] bytes=4096", "Send peer=1 [8:16, 0:128] bytes=4096"}));
  // Positions reach every stage's ranks whole (gcd 1) and are narrowed there: local copies only.
  EXPECT_TRUE(find(r.activations, "model.layers.{0..1}.positions").local_only());
  // The pipeline is fed in the zigzag order of CP 2, which the one-rank stage takes whole.
  const models::Llama model(tiny());
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(model.context_parallel_degree(model.compile_plan(st), rank), 2);
}

TEST(ContextParallelStages, Cp1ThenCp2) {
  const PlanReport r = report(two_stages(R"("ranks": "0")", R"("ranks": "1-2", "cp": 2)"));
  EXPECT_EQ(stage_cps(r), (std::vector<int>{1, 2}));
  const ReshardGroup& out = find(r.activations, "model.layers.1.output");
  EXPECT_EQ(out.classification, "bottom[BSR]");
  EXPECT_EQ(ops_of(out, 0), (V{"Send peer=1 [0:8, 0:128] bytes=4096", "Send peer=2 [8:16, 0:128] bytes=4096"}));
  EXPECT_EQ(ops_of(find(r.activations, "model.layers.1.output.bwd"), 2), V{"Send peer=0 [8:16, 0:128] bytes=4096"});
}

// CP 2 then CP 4: the two halves of CP 2 split again; the pipeline's
// per-token placeholders are split over gcd = 2, each half to the ranks of both stages holding it.
TEST(ContextParallelStages, Cp2ThenCp4) {
  const sharding::Strategy st = two_stages(R"("ranks": "0-1", "cp": 2)", R"("ranks": "2-5", "cp": 4)");
  const PlanReport r = report(st);
  EXPECT_EQ(stage_cps(r), (std::vector<int>{2, 4}));
  const ReshardGroup& out = find(r.activations, "model.layers.1.output");
  EXPECT_EQ(ops_of(out, 1), (V{"Send peer=4 [8:12, 0:128] bytes=2048", "Send peer=5 [12:16, 0:128] bytes=2048"}));
  EXPECT_EQ(ops_of(out, 3), V{"Recv peer=0 [4:8, 0:128] bytes=0"});
  const models::Llama model(tiny());
  const sharding::AnnotationPlan plan = model.compile_plan(st);
  EXPECT_EQ(plan.at("token_index").to_string(), "dup{[0,2-3,1,4-5](S0:2,D:3)}");
  EXPECT_TRUE(find(r.activations, "model.layers.{2..3}.token_index").local_only());
  EXPECT_EQ(model.context_parallel_degree(plan, 5), 4);
}

// Degrees that do not divide each other: the pipeline's order has the degree of their least common
// multiple (6), which each stage splits evenly (2 and 3 ways, whole zigzag pairs per rank); its
// rows are padded to a multiple of 12 tokens (16 -> 24).
TEST(ContextParallelStages, Cp2ThenCp3FeedsTheOrderOfCp6) {
  const sharding::Strategy st = two_stages(R"("ranks": "0-1", "cp": 2)", R"("ranks": "2-4", "cp": 3)");
  const models::Llama model(tiny());
  const sharding::AnnotationPlan plan = model.compile_plan(st);
  EXPECT_EQ(plan.pipelines.at(0).token_order_degree, 6);
  EXPECT_EQ(plan.pipelines.at(0).row_tokens(kSeqLen), 24);
  EXPECT_EQ(model.context_parallel_degree(plan, 0), 6);
  // A saved plan keeps the order.
  EXPECT_EQ(sharding::AnnotationPlan::from_json_text(plan.to_json_text(), "plan.json").pipelines, plan.pipelines);
  const PlanReport r = report(st);
  EXPECT_EQ(r.pipelines.at(0).binding.at("T"), 24);
  const ReshardGroup& out = find(r.activations, "model.layers.1.output");
  EXPECT_EQ(out.classification, "bottom[BSR]");
  EXPECT_EQ(ops_of(out, 1), (V{"Send peer=3 [12:16, 0:128] bytes=2048", "Send peer=4 [16:24, 0:128] bytes=4096"}));
}

// Tied embeddings: the head's gradient, partial over the last stage's CP ranks, goes home to the
// lookup's, partial over the first stage's. From CP 2 to none: all-reduced over CP, then sent.
// From none to CP 2: the whole sum becomes CP rank 0's summand, CP rank 1's is zeros. From CP 2
// to CP 4: both.
TEST(ContextParallelStages, TiedEmbeddingsAcrossCpDegrees) {
  const PlanReport to_one = report(two_stages(R"("ranks": "0")", R"("ranks": "1-4", "tp": 2, "cp": 2)"), true);
  EXPECT_EQ(find(to_one.activations, "lm_head.tied_weight.bwd").classification, "bottom[AR]+bottom[BSR]");
  const PlanReport from_one = report(two_stages(R"("ranks": "0-1", "cp": 2)", R"("ranks": "2")"), true);
  const ReshardGroup& home = find(from_one.activations, "lm_head.tied_weight.bwd");
  EXPECT_EQ(home.classification, "bottom[BSR]");
  EXPECT_EQ(ops_of(home, 2), V{"Send peer=0 [0:260, 0:128] bytes=133120"});
  EXPECT_EQ(ops_of(home, 1), V{"ZeroFill [0:260, 0:128] bytes=0"});
  const PlanReport wider = report(two_stages(R"("ranks": "0-3", "cp": 4)", R"("ranks": "4-5", "cp": 2)"), true);
  EXPECT_EQ(find(wider.activations, "lm_head.tied_weight.bwd").classification, "bottom[AR]+bottom[BSR]");
}

}  // namespace
}  // namespace hspmd::specialize
