// Pipeline construction (A.2) on annotated graphs: the Llama graph under every local strategy
// (TP stages merge, layer hand-overs chain stages, pipeline-wide placeholders and the Pre-time
// tied-weight Reshard add nothing), the asymmetric layout of the paper's Figure 4 (right), and
// hand-written plans that are not chains or form a cycle (errors naming the Reshard).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "hspmd/core/error.h"
#include "hspmd/graph/ops.h"
#include "hspmd/models/llama.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/specialize/pipeline_layout.h"

namespace hspmd::specialize {
namespace {

using sharding::Annotation;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;

const std::string kRoot = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();

using Stages = std::vector<std::vector<int>>;

PipelineLayout llama_layout(const models::LlamaConfig& config, const sharding::Strategy& st) {
  const models::LlamaModel m = models::build_llama(config);
  const sharding::AnnotationPlan plan = models::compile_llama_plan(config, st);
  return build_pipeline_layout(m.graph, graph::deduce_annotations(m.graph, plan));
}

PipelineLayout shipped_layout(const std::string& name) {
  return llama_layout(models::LlamaConfig::from_file(kRoot + "/configs/llama-tiny.json"),
                      sharding::Strategy::from_file(kRoot + "/examples/strategies/" + name + ".json"));
}

TEST(PipelineLayoutTest, LocalHetero4) {
  const PipelineLayout p = shipped_layout("local-hetero-4");
  ASSERT_EQ(p.pipelines.size(), 2u) << p.to_string();
  EXPECT_EQ(p.pipelines[0].stages, (Stages{{0, 1}}));
  EXPECT_EQ(p.pipelines[1].stages, (Stages{{2}, {3}}));
  EXPECT_EQ(p.to_string(), "pipeline 0: [0,1]\npipeline 1: [2] -> [3]\n");
  EXPECT_EQ(p.locate(1), std::make_pair(0, 0));
  EXPECT_EQ(p.locate(3), std::make_pair(1, 1));
  try {
    p.locate(7);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("rank 7"));
  }
}

TEST(PipelineLayoutTest, LocalDp2AndTp2Pp2) {
  EXPECT_EQ(shipped_layout("local-dp2").to_string(), "pipeline 0: [0]\npipeline 1: [1]\n");
  const PipelineLayout p = shipped_layout("local-tp2-pp2");
  ASSERT_EQ(p.pipelines.size(), 1u);
  EXPECT_EQ(p.pipelines[0].stages, (Stages{{0, 1}, {2, 3}}));
}

// Stages listed out of rank order, three of them, tied embeddings: the stage order is the data
// flow, and the tied weight's Reshard (first stage -> last stage, a Pre-time parameter move)
// does not add a second successor to the first stage.
TEST(PipelineLayoutTest, DataFlowOrderAndTiedWeights) {
  models::LlamaConfig c;
  c.num_hidden_layers = 3;
  c.tie_word_embeddings = true;
  sharding::Strategy st;
  st.name = "three-stages";
  sharding::PipelineSpec a;
  a.stages = {{{5}, 0, 0}, {{1, 2}, 1, 1}, {{0}, 2, 2}};
  st.pipelines = {a};
  const PipelineLayout p = llama_layout(c, st);
  EXPECT_EQ(p.to_string(), "pipeline 0: [5] -> [1,2] -> [0]\n");
  EXPECT_EQ(p.locate(0), std::make_pair(0, 2));
  // Untied, with a second pipeline: pipelines ordered by their lowest rank.
  c.tie_word_embeddings = false;
  sharding::PipelineSpec b;
  b.stages = {{{3, 4}, 0, 2}};
  st.pipelines = {a, b};
  EXPECT_EQ(llama_layout(c, st).to_string(), "pipeline 0: [5] -> [1,2] -> [0]\npipeline 1: [3,4]\n");
}

// Figure 4 (right): TP on GPUs 0,3; PP from GPU 1 to GPUs 5,6 (TP 2); CP (sequence split) on
// GPUs 2,4; data parallel across the three. Two layers x -> h = x W1^T -> Reshard -> y = h W2^T.
TEST(PipelineLayoutTest, Figure4RightLayout) {
  graph::Graph g;
  const SymExpr T = SymExpr::symbol("T");
  auto x = g.placeholder("x", {T, 16}, DType::kFloat32);
  auto w1 = g.parameter("w1", Shape{32, 16}, DType::kFloat32, graph::InitSpec::normal(0.02));
  auto w2 = g.parameter("w2", Shape{16, 32}, DType::kFloat32, graph::InitSpec::normal(0.02));
  auto h = graph::ops::matmul(g, x, w1, {.trans_b = true}, "h");
  auto h2 = graph::ops::reshard(g, h, "h2");
  auto y = graph::ops::matmul(g, h2, w2, {.trans_b = true}, "y");
  graph::ops::reshard(g, y, "y_out");
  std::map<std::string, Annotation> plan{
      {"x", Annotation::parse("split0{[0,3](D:2);[1]();[2,4](S0:2)}")},
      {"w1", Annotation::parse("dup{[0,3](S0:2);[1]();[2,4](D:2)}")},
      {"h2", Annotation::parse("split0{[0,3](S1:2);[5-6](S1:2);[2,4](S0:2)}")},
      {"w2", Annotation::parse("dup{[0,3](S1:2);[5-6](S1:2);[2,4](D:2)}")},
      {"y_out", Annotation::parse("split0{[0,3](D:2);[5-6](D:2);[2,4](S0:2)}")},
  };
  const PipelineLayout p = build_pipeline_layout(g, graph::deduce_annotations(g, plan));
  EXPECT_EQ(p.to_string(), "pipeline 0: [0,3]\npipeline 1: [1] -> [5,6]\npipeline 2: [2,4]\n");
}

// x on [0] -> a = x W -> Reshards to [1] and to [2]: stage [0] has two successors.
TEST(PipelineLayoutTest, ForkIsAnErrorNamingTheReshard) {
  graph::Graph g;
  auto x = g.placeholder("x", {SymExpr::symbol("T"), 8}, DType::kFloat32);
  auto w = g.parameter("w", Shape{8, 8}, DType::kFloat32, graph::InitSpec::normal(0.02));
  auto a = graph::ops::matmul(g, x, w, {.trans_b = true}, "a");
  graph::ops::reshard(g, a, "to_one");
  graph::ops::reshard(g, a, "to_two");
  std::map<std::string, Annotation> plan{{"x", Annotation::parse("dup{[0]()}")},
                                         {"w", Annotation::parse("dup{[0]()}")},
                                         {"to_one", Annotation::parse("dup{[1]()}")},
                                         {"to_two", Annotation::parse("dup{[2]()}")}};
  try {
    build_pipeline_layout(g, graph::deduce_annotations(g, plan));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("'to_two'"), HasSubstr("'to_one'"), HasSubstr("successors"),
                                             HasSubstr("chains")));
  }
}

TEST(PipelineLayoutTest, CycleIsAnErrorNamingTheReshard) {
  // [0] -> [1] -> [0]: every stage has a predecessor, so no chain starts anywhere.
  graph::Graph g;
  auto x = g.placeholder("x", {SymExpr::symbol("T"), 8}, DType::kFloat32);
  auto w0 = g.parameter("w0", Shape{8, 8}, DType::kFloat32, graph::InitSpec::normal(0.02));
  auto w1 = g.parameter("w1", Shape{8, 8}, DType::kFloat32, graph::InitSpec::normal(0.02));
  auto a = graph::ops::matmul(g, x, w0, {.trans_b = true}, "a");
  auto t = graph::ops::reshard(g, a, "there");
  auto b = graph::ops::matmul(g, t, w1, {.trans_b = true}, "b");
  auto c = graph::ops::reshard(g, b, "back");
  graph::ops::matmul(g, c, w0, {.trans_b = true}, "c");
  std::map<std::string, Annotation> plan{{"x", Annotation::parse("dup{[0]()}")},
                                          {"w0", Annotation::parse("dup{[0]()}")},
                                          {"w1", Annotation::parse("dup{[1]()}")},
                                          {"there", Annotation::parse("dup{[1]()}")},
                                          {"back", Annotation::parse("dup{[0]()}")}};
  try {
    build_pipeline_layout(g, graph::deduce_annotations(g, plan));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("cycle"), AnyOf(HasSubstr("'there'"), HasSubstr("'back'"))));
  }
}

}  // namespace
}  // namespace hspmd::specialize
