// The executor: frees intermediates after their last use, schedules recomputation per layer,
// reports what a run needs and does; parameters are initialized reproducibly per element.
#include "hspmd/graph/executor.h"

#include <gtest/gtest.h>

#include <cstring>

#include "graph/gradcheck.h"
#include "hspmd/graph/ops.h"
#include "hspmd/kernels/threading.h"

namespace hspmd::graph {
namespace {

const SymExpr T = SymExpr::symbol("T");

// A residual MLP stack: x [T, 32], per layer l: x = x + swiglu(x W1_l^T, x W2_l^T); loss = CE(x).
struct Stack {
  Graph g;
  TensorRef loss;
  std::vector<TensorRef> params, grads;
  explicit Stack(int layers) {
    TensorRef x = g.placeholder("x", {T, 32}, DType::kFloat32);
    TensorRef targets = g.placeholder("targets", {T}, DType::kInt64);
    TensorRef scale = g.placeholder("scale", {}, DType::kFloat32);
    for (int l = 0; l < layers; ++l) {
      g.set_layer(l);
      std::string p = "l";  // built in steps: g++ 12 warns (-Wrestrict) on "l" + to_string(l)
      p += std::to_string(l);
      p += ".";
      TensorRef w1 = g.parameter(p + "w1", Shape{32, 32}, DType::kFloat32, InitSpec::normal(0.2));
      TensorRef w2 = g.parameter(p + "w2", Shape{32, 32}, DType::kFloat32, InitSpec::normal(0.2));
      params.insert(params.end(), {w1, w2});
      TensorRef a = ops::matmul(g, x, w1, {.trans_b = true}, p + "a");
      TensorRef b = ops::matmul(g, x, w2, {.trans_b = true}, p + "b");
      x = ops::reshard(g, ops::add(g, x, ops::swiglu(g, a, b, p + "act"), p + "res"), p + "output");
    }
    g.set_layer(-1);
    loss = ops::cross_entropy(g, x, targets, scale, -100, "loss");
    grads = build_backward(g, loss, params);
    verify(g);
  }
  std::vector<TensorRef> fetches() const {
    std::vector<TensorRef> f{loss};
    f.insert(f.end(), grads.begin(), grads.end());
    return f;
  }
  static TensorMap feeds(int64_t t) {
    std::vector<int64_t> targets(t);
    for (int64_t i = 0; i < t; ++i) targets[i] = (i * 5) % 32;
    return {{"x", testing::uniform({t, 32}, 9, -1, 1, DType::kFloat32)},
            {"targets", Tensor::from_vector(Shape{t}, targets)},
            {"scale", Tensor::full({}, DType::kFloat32, 1.0 / static_cast<double>(t))}};
  }
};

struct RunResult {
  std::vector<Tensor> out;
  size_t peak = 0;  // minus the bytes the fetched outputs hold at the end
  int ops_run = 0;
};

RunResult run(const Stack& s, ExecutorOptions options, const TensorMap& params) {
  Allocator memory;
  options.allocator = &memory;
  Executor ex(s.g, s.fetches(), options);
  RunResult r;
  std::vector<Tensor> out = ex.run(Stack::feeds(64), params);
  size_t held = 0;
  for (const Tensor& t : out) held += t.nbytes();
  r.out = out;  // outlives `memory`: each tensor's storage holds a handle on its pool
  EXPECT_EQ(memory.current_bytes(), held) << "after a run only the fetched outputs are held";
  r.peak = ex.stats().peak_bytes - held;
  r.ops_run = ex.stats().ops_run;
  return r;
}

TEST(Executor, FreesIntermediatesAndRecomputesWithIdenticalGradients) {
  kernels::set_num_threads(1);
  Stack s(4);
  TensorMap params = init_parameters(s.g, 1);
  RunResult keep = run(s, {.free_intermediates = false}, params);
  RunResult freed = run(s, {}, params);
  RunResult recompute = run(s, {.recompute = true}, params);
  EXPECT_LT(freed.peak, keep.peak);
  EXPECT_LT(recompute.peak, freed.peak);
  // Each layer's 4 inner forward kernels (2 matmuls, swiglu, add) run once more; its reshard, whose
  // output the next layer reads, is the layer's boundary: kept from F, not replayed (step_plan.h).
  EXPECT_EQ(recompute.ops_run, freed.ops_run + 4 * 4);
  EXPECT_EQ(keep.ops_run, freed.ops_run);
  for (size_t i = 0; i < keep.out.size(); ++i) {
    EXPECT_EQ(std::memcmp(keep.out[i].raw_data(), freed.out[i].raw_data(), keep.out[i].nbytes()), 0) << i;
    EXPECT_EQ(std::memcmp(keep.out[i].raw_data(), recompute.out[i].raw_data(), keep.out[i].nbytes()), 0) << i;
  }
}

TEST(Executor, RunsOnlyWhatFetchesNeedAndNamesMissingInputs) {
  Stack s(2);
  TensorMap params = init_parameters(s.g, 1);
  Executor forward(s.g, {s.loss});
  forward.run(Stack::feeds(8), params);
  for (int id : forward.schedule()) EXPECT_FALSE(s.g.op(id).backward) << s.g.op(id).name;
  params.erase("l1.w2");
  try {
    forward.run(Stack::feeds(8), params);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("op 'l1.w2' (parameter) is needed"), std::string::npos) << e.what();
  }
}

TEST(Executor, KernelErrorsNameTheOp) {
  Graph g;
  TensorRef table = g.parameter("table", Shape{4, 2}, DType::kFloat32, InitSpec::normal(1.0));
  TensorRef ids = g.placeholder("ids", {T}, DType::kInt64);
  TensorRef y = ops::embedding(g, table, ids, "lookup");
  Executor ex(g, {y});
  try {
    ex.run({{"ids", Tensor::from_vector<int64_t>(Shape{2}, {1, 9})}}, init_parameters(g, 1));  // 9 >= V
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("op 'lookup' (embedding)"), std::string::npos) << e.what();
  }
}

// A cross-entropy told it holds one vocabulary shard, run where nothing gathers the other shards'
// statistics (here, the single-device executor), refuses rather than normalizing over its shard.
TEST(Executor, VocabShardOfTheLossWithoutAGatherIsAnError) {
  Graph g;
  TensorRef logits = g.placeholder("logits", {2, 4}, DType::kFloat32);
  TensorRef targets = g.placeholder("targets", {2}, DType::kInt64);
  TensorRef scale = g.placeholder("scale", {}, DType::kFloat32);
  OpAttrs a;
  a.vocab_start = 4;
  a.vocab_size = 8;
  TensorRef loss = g.add_op(OpKind::kCrossEntropy, "loss", {logits, targets, scale}, a)[0];
  Executor ex(g, {loss});
  const TensorMap feeds{{"logits", Tensor::zeros(Shape{2, 4}, DType::kFloat32)},
                        {"targets", Tensor::from_vector<int64_t>(Shape{2}, {1, 6})},
                        {"scale", Tensor::full(Shape{}, DType::kFloat32, 1.0)}};
  try {
    ex.run(feeds, {});
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("columns from 4 of 8"), std::string::npos) << e.what();
  }
}

TEST(Init, ShardsReproduceTheirSliceOfTheGlobalTensor) {
  InitSpec spec = InitSpec::normal(0.02);
  Tensor full = init_tensor("w", Shape{8, 4}, DType::kFloat32, spec, 7);
  Tensor rows = init_tensor("w", Shape{4, 4}, DType::kFloat32, spec, 7, /*offset=*/16);
  EXPECT_EQ(std::memcmp(full.narrow(0, 4, 4).raw_data(), rows.raw_data(), rows.nbytes()), 0);
  Tensor other = init_tensor("v", Shape{8, 4}, DType::kFloat32, spec, 7);  // other name, other values
  EXPECT_NE(std::memcmp(full.raw_data(), other.raw_data(), full.nbytes()), 0);
  Tensor ones = init_tensor("n", Shape{3}, DType::kFloat32, InitSpec::ones(), 7);
  EXPECT_EQ(ones.to_vector<float>(), (std::vector<float>{1, 1, 1}));
}

}  // namespace
}  // namespace hspmd::graph
