// Every op kind's gradient builder against central finite differences in float64, each on a tiny
// graph whose scalar loss is a cross-entropy head over the op's output.
#include <gtest/gtest.h>

#include "graph/gradcheck.h"
#include "hspmd/graph/ops.h"
#include "hspmd/kernels/threading.h"

namespace hspmd::graph {
namespace {

using testing::check_gradients;
using testing::uniform;
constexpr DType f64 = DType::kFloat64;

class OpGrad : public ::testing::Test {
 protected:
  void SetUp() override { kernels::set_num_threads(1); }  // tiny tensors: threads only cost
  // A float64 placeholder fed with uniform values.
  TensorRef input(const std::string& name, const Shape& shape, uint64_t seed, double scale = 1.0) {
    feeds[name] = uniform(shape, seed, -scale, scale);
    return g.placeholder(name, to_sym_shape(shape), f64);
  }
  TensorRef param(const std::string& name, const Shape& shape, uint64_t seed) {
    params[name] = uniform(shape, seed);
    return g.parameter(name, shape, f64, InitSpec::normal(1.0));
  }
  TensorRef ids(const std::string& name, std::vector<int64_t> values) {
    int64_t n = static_cast<int64_t>(values.size());
    feeds[name] = Tensor::from_vector(Shape{n}, values);
    return g.placeholder(name, {n}, DType::kInt64);
  }
  // loss = 0.37 * sum of token cross-entropies of `out` viewed as [rows, last dim]; one row ignored.
  TensorRef loss_of(TensorRef out) {
    const SymShape& s = g.info(out).shape;
    int64_t cols = s.back().constant_value();
    int64_t rows = sym_numel(s).constant_value() / cols;
    TensorRef logits = ops::reshape(g, out, {rows, cols}, "head.view");
    std::vector<int64_t> t(rows);
    for (int64_t r = 0; r < rows; ++r) t[r] = (r * 7 + 3) % cols;
    t[rows / 2] = -100;
    TensorRef targets = ids("head.targets", t);
    feeds["head.scale"] = Tensor::full(Shape{}, f64, 0.37);
    TensorRef scale = g.placeholder("head.scale", {}, f64);
    return ops::cross_entropy(g, logits, targets, scale, -100, "head.loss");
  }
  double check(TensorRef loss, const std::vector<TensorRef>& wrt) {
    return check_gradients(g, loss, wrt, feeds, params);
  }

  Graph g;
  TensorMap feeds, params;
};

TEST_F(OpGrad, CrossEntropy) {
  TensorRef x = input("x", {5, 7}, 1, 3.0);
  EXPECT_LT(check(loss_of(x), {x}), 1e-7);
}

TEST_F(OpGrad, MatmulAllTransposes) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      g = Graph();
      feeds.clear();
      params.clear();
      TensorRef a = input("a", ta ? Shape{4, 3} : Shape{3, 4}, 2);
      TensorRef b = param("b", tb ? Shape{5, 4} : Shape{4, 5}, 3);
      TensorRef y = ops::matmul(g, a, b, {.trans_a = ta, .trans_b = tb}, "mm");
      EXPECT_EQ(g.info(y).shape, (SymShape{3, 5}));
      EXPECT_LT(check(loss_of(y), {a, b}), 1e-7) << "trans_a " << ta << " trans_b " << tb;
    }
  }
}

TEST_F(OpGrad, Embedding) {
  TensorRef table = param("table", {6, 4}, 4);
  TensorRef tok = ids("ids", {5, 0, 5, 2, 1});  // id 5 twice: its row gets both gradients
  EXPECT_LT(check(loss_of(ops::embedding(g, table, tok, "emb")), {table}), 1e-7);
}

TEST_F(OpGrad, RmsNorm) {
  TensorRef x = input("x", {4, 6}, 5);
  TensorRef w = param("w", {6}, 6);
  EXPECT_LT(check(loss_of(ops::rms_norm(g, x, w, 1e-5, "norm")), {x, w}), 1e-7);
}

TEST_F(OpGrad, Rope) {
  TensorRef x = input("x", {5, 2, 4}, 7);
  TensorRef pos = ids("pos", {0, 1, 2, 0, 1});
  EXPECT_LT(check(loss_of(ops::rope(g, x, pos, 10000.0, "rope")), {x}), 1e-7);
}

TEST_F(OpGrad, RopeWithScaledInverseFrequencies) {
  TensorRef x = input("x", {5, 2, 4}, 7);
  TensorRef pos = ids("pos", {0, 1, 2, 0, 40});
  EXPECT_LT(check(loss_of(ops::rope(g, x, pos, std::vector<double>{1.0, 0.0125}, "rope")), {x}), 1e-7);
}

TEST_F(OpGrad, BiasAdd) {
  TensorRef x = input("x", {4, 6}, 11);
  TensorRef b = param("b", {6}, 12);
  EXPECT_LT(check(loss_of(ops::bias_add(g, x, b, "bias")), {x, b}), 1e-7);
}

TEST_F(OpGrad, AttentionGqaTwoSequences) {
  TensorRef q = input("q", {5, 4, 2}, 8);
  TensorRef k = input("k", {5, 2, 2}, 9);
  TensorRef v = input("v", {5, 2, 2}, 10);
  TensorRef cu = ids("cu", {0, 3, 5});
  EXPECT_LT(check(loss_of(ops::attention(g, q, k, v, cu, "attn")), {q, k, v}), 1e-7);
}

TEST_F(OpGrad, AttentionSlidingWindow) {
  // Windows of 2 and 4 over sequences of 6 and 3 (longer and shorter than the window), GQA.
  for (int64_t window : {2, 4}) {
    g = Graph();
    feeds.clear();
    TensorRef q = input("q", {9, 4, 2}, 8);
    TensorRef k = input("k", {9, 2, 2}, 9);
    TensorRef v = input("v", {9, 2, 2}, 10);
    TensorRef cu = ids("cu", {0, 6, 9});
    TensorRef o = ops::attention(g, q, k, v, cu, "attn", 0.0, false, window);
    EXPECT_LT(check(loss_of(o), {q, k, v}), 1e-7) << "window " << window;
  }
}

TEST_F(OpGrad, ContextAttentionSlidingWindowInZigzagOrder) {
  // Every row, in a permuted (non-identity) order: the context-parallel kernel's own path.
  TensorRef q = input("q", {8, 2, 2}, 20);
  TensorRef k = input("k", {8, 1, 2}, 21);
  TensorRef v = input("v", {8, 1, 2}, 22);
  TensorRef cu = ids("cu", {0, 5, 8});
  TensorRef q_index = ids("q_index", {0, 7, 1, 6, 2, 5, 3, 4});
  TensorRef kv_index = ids("kv_index", {0, 7, 1, 6, 2, 5, 3, 4});
  TensorRef o = ops::context_attention(g, q, k, v, cu, q_index, kv_index, "attn", 0.0, false, 3);
  EXPECT_LT(check(loss_of(o), {q, k, v}), 1e-7);
}

TEST_F(OpGrad, RmsNormWithWeightOffset) {
  TensorRef x = input("x", {4, 6}, 5);
  TensorRef w = param("w", {6}, 6);
  EXPECT_LT(check(loss_of(ops::rms_norm(g, x, w, 1e-5, "norm", 1.0)), {x, w}), 1e-7);
}

TEST_F(OpGrad, GegluTanh) {
  TensorRef a = input("gate", {3, 4}, 11, 3.0);
  TensorRef b = input("up", {3, 4}, 12);
  EXPECT_LT(check(loss_of(ops::geglu_tanh(g, a, b, "geglu")), {a, b}), 1e-7);
}

TEST_F(OpGrad, Scale) {
  TensorRef x = input("x", {3, 4}, 13);
  EXPECT_LT(check(loss_of(ops::scale(g, x, -2.5, "scaled")), {x}), 1e-7);
}

TEST_F(OpGrad, SoftCappedLosses) {
  TensorRef x = input("x", {5, 7}, 1, 3.0);
  TensorRef targets = ids("targets", {3, -100, 0, 6, 2});
  feeds["scale"] = Tensor::full(Shape{}, f64, 0.37);
  TensorRef scale = g.placeholder("scale", {}, f64);
  EXPECT_LT(check(ops::cross_entropy(g, x, targets, scale, -100, "loss", 2.0), {x}), 1e-7);
  g = Graph();
  feeds.clear();
  TensorRef h = input("h", {5, 4}, 2, 2.0);
  TensorRef w = param("w", {7, 4}, 3);
  targets = ids("targets", {3, -100, 0, 6, 2});
  feeds["scale"] = Tensor::full(Shape{}, f64, 0.37);
  scale = g.placeholder("scale", {}, f64);
  EXPECT_LT(check(ops::lm_head_loss(g, h, w, targets, scale, -100, false, "loss", 2.0), {h, w}), 1e-7);
}

TEST_F(OpGrad, Swiglu) {
  TensorRef a = input("gate", {3, 4}, 11, 3.0);
  TensorRef b = input("up", {3, 4}, 12);
  EXPECT_LT(check(loss_of(ops::swiglu(g, a, b, "swiglu")), {a, b}), 1e-7);
}

TEST_F(OpGrad, AddIncludingSameTensorTwice) {
  TensorRef a = input("a", {3, 4}, 13);
  TensorRef b = input("b", {3, 4}, 14);
  TensorRef s = ops::add(g, a, b, "s");
  EXPECT_LT(check(loss_of(ops::add(g, s, a, "s2")), {a, b}), 1e-7);  // a reaches the loss twice
}

TEST_F(OpGrad, ReshapeAndReshard) {
  TensorRef x = input("x", {2, 6}, 15);
  TensorRef y = ops::reshape(g, x, {4, 3}, "view");
  TensorRef z = ops::reshard(g, y, "marker");
  EXPECT_LT(check(loss_of(z), {x}), 1e-7);
  // The backward of a reshard is a reshard named after it, so plans can annotate it.
  ASSERT_TRUE(g.find("marker.bwd").has_value());
  EXPECT_EQ(g.op(g.find("marker.bwd")->op).kind, OpKind::kReshard);
  EXPECT_TRUE(g.op(g.find("marker.bwd")->op).backward);
}

TEST_F(OpGrad, ParameterUsedTwiceAccumulates) {
  // y = (x W^T) W^T: W gets one partial gradient per use, summed by a grad_acc op.
  TensorRef x = input("x", {3, 4}, 16);
  TensorRef w = param("w", {4, 4}, 17);
  TensorRef h = ops::matmul(g, x, w, {.trans_b = true}, "mm1");
  TensorRef y = ops::matmul(g, h, w, {.trans_b = true}, "mm2");
  EXPECT_LT(check(loss_of(y), {w}), 1e-7);
  int accumulations = 0;
  for (int i = 0; i < g.num_ops(); ++i) {
    if (g.op(i).name.find("w.grad_acc") != std::string::npos) ++accumulations;
  }
  EXPECT_EQ(accumulations, 1);
}

TEST(OpShapes, ErrorsNameTheOpAndInputs) {
  Graph g;
  TensorRef a = g.placeholder("a", {3, 4}, DType::kFloat32);
  TensorRef b = g.placeholder("b", {5, 6}, DType::kFloat32);
  try {
    ops::matmul(g, a, b, {}, "bad_mm");
    FAIL() << "no throw";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("op 'bad_mm' (matmul)"), std::string::npos) << what;
    EXPECT_NE(what.find("inner dims differ"), std::string::npos) << what;
  }
  EXPECT_THROW(g.placeholder("a", {1}, DType::kFloat32), Error);  // duplicate name
  EXPECT_THROW(ops::reshape(g, a, {5, 2}, "bad_view"), Error);    // 12 elements into 10
}

}  // namespace
}  // namespace hspmd::graph
