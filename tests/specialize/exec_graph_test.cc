// One rank's executable view of the Llama graph under local-hetero-4 (pipeline 0: TP 2 on [0,1];
// pipeline 1: layers 0-1 on [2], 2-3 on [3]): which ops each rank runs, its local shapes and
// attributes, and when the forward pass may free each value.
#include "hspmd/specialize/exec_graph.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "hspmd/graph/token_loss.h"
#include "hspmd/models/llama.h"
#include "hspmd/models/llama_plan.h"

namespace hspmd::specialize {
namespace {

using graph::OpKind;
using graph::TensorRef;

const std::string kRoot = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();

struct Fixture {
  models::LlamaModel model = models::build_llama(models::LlamaConfig::from_file(kRoot + "/configs/llama-tiny.json"));
  sharding::AnnotationPlan plan = models::compile_llama_plan(
      model.config, sharding::Strategy::from_file(kRoot + "/examples/strategies/local-hetero-4.json"));

  int op_named(const std::string& name) const {
    for (int id = 0; id < model.graph.num_ops(); ++id) {
      if (model.graph.op(id).name == name) return id;
    }
    throw std::runtime_error("no op " + name);
  }
  static bool has(const std::vector<int>& ops, int id) { return std::find(ops.begin(), ops.end(), id) != ops.end(); }
};

TEST(ExecGraph, EachRankRunsItsStageAndTheReshardsAtItsBorders) {
  Fixture f;
  ExecGraph r2(f.model.graph, f.plan, 2), r3(f.model.graph, f.plan, 3);
  const int embed = f.op_named("model.embed_tokens"), loss = f.model.loss.op;
  const int q0 = f.op_named("model.layers.0.self_attn.q_proj"), q3 = f.op_named("model.layers.3.self_attn.q_proj");
  const int handover = f.op_named("model.layers.1.output");
  EXPECT_TRUE(Fixture::has(r2.forward_ops(), embed) && Fixture::has(r2.forward_ops(), q0));
  EXPECT_FALSE(Fixture::has(r2.forward_ops(), q3) || Fixture::has(r2.forward_ops(), loss));
  EXPECT_TRUE(Fixture::has(r3.forward_ops(), q3) && Fixture::has(r3.forward_ops(), loss));
  EXPECT_FALSE(Fixture::has(r3.forward_ops(), embed));
  // The stage hand-over: rank 2 sends, rank 3 receives; its backward goes the other way.
  EXPECT_TRUE(Fixture::has(r2.forward_ops(), handover) && Fixture::has(r3.forward_ops(), handover));
  const int back = f.model.graph.find("model.layers.1.output.bwd")->op;
  EXPECT_TRUE(Fixture::has(r2.backward_ops(), back) && Fixture::has(r3.backward_ops(), back));
  // Rank 3 is fed the batch layout and the labels, not the token ids.
  std::set<std::string> fed;
  for (int id : r3.placeholders()) fed.insert(f.model.graph.op(id).name);
  EXPECT_EQ(fed, (std::set<std::string>{"positions", "cu_seqlens", "targets", "loss_scale", "token_index"}));
  EXPECT_EQ(r2.data_group(), 1);
}

TEST(ExecGraph, TensorParallelShardsHaveLocalShapesAndVocabRanges) {
  Fixture f;
  ExecGraph r1(f.model.graph, f.plan, 1);
  const SymBinding mb{{"T", 512}, {"N", 2}};
  // Column-parallel q_proj: half of the 128 output features; heads split 4 -> 2 per rank.
  EXPECT_EQ(r1.local_shape({f.op_named("model.layers.0.self_attn.q_proj"), 0}, mb), (Shape{512, 64}));
  EXPECT_EQ(r1.local_shape({f.op_named("model.layers.0.self_attn.q_heads"), 0}, mb), (Shape{512, 2, 32}));
  EXPECT_EQ(r1.local_shape({f.op_named("model.layers.0.attn_out"), 0}, mb), (Shape{512, 128}));
  // Rank 1 holds vocabulary rows 130..259 of the embedding table.
  const graph::Op& embed = r1.op(f.op_named("model.embed_tokens"));
  EXPECT_EQ(embed.attrs.vocab_start, 130);
  EXPECT_TRUE(embed.attrs.outside_ids_are_zero);
  EXPECT_EQ(f.model.graph.op(f.op_named("model.embed_tokens")).attrs.vocab_start, 0);  // the defined graph is untouched
}

TEST(ExecGraph, VocabParallelLossKnowsItsColumnsAndTheRanksOfTheOtherShards) {
  Fixture f;
  const int loss = f.model.loss.op, loss_bwd = f.op_named("loss.bwd");
  for (int rank : {0, 1}) {  // pipeline 0: TP 2 on its last stage, vocabulary 260 split 130 / 130
    ExecGraph eg(f.model.graph, f.plan, rank);
    for (int id : {loss, loss_bwd}) {
      EXPECT_EQ(eg.op(id).attrs.vocab_start, rank * 130) << rank;
      EXPECT_EQ(eg.op(id).attrs.vocab_size, 260) << rank;
      EXPECT_EQ(eg.vocab_shard_ranks(id), (std::vector<int>{0, 1})) << rank;
    }
    const auto logits = graph::loss_logits(f.model.graph, f.model.graph.op(loss), [&](TensorRef t) { return eg.annotation(t); });
    EXPECT_EQ(local_shape({SymExpr::symbol("T"), logits->vocab}, logits->annotation, rank, {{"T", 64}}, "logits"),
              (Shape{64, 130}));
  }
  ExecGraph r3(f.model.graph, f.plan, 3);  // pipeline 1: TP 1, whole rows
  EXPECT_TRUE(r3.vocab_shard_ranks(loss).empty());
  EXPECT_EQ(r3.op(loss).attrs.vocab_size, 0);
}

TEST(ExecGraph, ForwardReleasesFreeEachValueAfterItsLastForwardReader) {
  Fixture f;
  for (int rank = 0; rank < 4; ++rank) {
    ExecGraph eg(f.model.graph, f.plan, rank);
    const std::vector<int>& ops = eg.forward_ops();
    const auto releases = eg.forward_releases(f.model.loss);
    ASSERT_EQ(releases.size(), ops.size());
    std::set<TensorRef> released;
    for (size_t k = 0; k < ops.size(); ++k) {
      for (TensorRef t : releases[k]) {
        EXPECT_TRUE(released.insert(t).second) << "released twice";
        EXPECT_FALSE(eg.saved_for_backward(t));
        EXPECT_NE(t, f.model.loss);
        for (size_t later = k + 1; later < ops.size(); ++later) {  // nothing later in F reads it
          for (TensorRef in : f.model.graph.op(ops[later]).inputs) EXPECT_NE(in, t) << "rank " << rank;
        }
      }
    }
    // Every other forward value is released, kept for B, or the loss.
    for (int id : ops) {
      for (int i = 0; i < static_cast<int>(f.model.graph.op(id).outputs.size()); ++i) {
        const TensorRef t{id, i};
        EXPECT_TRUE(released.count(t) || eg.saved_for_backward(t) || t == f.model.loss) << "rank " << rank;
      }
    }
  }
}

// With recompute, rank 2 (pipeline 1, stage [2], layers 0-1) replays each layer's forward just
// before that layer's backward; the hand-over to stage [3] (a boundary) is never replayed; F keeps
// strictly less; every replayed op finds its inputs (kept from F, or replayed before it).
TEST(ExecGraph, RecomputeReplaysEachLayerBeforeItsBackward) {
  Fixture f;
  sharding::AnnotationPlan recompute = f.plan;
  recompute.recompute = true;
  const ExecGraph kept(f.model.graph, f.plan, 2), eg(f.model.graph, recompute, 2);
  const graph::Graph& g = f.model.graph;
  EXPECT_EQ(kept.backward_steps().size(), kept.backward_ops().size());
  EXPECT_TRUE(eg.replayed(f.op_named("model.layers.1.self_attn.q_proj")));
  EXPECT_FALSE(eg.replayed(f.op_named("model.layers.1.output")));
  EXPECT_FALSE(eg.replayed(f.op_named("model.embed_tokens")));
  std::set<TensorRef> available;  // what B can read: values kept from F, and what B produced so far
  int64_t kept_values = 0, recompute_values = 0;
  for (int id : eg.forward_ops()) {
    for (int i = 0; i < static_cast<int>(g.op(id).outputs.size()); ++i) {
      if (eg.saved_for_backward({id, i})) available.insert({id, i});
      recompute_values += eg.saved_for_backward({id, i});
      kept_values += kept.saved_for_backward({id, i});
    }
  }
  EXPECT_LT(recompute_values, kept_values);
  std::vector<int> replay_layers;  // in order of replay
  for (const ExecGraph::BackwardStep& step : eg.backward_steps()) {
    const graph::Op& op = g.op(step.op);
    for (TensorRef in : op.inputs) {
      const graph::OpKind k = g.op(in.op).kind;
      // Leaves are fed; a Reshard reads its input only where the rank holds it (else it receives).
      if (k == graph::OpKind::kPlaceholder || k == graph::OpKind::kParameter || !eg.holds(in)) continue;
      EXPECT_TRUE(available.count(in)) << op.name << " reads " << g.tensor_name(in) << " before it exists";
    }
    for (int i = 0; i < static_cast<int>(op.outputs.size()); ++i) available.insert({step.op, i});
    if (step.replay && (replay_layers.empty() || replay_layers.back() != op.layer)) replay_layers.push_back(op.layer);
  }
  EXPECT_EQ(replay_layers, (std::vector<int>{1, 0}));
  // B frees each value after its last reader, except the parameter gradients the trainer sums.
  const auto releases = eg.backward_releases(f.model.grads);
  const std::set<TensorRef> grads(f.model.grads.begin(), f.model.grads.end());
  for (size_t k = 0; k < releases.size(); ++k) {
    for (TensorRef t : releases[k]) {
      EXPECT_FALSE(grads.count(t));
      for (size_t later = k + 1; later < eg.backward_steps().size(); ++later) {
        for (TensorRef in : g.op(eg.backward_steps()[later].op).inputs) EXPECT_NE(in, t);
      }
    }
  }
}

}  // namespace
}  // namespace hspmd::specialize
