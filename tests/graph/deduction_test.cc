// Annotation deduction (paper §6.1, Table 2, Figure 13): every op kind's rule on small hand cases,
// the Figure 4 (right) example end to end (forward and backward), and the errors a plan without
// the needed Reshard produces. Annotations are written in their canonical text form.
#include "hspmd/graph/deduction.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hspmd/core/error.h"
#include "hspmd/graph/autograd.h"
#include "hspmd/graph/op_registry.h"
#include "hspmd/graph/ops.h"

namespace hspmd::graph {
namespace {

using sharding::Annotation;
using ::testing::AllOf;
using ::testing::HasSubstr;

Annotation A(const std::string& text) { return Annotation::parse(text); }
using Plan = std::map<std::string, Annotation>;

// The error message of deduce_annotations(g, plan), or "" when it succeeds.
std::string deduce_error(const Graph& g, const Plan& plan) {
  try {
    deduce_annotations(g, plan);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// y = x @ op(w), x [8, 16], w [32, 16] (trans_b) or [16, 32].
struct MatmulCase {
  Graph g;
  TensorRef x, w, y;
  explicit MatmulCase(bool trans_b = true, bool trans_a = false) {
    x = g.placeholder("x", trans_a ? SymShape{16, 8} : SymShape{8, 16}, DType::kFloat32);
    w = g.parameter("w", trans_b ? Shape{32, 16} : Shape{16, 32}, DType::kFloat32, InitSpec::zeros());
    y = ops::matmul(g, x, w, {.trans_a = trans_a, .trans_b = trans_b}, "proj");
  }
  Annotation deduce(const std::string& xa, const std::string& wa) {
    return deduce_annotations(g, Plan{{"x", A(xa)}, {"w", A(wa)}}).at(y);
  }
};

TEST(DeductionTest, MatmulFigure13Cases) {
  // Column parallel: x duplicated, W [out, in] split on out -> y split on its last dim.
  EXPECT_EQ(MatmulCase().deduce("dup{[0-1](D:2)}", "dup{[0-1](S0:2)}"), A("dup{[0-1](S1:2)}"));
  // Row parallel: x and W split on the contracted dim -> partial.
  EXPECT_EQ(MatmulCase().deduce("dup{[0-1](S1:2)}", "dup{[0-1](S1:2)}"), A("dup{[0-1](P:2)}"));
  // Data parallel: x split on rows, W duplicated.
  EXPECT_EQ(MatmulCase().deduce("dup{[0-3](S0:4)}", "dup{[0-3](D:4)}"), A("dup{[0-3](S0:4)}"));
  // Partial x times duplicated W stays partial (linear).
  EXPECT_EQ(MatmulCase().deduce("dup{[0-1](P:2)}", "dup{[0-1](D:2)}"), A("dup{[0-1](P:2)}"));
  // DP 2 x TP 2 in one group of 4: the device -> coordinate maps line up position by position.
  EXPECT_EQ(MatmulCase().deduce("dup{[0-3](S0:2,D:2)}", "dup{[0-3](D:2,S0:2)}"), A("dup{[0-3](S0:2,S1:2)}"));
  // Without trans_b, W [in, out] column parallel is split on dim 1.
  EXPECT_EQ(MatmulCase(false).deduce("dup{[0-1](D:2)}", "dup{[0-1](S1:2)}"), A("dup{[0-1](S1:2)}"));
  // trans_a (the weight gradient x^T dy): both split on tokens -> partial.
  EXPECT_EQ(MatmulCase(false, true).deduce("dup{[0-1](S0:2)}", "dup{[0-1](S0:2)}"), A("dup{[0-1](P:2)}"));
  // Top tier: tokens split across groups, W replicated -> still split; contracted split -> partial.
  EXPECT_EQ(MatmulCase().deduce("split0{[0]();[1]()}", "dup{[0]();[1]()}"), A("split0{[0]();[1]()}"));
  EXPECT_EQ(MatmulCase(false, true).deduce("split0{[0]();[1]()}", "split0{[0]();[1]()}"), A("partial{[0]();[1]()}"));
}

TEST(DeductionTest, MatmulErrorsNameTheOp) {
  MatmulCase m;
  // Contracted dim split on one side only.
  EXPECT_THAT(deduce_error(m.g, {{"x", A("dup{[0-1](S1:2)}")}, {"w", A("dup{[0-1](D:2)}")}}),
              AllOf(HasSubstr("proj"), HasSubstr("Reshard")));
  // Different device groups: the error names the op, both annotations and asks for a Reshard.
  EXPECT_THAT(deduce_error(m.g, {{"x", A("dup{[0-1](D:2)}")}, {"w", A("dup{[2-3](S0:2)}")}}),
              AllOf(HasSubstr("proj"), HasSubstr("dup{[0-1](D:2)}"), HasSubstr("dup{[2-3](S0:2)}"),
                    HasSubstr("Reshard")));
  // Different hsize.
  EXPECT_THAT(deduce_error(m.g, {{"x", A("split0{[0]();[1]()}")}, {"w", A("dup{[0-1](D:2)}")}}),
              AllOf(HasSubstr("proj"), HasSubstr("hsize"), HasSubstr("Reshard")));
  // A leaf the plan does not name.
  EXPECT_THAT(deduce_error(m.g, {{"x", A("dup{[0-1](D:2)}")}}), AllOf(HasSubstr("'w'"), HasSubstr("plan")));
  // A split that does not divide a static dim (w [32, 16] split 3 ways... over 3 devices).
  EXPECT_THAT(deduce_error(m.g, {{"x", A("dup{[0-2](D:3)}")}, {"w", A("dup{[0-2](S0:3)}")}}), HasSubstr("tensor w"));
}

TEST(DeductionTest, ElementwiseLinearity) {
  Graph g;
  TensorRef a = g.placeholder("a", {8, 16}, DType::kFloat32);
  TensorRef b = g.placeholder("b", {8, 16}, DType::kFloat32);
  TensorRef s = ops::add(g, a, b, "sum");
  TensorRef act = ops::swiglu(g, a, b, "act");
  Plan p{{"a", A("dup{[0-1](P:2)}")}, {"b", A("dup{[0-1](P:2)}")}};
  // add is linear: partial + partial = partial; swiglu is not.
  EXPECT_THAT(deduce_error(g, p), AllOf(HasSubstr("'act'"), HasSubstr("partial")));
  Plan q{{"a", A("dup{[0-1](S0:2)}")}, {"b", A("dup{[0-1](S0:2)}")}};
  DeducedAnnotations d = deduce_annotations(g, q);
  EXPECT_EQ(d.at(s), A("dup{[0-1](S0:2)}"));
  EXPECT_EQ(d.at(act), A("dup{[0-1](S0:2)}"));
  EXPECT_THAT(deduce_error(g, {{"a", A("dup{[0-1](S0:2)}")}, {"b", A("dup{[0-1](S1:2)}")}}),
              AllOf(HasSubstr("'sum'"), HasSubstr("Reshard")));
}

TEST(DeductionTest, SwigluBackwardKeepsTheSharding) {
  Graph g;
  TensorRef a = g.placeholder("a", {8, 16}, DType::kFloat32);
  TensorRef b = g.placeholder("b", {8, 16}, DType::kFloat32);
  TensorRef dy = g.placeholder("dy", {8, 16}, DType::kFloat32);
  auto outs = g.add_op(OpKind::kSwigluBwd, "act.bwd", {a, b, dy});
  Annotation tp = A("dup{[0-1](S1:2)}");
  DeducedAnnotations d = deduce_annotations(g, {{"a", tp}, {"b", tp}, {"dy", tp}});
  EXPECT_EQ(d.at(outs[0]), tp);
  EXPECT_EQ(d.at(outs[1]), tp);
}

// Gemma's ops: geglu_tanh is not linear (like swiglu), scale is (like add); both keep a TP split.
TEST(DeductionTest, GegluTanhAndScale) {
  Graph g;
  TensorRef a = g.placeholder("a", {8, 16}, DType::kFloat32);
  TensorRef b = g.placeholder("b", {8, 16}, DType::kFloat32);
  TensorRef act = ops::geglu_tanh(g, a, b, "act");
  TensorRef scaled = ops::scale(g, act, 2.5, "scaled");
  auto bwd = g.add_op(OpKind::kGegluTanhBwd, "act.bwd", {a, b, scaled});
  Annotation tp = A("dup{[0-1](S1:2)}");
  DeducedAnnotations d = deduce_annotations(g, {{"a", tp}, {"b", tp}});
  EXPECT_EQ(d.at(act), tp);
  EXPECT_EQ(d.at(scaled), tp);
  EXPECT_EQ(d.at(bwd[0]), tp);
  EXPECT_EQ(d.at(bwd[1]), tp);
  EXPECT_THAT(deduce_error(g, {{"a", A("dup{[0-1](P:2)}")}, {"b", A("dup{[0-1](P:2)}")}}),
              AllOf(HasSubstr("'act'"), HasSubstr("partial")));
  Graph h;
  TensorRef x = h.placeholder("x", {8, 16}, DType::kFloat32);
  TensorRef y = ops::scale(h, x, 0.5, "half");
  EXPECT_EQ(deduce_annotations(h, {{"x", A("dup{[0-1](P:2)}")}}).at(y), A("dup{[0-1](P:2)}"));
}

TEST(DeductionTest, ReshapeMovesSplitsAlongDimGroups) {
  SymExpr T = SymExpr::symbol("T");
  Graph g;
  TensorRef x = g.placeholder("x", {T, 32}, DType::kFloat32);
  TensorRef heads = ops::reshape(g, x, {T, 4, 8}, "heads");
  TensorRef merged = ops::reshape(g, heads, {T, 32}, "merge");
  DeducedAnnotations d = deduce_annotations(g, {{"x", A("dup{[0-1](S1:2)}")}});
  EXPECT_EQ(d.at(heads), A("dup{[0-1](S1:2)}"));  // the heads
  EXPECT_EQ(d.at(merged), A("dup{[0-1](S1:2)}"));
  // Tokens across groups and partial pass through.
  DeducedAnnotations t = deduce_annotations(g, {{"x", A("split0{[0-1](P:2);[2]()}")}});
  EXPECT_EQ(t.at(heads), A("split0{[0-1](P:2);[2]()}"));
  // 8 pieces cannot cut 4 heads.
  EXPECT_THAT(deduce_error(g, {{"x", A("dup{[0-7](S1:8)}")}}), AllOf(HasSubstr("'heads'"), HasSubstr("divide")));

  Graph h;
  TensorRef y = h.placeholder("y", {T, 4, 8}, DType::kFloat32);
  ops::reshape(h, y, {T, 32}, "merge");
  // A split of the inner dim of a merged group cannot be carried.
  EXPECT_THAT(deduce_error(h, {{"y", A("dup{[0-1](S2:2)}")}}), AllOf(HasSubstr("'merge'"), HasSubstr("Reshard")));
}

TEST(DeductionTest, RopePositionsFollowTheTokenSplit) {
  Graph g;
  TensorRef x = g.placeholder("x", {8, 4, 8}, DType::kFloat32);
  TensorRef pos = g.placeholder("pos", {8}, DType::kInt64);
  TensorRef y = ops::rope(g, x, pos, 10000.0, "rope");
  // Heads split (TP): positions duplicated.
  EXPECT_EQ(deduce_annotations(g, {{"x", A("dup{[0-3](D:2,S1:2)}")}, {"pos", A("dup{[0-3](D:4)}")}}).at(y),
            A("dup{[0-3](D:2,S1:2)}"));
  // Tokens split (sequence parallel): positions split alike.
  EXPECT_EQ(deduce_annotations(g, {{"x", A("dup{[0-1](S0:2)}")}, {"pos", A("dup{[0-1](S0:2)}")}}).at(y),
            A("dup{[0-1](S0:2)}"));
  EXPECT_THAT(deduce_error(g, {{"x", A("dup{[0-1](S0:2)}")}, {"pos", A("dup{[0-1](D:2)}")}}),
              AllOf(HasSubstr("'rope'"), HasSubstr("input 1")));
  EXPECT_THAT(deduce_error(g, {{"x", A("dup{[0-1](S2:2)}")}, {"pos", A("dup{[0-1](D:2)}")}}),
              AllOf(HasSubstr("'rope'"), HasSubstr("head dim")));
}

TEST(DeductionTest, BiasFollowsTheLastDimAndItsGradientSumsTheOthers) {
  Graph g;
  TensorRef x = g.placeholder("x", {8, 6}, DType::kFloat32);
  TensorRef b = g.placeholder("b", {6}, DType::kFloat32);
  TensorRef y = ops::bias_add(g, x, b, "bias");
  TensorRef db = g.add_op1(OpKind::kBiasAddBwd, "bias.bwd", {y});
  // Column-parallel output: the bias is split alike; the gradient of the bias likewise.
  DeducedAnnotations col = deduce_annotations(g, {{"x", A("dup{[0-1](S1:2)}")}, {"b", A("dup{[0-1](S0:2)}")}});
  EXPECT_EQ(col.at(y), A("dup{[0-1](S1:2)}"));
  EXPECT_EQ(col.at(db), A("dup{[0-1](S0:2)}"));
  // Tokens split across pipelines, duplicated in each: a duplicated bias; its gradient is a partial sum.
  DeducedAnnotations dp = deduce_annotations(
      g, {{"x", A("split0{[0-1](D:2);[2-3](D:2)}")}, {"b", A("dup{[0-1](D:2);[2-3](D:2)}")}});
  EXPECT_EQ(dp.at(db), A("partial{[0-1](D:2);[2-3](D:2)}"));
  // A partial x would add the bias once per summand; a bias split unlike x is refused too.
  EXPECT_THAT(deduce_error(g, {{"x", A("dup{[0-1](P:2)}")}, {"b", A("dup{[0-1](D:2)}")}}),
              AllOf(HasSubstr("'bias'"), HasSubstr("partial")));
  EXPECT_THAT(deduce_error(g, {{"x", A("dup{[0-1](S1:2)}")}, {"b", A("dup{[0-1](D:2)}")}}),
              AllOf(HasSubstr("'bias'"), HasSubstr("input 1")));
}

// q [8, 4, 8], k, v [8, 2, 8], cu [N + 1].
struct AttentionCase {
  Graph g;
  TensorRef q, k, v, cu, out, lse;
  AttentionCase() {
    q = g.placeholder("q", {8, 4, 8}, DType::kFloat32);
    k = g.placeholder("k", {8, 2, 8}, DType::kFloat32);
    v = g.placeholder("v", {8, 2, 8}, DType::kFloat32);
    cu = g.placeholder("cu", {SymExpr::symbol("N") + 1}, DType::kInt64);  // symbolic: per-group sizes
    auto o = g.add_op(OpKind::kAttention, "attn", {q, k, v, cu});
    out = o[0];
    lse = o[1];
  }
  Plan plan(const std::string& qkv, const std::string& cu_a) {
    return {{"q", A(qkv)}, {"k", A(qkv)}, {"v", A(qkv)}, {"cu", A(cu_a)}};
  }
};

TEST(DeductionTest, AttentionSplitsHeadsNotPackedTokens) {
  AttentionCase c;
  DeducedAnnotations d = deduce_annotations(c.g, c.plan("dup{[0-1](S1:2)}", "dup{[0-1](D:2)}"));
  EXPECT_EQ(d.at(c.out), A("dup{[0-1](S1:2)}"));
  EXPECT_EQ(d.at(c.lse), A("dup{[0-1](S0:2)}"));  // lse [Nq, T]
  // Data parallel across groups: each group packs its own sequences and cu_seqlens.
  DeducedAnnotations dp = deduce_annotations(c.g, c.plan("split0{[0-1](S1:2);[2]()}", "split0{[0-1](D:2);[2]()}"));
  EXPECT_EQ(dp.at(c.out), A("split0{[0-1](S1:2);[2]()}"));
  EXPECT_EQ(dp.at(c.lse), A("split1{[0-1](S0:2);[2]()}"));
  EXPECT_THAT(deduce_error(c.g, c.plan("split0{[0]();[1]()}", "dup{[0]();[1]()}")),
              AllOf(HasSubstr("'attn'"), HasSubstr("input 3")));
  EXPECT_THAT(deduce_error(c.g, c.plan("dup{[0-1](S0:2)}", "dup{[0-1](D:2)}")),
              AllOf(HasSubstr("'attn'"), HasSubstr("packed")));
  EXPECT_THAT(deduce_error(c.g, c.plan("dup{[0-1](P:2)}", "dup{[0-1](D:2)}")),
              AllOf(HasSubstr("'attn'"), HasSubstr("partial")));
  Plan kv_mismatch = c.plan("dup{[0-1](S1:2)}", "dup{[0-1](D:2)}");
  kv_mismatch["v"] = A("dup{[0-1](D:2)}");
  EXPECT_THAT(deduce_error(c.g, kv_mismatch), AllOf(HasSubstr("'attn'"), HasSubstr("input 2")));
}

TEST(DeductionTest, AttentionBackwardMatchesForward) {
  AttentionCase c;
  auto grads = c.g.add_op(OpKind::kAttentionBwd, "attn.bwd", {c.q, c.k, c.v, c.cu, c.out, c.lse, c.out});
  DeducedAnnotations d = deduce_annotations(c.g, c.plan("dup{[0-3](D:2,S1:2)}", "dup{[0-3](D:4)}"));
  for (TensorRef t : grads) EXPECT_EQ(d.at(t), A("dup{[0-3](D:2,S1:2)}"));
}

struct EmbeddingCase {
  Graph g;
  TensorRef table, ids, y, dtable;
  EmbeddingCase() {
    table = g.parameter("table", Shape{32, 16}, DType::kFloat32, InitSpec::zeros());
    ids = g.placeholder("ids", {8}, DType::kInt64);
    y = ops::embedding(g, table, ids, "embed");
    OpAttrs a;
    a.shape = {32, 16};
    dtable = g.add_op1(OpKind::kEmbeddingBwd, "embed.bwd", {ids, y}, a);
  }
};

TEST(DeductionTest, EmbeddingVocabParallelGivesPartial) {
  EmbeddingCase c;
  DeducedAnnotations vp = deduce_annotations(c.g, {{"table", A("dup{[0-1](S0:2)}")}, {"ids", A("dup{[0-1](D:2)}")}});
  EXPECT_EQ(vp.at(c.y), A("dup{[0-1](P:2)}"));
  DeducedAnnotations hs = deduce_annotations(c.g, {{"table", A("dup{[0-1](S1:2)}")}, {"ids", A("dup{[0-1](D:2)}")}});
  EXPECT_EQ(hs.at(c.y), A("dup{[0-1](S1:2)}"));
  EXPECT_EQ(hs.at(c.dtable), A("dup{[0-1](S1:2)}"));
  // Tokens split: rows of the output split; the table gradient sums over tokens -> partial.
  DeducedAnnotations dp = deduce_annotations(c.g, {{"table", A("dup{[0-1](D:2)}")}, {"ids", A("dup{[0-1](S0:2)}")}});
  EXPECT_EQ(dp.at(c.y), A("dup{[0-1](S0:2)}"));
  EXPECT_EQ(dp.at(c.dtable), A("dup{[0-1](P:2)}"));
  DeducedAnnotations top =
      deduce_annotations(c.g, {{"table", A("dup{[0]();[1]()}")}, {"ids", A("split0{[0]();[1]()}")}});
  EXPECT_EQ(top.at(c.dtable), A("partial{[0]();[1]()}"));
}

TEST(DeductionTest, RmsNormWeightGradientIsPartialOverTokenSplits) {
  Graph g;
  TensorRef x = g.placeholder("x", {8, 16}, DType::kFloat32);
  TensorRef w = g.parameter("w", Shape{16}, DType::kFloat32, InitSpec::ones());
  OpAttrs eps;
  eps.eps = 1e-5;
  auto fwd = g.add_op(OpKind::kRmsNorm, "norm", {x, w}, eps);
  auto bwd = g.add_op(OpKind::kRmsNormBwd, "norm.bwd", {x, w, fwd[1], fwd[0]}, eps);
  DeducedAnnotations sp = deduce_annotations(g, {{"x", A("split0{[0-1](S0:2);[2]()}")}, {"w", A("dup{[0-1](D:2);[2]()}")}});
  EXPECT_EQ(sp.at(fwd[0]), A("split0{[0-1](S0:2);[2]()}"));
  EXPECT_EQ(sp.at(fwd[1]), A("split0{[0-1](S0:2);[2]()}"));
  EXPECT_EQ(sp.at(bwd[0]), A("split0{[0-1](S0:2);[2]()}"));
  EXPECT_EQ(sp.at(bwd[1]), A("partial{[0-1](P:2);[2]()}"));
  EXPECT_THAT(deduce_error(g, {{"x", A("dup{[0-1](S1:2)}")}, {"w", A("dup{[0-1](D:2)}")}}),
              AllOf(HasSubstr("'norm'"), HasSubstr("normalized")));
  EXPECT_THAT(deduce_error(g, {{"x", A("dup{[0-1](D:2)}")}, {"w", A("dup{[0-1](S0:2)}")}}),
              AllOf(HasSubstr("'norm'"), HasSubstr("input 1")));
}

TEST(DeductionTest, CrossEntropySumsTokenSplitsToPartial) {
  Graph g;
  TensorRef logits = g.placeholder("logits", {8, 32}, DType::kFloat32);
  TensorRef targets = g.placeholder("targets", {8}, DType::kInt64);
  TensorRef scale = g.placeholder("scale", {}, DType::kFloat32);
  auto ce = g.add_op(OpKind::kCrossEntropy, "loss", {logits, targets, scale}, OpAttrs{});
  Plan p{{"logits", A("split0{[0-1](S0:2);[2]()}")},
         {"targets", A("split0{[0-1](S0:2);[2]()}")},
         {"scale", A("dup{[0-1](D:2);[2]()}")}};
  DeducedAnnotations d = deduce_annotations(g, p);
  EXPECT_EQ(d.at(ce[0]), A("partial{[0-1](P:2);[2]()}"));
  EXPECT_EQ(d.at(ce[1]), A("split0{[0-1](S0:2);[2]()}"));
  // Vocab-parallel: a vocabulary split inside a subgroup is normalized across it; the per-token
  // values are duplicated over that split.
  p["logits"] = A("split0{[0-1](S1:2);[2]()}");
  p["targets"] = A("split0{[0-1](D:2);[2]()}");
  d = deduce_annotations(g, p);
  EXPECT_EQ(d.at(ce[0]), A("partial{[0-1](D:2);[2]()}"));
  EXPECT_EQ(d.at(ce[1]), A("split0{[0-1](D:2);[2]()}"));
  // Targets split like the vocabulary, a vocabulary split across subgroups, partial logits: errors.
  p["targets"] = A("split0{[0-1](S0:2);[2]()}");
  EXPECT_THAT(deduce_error(g, p), AllOf(HasSubstr("'loss'"), HasSubstr("input 1")));
  p["logits"] = A("split1{[0-1](D:2);[2-3](D:2)}");
  p["targets"] = A("dup{[0-1](D:2);[2-3](D:2)}");
  p["scale"] = A("dup{[0-1](D:2);[2-3](D:2)}");
  EXPECT_THAT(deduce_error(g, p), AllOf(HasSubstr("'loss'"), HasSubstr("across subgroups")));
  p["logits"] = A("dup{[0-1](P:2);[2-3](D:2)}");
  EXPECT_THAT(deduce_error(g, p), AllOf(HasSubstr("'loss'"), HasSubstr("partial")));
}

// lm_head_loss deduces the logits x w^T by matmul's rule and then the loss like cross_entropy; its
// gradients are matmul's: dx partial over a vocabulary split, dw partial over a token split.
TEST(DeductionTest, LmHeadLossDeducesTheLogitsOfItsProduct) {
  Graph g;
  TensorRef x = g.placeholder("x", {8, 16}, DType::kFloat32);
  TensorRef w = g.parameter("w", Shape{32, 16}, DType::kFloat32, InitSpec::zeros());
  TensorRef targets = g.placeholder("targets", {8}, DType::kInt64);
  TensorRef scale = g.placeholder("scale", {}, DType::kFloat32);
  auto fwd = g.add_op(OpKind::kLmHeadLoss, "loss", {x, w, targets, scale}, OpAttrs{});
  TensorRef dloss = g.placeholder("dloss", {}, DType::kFloat32);
  auto bwd = g.add_op(OpKind::kLmHeadLossBwd, "loss.bwd", {x, w, targets, fwd[1], scale, dloss}, OpAttrs{});
  // Vocab-parallel head (w split on V over 2 TP ranks), tokens split across 2 pipelines.
  Plan p{{"x", A("split0{[0-1](D:2);[2-3](D:2)}")},
         {"w", A("dup{[0-1](S0:2);[2-3](S0:2)}")},
         {"targets", A("split0{[0-1](D:2);[2-3](D:2)}")},
         {"scale", A("dup{[0-1](D:2);[2-3](D:2)}")},
         {"dloss", A("dup{[0-1](D:2);[2-3](D:2)}")}};
  DeducedAnnotations d = deduce_annotations(g, p);
  EXPECT_EQ(d.at(fwd[0]), A("partial{[0-1](D:2);[2-3](D:2)}"));
  EXPECT_EQ(d.at(fwd[1]), A("split0{[0-1](D:2);[2-3](D:2)}"));
  EXPECT_EQ(d.at(bwd[0]), A("split0{[0-1](P:2);[2-3](P:2)}"));
  EXPECT_EQ(d.at(bwd[1]), A("partial{[0-1](S0:2);[2-3](S0:2)}"));
  // Targets split like the vocabulary, x split on H (partial logits): errors naming the op.
  p["targets"] = A("split0{[0-1](S0:2);[2-3](S0:2)}");
  EXPECT_THAT(deduce_error(g, p), AllOf(HasSubstr("'loss'"), HasSubstr("input 2")));
  p["targets"] = A("split0{[0-1](D:2);[2-3](D:2)}");
  p["x"] = A("split0{[0-1](S1:2);[2-3](S1:2)}");
  p["w"] = A("dup{[0-1](S1:2);[2-3](S1:2)}");
  EXPECT_THAT(deduce_error(g, p), AllOf(HasSubstr("'loss'"), HasSubstr("partial"), HasSubstr("input 0 (x) or 1 (w)")));
}

TEST(DeductionTest, ReshardTakesThePlanOrIsTheIdentity) {
  Graph g;
  TensorRef x = g.placeholder("x", {8, 16}, DType::kFloat32);
  TensorRef r = ops::reshard(g, x, "r");
  TensorRef s = ops::reshard(g, r, "s");
  DeducedAnnotations d = deduce_annotations(g, {{"x", A("dup{[0-1](P:2)}")}, {"r", A("dup{[2-3](S0:2)}")}});
  EXPECT_EQ(d.at(r), A("dup{[2-3](S0:2)}"));
  EXPECT_EQ(d.at(s), A("dup{[2-3](S0:2)}"));
  EXPECT_EQ(adjoint_annotation(A("partial{[0-3](S0:2,P:2);[4-7](D:2,P:2)}")), A("dup{[0-3](S0:2,D:2);[4-7](D:4)}"));
}

// Paper Figure 4 (right), 2-D: X [T, H] and W1 [H, F], W2 [F, H] over three sharding subgroups —
// TP on GPUs {0, 3}; GPU 1 running the first op alone then handing over (PP, a BSR) to a TP pair
// {5, 6}; and GPUs {2, 4} splitting the tokens (CP, standing in for the sequence dim) — with data
// parallelism across the subgroups (X split0, weights dup):
//   H1 = X W1     ->  Reshard "pp" (BSR 1 -> 5,6)  ->  Z = H1 W2  ->  Reshard "out" (RS in TP groups)
//   -> loss = cross_entropy(out, targets); backward to W1, W2.
struct Figure4 {
  Graph g;
  TensorRef x, w1, w2, targets, scale, h1, pp, z, out, loss, dw1, dw2;
  Figure4() {
    SymExpr T = SymExpr::symbol("T");
    x = g.placeholder("X", {T, 8}, DType::kFloat32);
    targets = g.placeholder("targets", {T}, DType::kInt64);
    scale = g.placeholder("loss_scale", {}, DType::kFloat32);
    w1 = g.parameter("W1", Shape{8, 16}, DType::kFloat32, InitSpec::zeros());
    w2 = g.parameter("W2", Shape{16, 8}, DType::kFloat32, InitSpec::zeros());
    h1 = ops::matmul(g, x, w1, {}, "dot1");
    pp = ops::reshard(g, h1, "pp");
    z = ops::matmul(g, pp, w2, {}, "dot2");
    out = ops::reshard(g, z, "out");
    loss = ops::cross_entropy(g, out, targets, scale, -100, "loss");
    auto grads = build_backward(g, loss, {w1, w2});
    dw1 = grads[0];
    dw2 = grads[1];
  }
  static sharding::AnnotationPlan plan() {
    sharding::AnnotationPlan p;
    p.set("X", A("split0{[0,3](D:2);[1]();[2,4](S0:2)}"));
    p.set("W1", A("dup{[0,3](S1:2);[1]();[2,4](D:2)}"));
    p.set("pp", A("split0{[0,3](S1:2);[5-6](S1:2);[2,4](S0:2)}"));
    p.set("W2", A("dup{[0,3](S0:2);[5-6](S0:2);[2,4](D:2)}"));
    p.set("out", A("split0{[0,3](S0:2);[5-6](S0:2);[2,4](S0:2)}"));
    p.set("targets", A("split0{[0,3](S0:2);[5-6](S0:2);[2,4](S0:2)}"));
    p.set("loss_scale", A("dup{[0,3](D:2);[5-6](D:2);[2,4](D:2)}"));
    return p;
  }
};

TEST(DeductionTest, Figure4RightEndToEnd) {
  Figure4 f;
  sharding::AnnotationPlan plan = Figure4::plan();
  DeducedAnnotations d = deduce_annotations(f.g, plan);
  // Forward: column-parallel dot in the TP group, whole on GPU 1, token-split on {2, 4}.
  EXPECT_EQ(d.at(f.h1), A("split0{[0,3](S1:2);[1]();[2,4](S0:2)}"));
  // Row-parallel dot: partial in both TP groups, still token-split on {2, 4}: "out" is then a
  // reduce-scatter in the TP groups and an identity on {2, 4}.
  EXPECT_EQ(d.at(f.z), A("split0{[0,3](P:2);[5-6](P:2);[2,4](S0:2)}"));
  EXPECT_EQ(d.at(f.loss), A("partial{[0,3](P:2);[5-6](P:2);[2,4](P:2)}"));
  // Backward: "out.bwd" goes back to Z's layout with partial -> duplicate.
  TensorRef out_bwd = *f.g.find("out.bwd");
  EXPECT_EQ(d.at(out_bwd), A("split0{[0,3](D:2);[5-6](D:2);[2,4](S0:2)}"));
  // "pp.bwd" returns the gradient to H1's devices, GPU 1 included.
  EXPECT_EQ(d.at(*f.g.find("pp.bwd")), A("split0{[0,3](S1:2);[1]();[2,4](S0:2)}"));
  // Weight gradients: matching the TP shards where the weight is split; partial where the tokens
  // were split (inside {2, 4}, and across the subgroups: the data-parallel sum).
  EXPECT_EQ(d.at(f.dw2), A("partial{[0,3](S0:2);[5-6](S0:2);[2,4](P:2)}"));
  EXPECT_EQ(d.at(f.dw1), A("partial{[0,3](S1:2);[1]();[2,4](P:2)}"));

  std::vector<GradientSync> syncs = gradient_syncs(f.g, d, plan, {f.w1, f.w2}, {f.dw1, f.dw2});
  ASSERT_EQ(syncs.size(), 2u);
  EXPECT_EQ(syncs[0].param, "W1");
  EXPECT_EQ(syncs[0].target, plan.at("W1"));
  EXPECT_TRUE(syncs[0].needs_reshard());  // partial -> dup: the data-parallel all-reduce
  EXPECT_EQ(syncs[1].deduced, d.at(f.dw2));
}

TEST(DeductionTest, Figure4WithoutTheReshardIsAnErrorNamingTheOp) {
  Figure4 f;
  sharding::AnnotationPlan plan = Figure4::plan();
  plan.set("pp", A("split0{[0,3](S1:2);[1]();[2,4](S0:2)}"));  // W2 lives on 5,6, H1 on 1
  EXPECT_THAT(deduce_error(f.g, plan.tensors()),
              AllOf(HasSubstr("'dot2'"), HasSubstr("[1]()"), HasSubstr("[5-6](S0:2)"), HasSubstr("Reshard")));
}

TEST(DeductionTest, GradientSeedIsDuplicatedOverTheLossDevices) {
  Figure4 f;
  DeducedAnnotations d = deduce_annotations(f.g, Figure4::plan());
  TensorRef seed;
  for (int id = 0; id < f.g.num_ops(); ++id) {
    if (f.g.op(id).kind == OpKind::kFull) seed = TensorRef{id, 0};
  }
  ASSERT_TRUE(seed.valid());
  EXPECT_EQ(d.at(seed), A("dup{[0,3](D:2);[5-6](D:2);[2,4](D:2)}"));
}

TEST(DeductionTest, EveryOpKindHasARule) {
  for (int k = 0; k < kNumOpKinds; ++k) {
    EXPECT_TRUE(static_cast<bool>(OpRegistry::standard().get(static_cast<OpKind>(k)).deduce)) << k;
  }
}

}  // namespace
}  // namespace hspmd::graph
