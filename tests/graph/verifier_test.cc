// The op registry is complete and consistent; the verifier accepts built graphs and rejects a
// forward op that consumes a backward tensor.
#include "hspmd/graph/verifier.h"

#include <gtest/gtest.h>

#include <set>

#include "hspmd/graph/autograd.h"
#include "hspmd/graph/op_registry.h"
#include "hspmd/graph/ops.h"

namespace hspmd::graph {
namespace {

TEST(OpRegistry, OneEntryPerKindWithUniqueNames) {
  const OpRegistry& r = OpRegistry::standard();
  std::set<std::string> names;
  for (int k = 0; k < kNumOpKinds; ++k) {
    const OpDef& d = r.get(static_cast<OpKind>(k));
    EXPECT_EQ(static_cast<int>(d.kind), k);
    EXPECT_TRUE(names.insert(d.name).second) << d.name;
    EXPECT_TRUE(d.infer) << d.name;
  }
  EXPECT_EQ(op_kind_name(OpKind::kRmsNormBwd), "rms_norm_bwd");
  // Every forward kind that takes floating inputs has a gradient builder.
  for (OpKind k : {OpKind::kEmbedding, OpKind::kRmsNorm, OpKind::kMatmul, OpKind::kRope, OpKind::kAttention,
                   OpKind::kSwiglu, OpKind::kAdd, OpKind::kReshape, OpKind::kReshard, OpKind::kCrossEntropy,
                   OpKind::kBiasAdd, OpKind::kGegluTanh, OpKind::kScale}) {
    EXPECT_TRUE(r.get(k).grad) << op_kind_name(k);
  }
}

TEST(Verifier, AcceptsForwardAndBackwardRejectsForwardUseOfAGradient) {
  Graph g;
  TensorRef x = g.placeholder("x", {SymExpr::symbol("T"), 4}, DType::kFloat32);
  TensorRef w = g.parameter("w", Shape{4, 4}, DType::kFloat32, InitSpec::normal(0.1));
  TensorRef t = g.placeholder("t", {SymExpr::symbol("T")}, DType::kInt64);
  TensorRef s = g.placeholder("s", {}, DType::kFloat32);
  TensorRef y = ops::matmul(g, x, w, {.trans_b = true}, "y");
  TensorRef loss = ops::cross_entropy(g, y, t, s, -100, "loss");
  std::vector<TensorRef> grads = build_backward(g, loss, {w});
  EXPECT_NO_THROW(verify(g));
  EXPECT_TRUE(g.op(grads[0].op).backward);
  EXPECT_NE(g.to_string().find("'y.grad_b'"), std::string::npos) << g.to_string();

  ops::add(g, w, grads[0], "w_plus_grad");  // a forward op reading a gradient
  try {
    verify(g);
    FAIL() << "no throw";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("'w_plus_grad' (add)"), std::string::npos) << what;
    EXPECT_NE(what.find("consumes backward tensor"), std::string::npos) << what;
  }
}

TEST(Autograd, RefusesANonScalarLossAndSkipsUnreachableParameters) {
  Graph g;
  TensorRef x = g.placeholder("x", {3, 4}, DType::kFloat32);
  TensorRef w = g.parameter("w", Shape{4, 4}, DType::kFloat32, InitSpec::normal(0.1));
  TensorRef unused = g.parameter("unused", Shape{4}, DType::kFloat32, InitSpec::zeros());
  TensorRef y = ops::matmul(g, x, w, {}, "y");
  EXPECT_THROW(build_backward(g, y, {w}), Error);
  TensorRef t = g.placeholder("t", {3}, DType::kInt64);
  TensorRef s = g.placeholder("s", {}, DType::kFloat32);
  std::vector<TensorRef> grads = build_backward(g, ops::cross_entropy(g, y, t, s, -100, "loss"), {w, unused});
  EXPECT_TRUE(grads[0].valid());
  EXPECT_FALSE(grads[1].valid());
}

}  // namespace
}  // namespace hspmd::graph
