// Deduction by an op's structure (graph/deduction_memo.h): an op differing from an earlier one only
// in its name and layer takes the earlier outputs; any difference a rule can read (kind,
// attributes, shapes, dtypes, input or planned annotations) is a miss. The whole-graph result
// against deducing every op is checked on Llama's graphs (tests/models/llama_deduction_test.cc).
#include "hspmd/graph/deduction_memo.h"

#include <gtest/gtest.h>

#include "hspmd/core/error.h"
#include "hspmd/graph/deduction.h"
#include "hspmd/graph/ops.h"

namespace hspmd::graph {
namespace {

using sharding::Annotation;

Annotation A(const std::string& text) { return Annotation::parse(text); }

// Two decoder-like layers of the same ops: x -> matmul(w_l) -> swiglu, tokens split over two
// pipelines, plus look-alikes that differ in one thing each.
struct Layers {
  Graph g;
  TensorRef x, w0, w1, y0, y1;
  Layers() {
    x = g.placeholder("x", {8, 16}, DType::kFloat32);
    w0 = g.parameter("w0", Shape{16, 16}, DType::kFloat32, InitSpec::zeros());
    w1 = g.parameter("w1", Shape{16, 16}, DType::kFloat32, InitSpec::zeros());
    g.set_layer(0);
    y0 = ops::matmul(g, x, w0, {.trans_b = true}, "layers.0.proj");
    g.set_layer(1);
    y1 = ops::matmul(g, x, w1, {.trans_b = true}, "layers.1.proj");
  }
  const Op& op(TensorRef t) const { return g.op(t.op); }
  std::vector<TensorInfo> infos(TensorRef t) const {
    std::vector<TensorInfo> out;
    for (TensorRef in : op(t).inputs) out.push_back(g.info(in));
    return out;
  }
};

TEST(DeductionMemoTest, AnOpOfTheSameStructureTakesTheKeptOutputs) {
  Layers l;
  const std::vector<Annotation> inputs{A("split0{[0-1](D:2);[2-3](D:2)}"), A("dup{[0-1](S0:2);[2-3](S0:2)}")};
  const std::vector<Annotation> outputs{A("split0{[0-1](S1:2);[2-3](S1:2)}")};
  DeductionMemo memo;
  EXPECT_EQ(memo.find(l.op(l.y0), l.infos(l.y0), inputs, nullptr), nullptr);
  memo.insert(l.op(l.y0), l.infos(l.y0), inputs, nullptr, outputs);
  // Layer 1's projection: another name and layer, the same structure.
  const std::vector<Annotation>* kept = memo.find(l.op(l.y1), l.infos(l.y1), inputs, nullptr);
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(*kept, outputs);
  EXPECT_EQ(memo.hits(), 1u);
}

TEST(DeductionMemoTest, AnyDifferenceARuleReadsIsAMiss) {
  Layers l;
  const std::vector<Annotation> inputs{A("dup{[0-1](D:2)}"), A("dup{[0-1](S0:2)}")};
  DeductionMemo memo;
  memo.insert(l.op(l.y0), l.infos(l.y0), inputs, nullptr, {A("dup{[0-1](S1:2)}")});

  // Other input annotations: the same layout on other devices, or another layout.
  EXPECT_EQ(memo.find(l.op(l.y1), l.infos(l.y1), {A("dup{[2-3](D:2)}"), A("dup{[2-3](S0:2)}")}, nullptr), nullptr);
  EXPECT_EQ(memo.find(l.op(l.y1), l.infos(l.y1), {A("dup{[0-1](D:2)}"), A("dup{[0-1](S1:2)}")}, nullptr), nullptr);
  // A planned annotation where there was none.
  const Annotation planned = A("dup{[0-1](S1:2)}");
  EXPECT_EQ(memo.find(l.op(l.y1), l.infos(l.y1), inputs, &planned), nullptr);
  // Other attributes (no transpose: a [16, 16] weight read the other way).
  Op other_attrs = l.op(l.y1);
  other_attrs.attrs.trans_b = false;
  EXPECT_EQ(memo.find(other_attrs, l.infos(l.y1), inputs, nullptr), nullptr);
  // Other input shapes or dtypes.
  std::vector<TensorInfo> other_infos = l.infos(l.y1);
  other_infos[0].shape = {SymExpr::symbol("T"), 16};
  EXPECT_EQ(memo.find(l.op(l.y1), other_infos, inputs, nullptr), nullptr);
  other_infos = l.infos(l.y1);
  other_infos[1].dtype = DType::kFloat64;
  EXPECT_EQ(memo.find(l.op(l.y1), other_infos, inputs, nullptr), nullptr);
  // Other output shapes, or another kind on the same inputs.
  Op other_outputs = l.op(l.y1);
  other_outputs.outputs[0].shape = {8, 32};
  EXPECT_EQ(memo.find(other_outputs, l.infos(l.y1), inputs, nullptr), nullptr);
  Op other_kind = l.op(l.y1);
  other_kind.kind = OpKind::kAdd;
  EXPECT_EQ(memo.find(other_kind, l.infos(l.y1), inputs, nullptr), nullptr);
  EXPECT_EQ(memo.hits(), 0u);
  EXPECT_NE(memo.find(l.op(l.y1), l.infos(l.y1), inputs, nullptr), nullptr);
}

TEST(DeductionMemoTest, AFailingLayerIsNamedAfterAnEqualOneSucceeded) {
  // Layer 0 deduces; layer 1 has the same structure but its weight on other devices: the error
  // names layer 1's op, as deducing every op does.
  Layers l;
  const std::map<std::string, Annotation> plan{
      {"x", A("dup{[0-1](D:2)}")}, {"w0", A("dup{[0-1](S0:2)}")}, {"w1", A("dup{[2-3](S0:2)}")}};
  for (DeductionReuse reuse : {DeductionReuse::kByStructure, DeductionReuse::kEveryOp}) {
    try {
      deduce_annotations(l.g, plan, reuse);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'layers.1.proj'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace hspmd::graph
