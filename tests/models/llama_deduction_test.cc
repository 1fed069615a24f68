// Annotation deduction over the whole Llama training graph (forward and backward, 2 layers) under
// plans compiled from strategies by llama_plan: tensor parallelism 2 (Megatron) and data
// parallelism 2 across sharding subgroups with ZeRO-1. Checks that every tensor deduces and that
// each weight's gradient comes out as the Megatron / DP reasoning says it must.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "hspmd/core/error.h"
#include "hspmd/graph/deduction.h"
#include "hspmd/graph/token_loss.h"
#include "hspmd/models/llama.h"
#include "hspmd/models/llama_plan.h"

namespace hspmd::models {
namespace {

using graph::DeducedAnnotations;
using graph::GradientSync;
using sharding::Annotation;
using sharding::AnnotationPlan;
using ::testing::AllOf;
using ::testing::HasSubstr;

Annotation A(const std::string& text) { return Annotation::parse(text); }

LlamaConfig tiny() { return LlamaConfig{}; }  // 2 layers, H 64, 4 heads, 2 KV heads, V 260

// One pipeline of one stage holding every layer on `ranks` (TP = ranks.size()), per pipeline.
sharding::Strategy strategy(const std::vector<std::vector<int>>& pipelines, bool zero1) {
  sharding::Strategy st;
  st.name = "test";
  st.zero = zero1 ? 1 : 0;
  for (const auto& ranks : pipelines) {
    sharding::PipelineSpec p;
    p.stages.push_back({ranks, 0, static_cast<int>(tiny().num_hidden_layers) - 1});
    st.pipelines.push_back(p);
  }
  return st;
}

// Parameters from llama_plan; the graph's placeholders and Reshards set here: `data` for the
// token-indexed placeholders, `dup` for loss_scale, `named` for Reshards.
AnnotationPlan llama_plan(const sharding::Strategy& st, const Annotation& data, const Annotation& dup,
                          const std::map<std::string, Annotation>& named) {
  AnnotationPlan plan = compile_llama_plan(tiny(), st);
  for (const char* name : {"input_ids", "positions", "cu_seqlens", "targets", "token_index"}) plan.set(name, data);
  plan.set("loss_scale", dup);
  for (const auto& [name, a] : named) plan.set(name, a);
  return plan;
}

std::map<std::string, GradientSync> syncs_by_name(const LlamaModel& m, const DeducedAnnotations& d,
                                                  const AnnotationPlan& plan) {
  std::map<std::string, GradientSync> out;
  for (GradientSync& s : graph::gradient_syncs(m.graph, d, plan, m.params, m.grads)) out[s.param] = s;
  return out;
}

// Both heads: apart (a matmul whose vocab-parallel logits are gathered by lm_head_out), fused
// (lm_head_loss, whose loss normalizes the vocab-parallel logits itself).
class LlamaTensorParallelDeduction : public ::testing::TestWithParam<bool> {};

TEST_P(LlamaTensorParallelDeduction, TensorParallel2) {
  const bool fused = GetParam();
  LlamaModel m = build_llama(tiny(), {.fused_head_loss = fused});
  const Annotation dup = A("dup{[0-1](D:2)}");
  // Megatron: gather the vocab-parallel embedding's partial sum, all-reduce after each
  // row-parallel projection, gather the vocab-parallel logits before the loss (apart).
  std::map<std::string, Annotation> reshards{{"model.embed_out", dup}};
  if (!fused) reshards.emplace("lm_head_out", dup);
  for (int l = 0; l < 2; ++l) {
    for (const std::string& name : llama_layer_reshard_names(l)) {
      if (!name.ends_with("_all")) reshards[name] = dup;  // k_all, v_all keep the heads split (the compiled plan's)
    }
  }
  AnnotationPlan plan = llama_plan(strategy({{0, 1}}, false), dup, dup, reshards);
  DeducedAnnotations d = graph::deduce_annotations(m.graph, plan);

  EXPECT_EQ(d.at(m.loss), dup);
  // The row-parallel output before its Reshard is partial; the column-parallel one split on F.
  const graph::Graph& g = m.graph;
  auto op_out = [&](const std::string& name) {
    for (int id = 0; id < g.num_ops(); ++id) {
      if (g.op(id).name == name) return d.at(graph::TensorRef{id, 0});
    }
    throw std::runtime_error("no op " + name);
  };
  EXPECT_EQ(op_out("model.layers.0.mlp.down_proj"), A("dup{[0-1](P:2)}"));
  EXPECT_EQ(op_out("model.layers.0.mlp.up_proj"), A("dup{[0-1](S1:2)}"));
  EXPECT_EQ(op_out("model.layers.0.self_attn.attention"), A("dup{[0-1](S1:2)}"));  // heads
  EXPECT_EQ(op_out("model.embed_tokens"), A("dup{[0-1](P:2)}"));                    // vocab-parallel
  if (fused) {  // the logits x w^T, never a tensor, split on the vocabulary; lse of whole rows
    const auto logits = graph::loss_logits(g, g.op(m.loss.op), [&](graph::TensorRef t) { return d.at(t); });
    EXPECT_EQ(logits->annotation, A("dup{[0-1](S1:2)}"));
    EXPECT_EQ(d.at(graph::TensorRef{m.loss.op, 1}), dup);
  } else {
    EXPECT_EQ(op_out("lm_head"), A("dup{[0-1](S1:2)}"));
  }

  std::map<std::string, GradientSync> s = syncs_by_name(m, d, plan);
  ASSERT_EQ(s.size(), m.params.size());
  // Column- and row-parallel weights: the gradient is sharded exactly like the weight.
  for (const char* w : {"model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight",
                        "model.layers.1.self_attn.o_proj.weight", "lm_head.weight",
                        "model.layers.0.input_layernorm.weight"}) {
    EXPECT_EQ(s.at(w).deduced, s.at(w).target) << w;
    EXPECT_FALSE(s.at(w).needs_reshard()) << w;
  }
  EXPECT_EQ(s.at("model.layers.0.mlp.gate_proj.weight").deduced, A("dup{[0-1](S0:2)}"));
  // The vocab-parallel table's gradient is whole on both devices: a local slice to S0.
  EXPECT_EQ(s.at("model.embed_tokens.weight").deduced, dup);
  EXPECT_TRUE(s.at("model.embed_tokens.weight").needs_reshard());
  // The final norm's weight sees the partial gradient of the column-parallel lm_head: partial.
  EXPECT_EQ(s.at("model.norm.weight").deduced, A("dup{[0-1](P:2)}"));
}

INSTANTIATE_TEST_SUITE_P(Heads, LlamaTensorParallelDeduction, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "FusedHead" : "HeadApart"; });

TEST(LlamaDeductionTest, DataParallel2WithZero1) {
  LlamaModel m = build_llama(tiny());
  AnnotationPlan plan = llama_plan(strategy({{0}, {1}}, true), A("split0{[0]();[1]()}"), A("dup{[0]();[1]()}"), {});
  DeducedAnnotations d = graph::deduce_annotations(m.graph, plan);
  EXPECT_EQ(d.at(m.loss), A("partial{[0]();[1]()}"));  // each group sums its own tokens
  std::map<std::string, GradientSync> s = syncs_by_name(m, d, plan);
  ASSERT_EQ(s.size(), m.params.size());
  for (const auto& [name, sync] : s) {
    // Duplicated weights, tokens split across the groups: every gradient is a partial sum over
    // the data-parallel groups, to be reduced into the ZeRO-1 optimizer-state shards.
    EXPECT_EQ(sync.param_annotation.hdim(), sharding::kDuplicate) << name;
    EXPECT_EQ(sync.deduced, A("partial{[0]();[1]()}")) << name;
    EXPECT_EQ(sync.target.hdim(), 0) << name << " " << sync.target.to_string();
    EXPECT_TRUE(sync.needs_reshard()) << name;
  }
}

// Every shipped strategy compiles to a plan that annotates the whole graph (no hand-set entries):
// every tensor deduces, the loss is split over the pipelines' data, each gradient has a target.
TEST(LlamaDeductionTest, EveryShippedStrategyDeducesOverTheWholeGraph) {
  const std::string root = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
  std::map<std::string, LlamaModel> models;
  for (const char* name : {"llama-tiny", "llama-32b", "llama-70b"}) {
    LlamaConfig c = LlamaConfig::from_file(root + "/configs/" + name + ".json");
    models.emplace(name, build_llama(c));
  }
  int deduced = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root + "/examples/strategies")) {
    const std::string file = entry.path().filename().string();
    const LlamaModel& m = models.at(file.rfind("local-", 0) == 0              ? "llama-tiny"
                                    : file.find("70b") != std::string::npos ? "llama-70b"
                                                                            : "llama-32b");
    sharding::Strategy st = sharding::Strategy::from_file(entry.path().string());
    AnnotationPlan plan = compile_llama_plan(m.config, st);
    DeducedAnnotations d = graph::deduce_annotations(m.graph, plan);
    EXPECT_EQ(d.at(m.loss).hsize(), static_cast<int>(st.pipelines.size())) << file;
    EXPECT_EQ(d.at(m.loss).hdim(), st.pipelines.size() > 1 ? sharding::kPartial : sharding::kDuplicate) << file;
    EXPECT_EQ(graph::gradient_syncs(m.graph, d, plan, m.params, m.grads).size(), m.params.size()) << file;
    ++deduced;
  }
  EXPECT_GE(deduced, 20);
}

// Deducing each structure once (graph/deduction_memo.h) gives every tensor the annotation that
// deducing every op gives: on every shipped strategy, and on one with uneven pipelines and stages
// whose layers repeat (and whose look-alike layers sit on other ranks).
TEST(LlamaDeductionTest, DeducingByStructureEqualsDeducingEveryOp) {
  const std::string root = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
  LlamaConfig c = tiny();
  c.num_hidden_layers = 6;
  const LlamaModel uneven_model = build_llama(c);
  sharding::Strategy uneven;
  uneven.name = "uneven";
  uneven.zero = 1;
  sharding::PipelineSpec p, q;
  p.stages = {{{0, 1}, 0, 2}, {{2, 3}, 3, 5}};
  q.stages = {{{4}, 0, 1}, {{5, 6}, 2, 5}};
  uneven.pipelines = {p, q};
  std::vector<std::pair<std::string, AnnotationPlan>> cases{{"uneven", compile_llama_plan(c, uneven)}};
  const LlamaConfig tiny_file = LlamaConfig::from_file(root + "/configs/llama-tiny.json");
  for (const auto& entry : std::filesystem::directory_iterator(root + "/examples/strategies")) {
    const std::string file = entry.path().filename().string();
    if (file.rfind("local-", 0) != 0) continue;  // the tiny model's: the others take seconds each way
    cases.emplace_back(file, compile_llama_plan(tiny_file, sharding::Strategy::from_file(entry.path().string())));
  }
  const LlamaModel tiny_model = build_llama(tiny_file);
  ASSERT_GE(cases.size(), 5u);
  for (const auto& [name, plan] : cases) {
    const graph::Graph& g = name == "uneven" ? uneven_model.graph : tiny_model.graph;
    const DeducedAnnotations by_structure = graph::deduce_annotations(g, plan, graph::DeductionReuse::kByStructure);
    const DeducedAnnotations every_op = graph::deduce_annotations(g, plan, graph::DeductionReuse::kEveryOp);
    ASSERT_EQ(by_structure.by_op().size(), every_op.by_op().size()) << name;
    for (size_t id = 0; id < every_op.by_op().size(); ++id) {
      EXPECT_EQ(by_structure.by_op()[id], every_op.by_op()[id]) << name << ": op " << g.op(static_cast<int>(id)).name;
    }
  }
}

TEST(LlamaDeductionTest, TiedEmbeddingsAcrossPipelineStages) {
  LlamaConfig c = tiny();
  c.tie_word_embeddings = true;
  LlamaModel m = build_llama(c);
  sharding::Strategy st;
  st.name = "tied-pp";
  sharding::PipelineSpec p, q;
  p.stages = {{{0}, 0, 0}, {{1, 2}, 1, 1}};
  q.stages = {{{3, 4}, 0, 0}, {{5}, 1, 1}};
  st.pipelines = {p};
  {
    AnnotationPlan plan = compile_llama_plan(c, st);
    DeducedAnnotations d = graph::deduce_annotations(m.graph, plan);
    // The table lives on stage 0; its gradient comes back there from the head on stage 1.
    std::map<std::string, GradientSync> s = syncs_by_name(m, d, plan);
    EXPECT_EQ(s.at("model.embed_tokens.weight").deduced.devices(), std::vector<int>{0});
  }
  st.pipelines = {p, q};  // two pipelines, TP 2 on the second one's first stage
  AnnotationPlan plan = compile_llama_plan(c, st);
  DeducedAnnotations d = graph::deduce_annotations(m.graph, plan);
  std::map<std::string, GradientSync> s = syncs_by_name(m, d, plan);
  EXPECT_EQ(s.at("model.embed_tokens.weight").deduced, A("partial{[0]();[3-4](D:2)}"));
}

TEST(LlamaDeductionTest, MissingReshardIsAnErrorNamingTheOp) {
  LlamaModel m = build_llama(tiny());
  const Annotation dup = A("dup{[0-1](D:2)}");
  // No entry for layer 0's "attn_out" (so it is the identity): the row-parallel o_proj leaves a
  // partial sum that meets the duplicated residual stream in the add.
  AnnotationPlan full = llama_plan(strategy({{0, 1}}, false), dup, dup, {});
  AnnotationPlan plan;
  for (const auto& [name, a] : full.tensors()) {
    if (name != "model.layers.0.attn_out") plan.set(name, a);
  }
  try {
    graph::deduce_annotations(m.graph, plan);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()),
                AllOf(HasSubstr("model.layers.0.attn_residual"), HasSubstr("(P:2)"), HasSubstr("Reshard")));
  }
  // Layer 1's entry missing: its ops before the add repeat layer 0's deductions
  // (graph/deduction_memo.h), and the error still names layer 1's add.
  AnnotationPlan second;
  for (const auto& [name, a] : full.tensors()) {
    if (name != "model.layers.1.attn_out") second.set(name, a);
  }
  try {
    graph::deduce_annotations(m.graph, second);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("model.layers.1.attn_residual"), HasSubstr("(P:2)")));
  }
}

}  // namespace
}  // namespace hspmd::models
