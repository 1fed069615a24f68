// Symbolic shapes through a graph: one graph, several batch shapes; divisibility constraints
// reported at bind time naming the symbol, the expression and the op.
#include <gtest/gtest.h>

#include "graph/gradcheck.h"
#include "hspmd/graph/ops.h"
#include "hspmd/kernels/matmul.h"
#include "hspmd/kernels/threading.h"

namespace hspmd::graph {
namespace {

const SymExpr T = SymExpr::symbol("T");

// x [T, 4] -> pairs [T/2, 8] -> y = pairs @ w [T/2, 3]
struct PairGraph {
  Graph g;
  TensorRef x, w, pairs, y;
  PairGraph() {
    x = g.placeholder("x", {T, 4}, DType::kFloat64);
    w = g.parameter("w", Shape{8, 3}, DType::kFloat64, InitSpec::normal(1.0));
    pairs = ops::reshape(g, x, {SymExpr::exact_div(T, 2), 8}, "pairs");
    y = ops::matmul(g, pairs, w, {}, "proj");
  }
};

TEST(Symbolic, ShapesPropagateThroughOps) {
  PairGraph p;
  EXPECT_EQ(to_string(p.g.info(p.pairs).shape), "[T/2, 8]");
  EXPECT_EQ(to_string(p.g.info(p.y).shape), "[T/2, 3]");
}

TEST(Symbolic, OneGraphRunsSeveralBatchShapes) {
  kernels::set_num_threads(1);
  PairGraph p;
  TensorMap params = init_parameters(p.g, 3);
  Executor ex(p.g, {p.y});
  for (int64_t t : {2, 6, 10, 64}) {
    Tensor x = testing::uniform({t, 4}, static_cast<uint64_t>(t));
    Tensor y = ex.run({{"x", x}}, params)[0];
    EXPECT_EQ(ex.stats().binding.at("T"), t);
    ASSERT_EQ(y.shape(), (Shape{t / 2, 3}));
    Tensor expected = Tensor::empty({t / 2, 3}, DType::kFloat64);
    kernels::matmul(x.reshape({t / 2, 8}), params.at("w"), expected);
    EXPECT_LT(testing::relative_error(y, expected), 1e-15) << "T = " << t;
  }
}

TEST(Symbolic, ViolatedDivisibilityNamesSymbolExpressionAndOp) {
  PairGraph p;
  Executor ex(p.g, {p.y});
  try {
    ex.run({{"x", testing::uniform({7, 4}, 1)}}, init_parameters(p.g, 3));
    FAIL() << "no throw";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("op 'pairs' (reshape)"), std::string::npos) << what;
    EXPECT_NE(what.find("T/2"), std::string::npos) << what;
    EXPECT_NE(what.find("T = 7"), std::string::npos) << what;
  }
}

TEST(Symbolic, DerivedPlaceholderDimsAreSolvedAndChecked) {
  Graph g;
  SymExpr n = SymExpr::symbol("N");
  g.placeholder("offsets", {n + 1}, DType::kInt64);
  g.placeholder("lengths", {n}, DType::kInt64);
  TensorMap feeds{{"offsets", Tensor::zeros({4}, DType::kInt64)}, {"lengths", Tensor::zeros({3}, DType::kInt64)}};
  EXPECT_EQ(g.bind(feeds).at("N"), 3);
  feeds["lengths"] = Tensor::zeros({5}, DType::kInt64);
  try {
    g.bind(feeds);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("placeholder 'lengths' dim 0 is N = 3, fed size 5"), std::string::npos)
        << e.what();
  }
  feeds["lengths"] = Tensor::zeros({3}, DType::kInt32);
  EXPECT_THROW(g.bind(feeds), Error);  // wrong dtype
}

}  // namespace
}  // namespace hspmd::graph
