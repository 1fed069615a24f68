// The Llama training graph: structure and names, whole-model gradients against finite
// differences (float64), packed vs one-document-at-a-time equivalence, recomputation, training.
#include "hspmd/models/llama.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "error_of.h"
#include "graph/gradcheck.h"
#include "hspmd/graph/executor.h"
#include "hspmd/graph/optimizer.h"
#include "hspmd/graph/verifier.h"
#include "hspmd/kernels/threading.h"

namespace hspmd::models {
namespace {

using graph::Executor;
using graph::TensorMap;
using graph::TensorRef;

// 2 layers, hidden 16, 4 query heads sharing 2 kv heads (GQA).
LlamaConfig tiny_config(bool tied = false) {
  LlamaConfig c;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.vocab_size = 11;
  c.tie_word_embeddings = tied;
  return c;
}

// Feeds for documents packed back to back: next-token targets inside each document, -100 on its
// last token (no label across a boundary), loss_scale = 1 / global_labels.
// 0..t-1: every token fed in packed order (no context parallelism).
std::vector<int64_t> iota_positions(int64_t t) {
  std::vector<int64_t> v(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) v[i] = i;
  return v;
}

TensorMap pack(const std::vector<std::vector<int64_t>>& docs, int64_t global_labels, DType dtype) {
  std::vector<int64_t> ids, pos, cu{0}, targets;
  for (const auto& d : docs) {
    for (size_t i = 0; i < d.size(); ++i) {
      ids.push_back(d[i]);
      pos.push_back(static_cast<int64_t>(i));
      targets.push_back(i + 1 < d.size() ? d[i + 1] : -100);
    }
    cu.push_back(static_cast<int64_t>(ids.size()));
  }
  int64_t t = static_cast<int64_t>(ids.size());
  return {{"input_ids", Tensor::from_vector(Shape{t}, ids)},
          {"positions", Tensor::from_vector(Shape{t}, pos)},
          {"cu_seqlens", Tensor::from_vector(Shape{static_cast<int64_t>(cu.size())}, cu)},
          {"targets", Tensor::from_vector(Shape{t}, targets)},
          {"loss_scale", Tensor::full(Shape{}, dtype, 1.0 / static_cast<double>(global_labels))},
          {"token_index", Tensor::from_vector(Shape{t}, iota_positions(t))}};
}

int64_t labels(const std::vector<std::vector<int64_t>>& docs) {
  int64_t n = 0;
  for (const auto& d : docs) n += static_cast<int64_t>(d.size()) - 1;
  return n;
}

// Tiny tensors: extra threads only add synchronization cost on a shared machine.
class Llama : public ::testing::Test {
 protected:
  void SetUp() override { kernels::set_num_threads(1); }
};

const std::vector<std::vector<int64_t>> kDocs = {{1, 5, 2, 9, 3}, {4, 4, 7}, {10, 0, 6, 8, 2, 1, 3}};

TEST_F(Llama, ParametersAndMarkersAreNamedLikeHuggingFace) {
  LlamaModel m = build_llama(tiny_config());
  graph::verify(m.graph);
  std::vector<LlamaParam> expected = llama_parameters(m.config);
  ASSERT_EQ(m.params.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(m.graph.op(m.params[i].op).name, expected[i].name);
    EXPECT_EQ(evaluate(m.graph.info(m.params[i]).shape, {}), expected[i].shape) << expected[i].name;
    EXPECT_TRUE(m.grads.at(i).valid()) << expected[i].name;
    EXPECT_EQ(m.graph.info(m.grads[i]), m.graph.info(m.params[i])) << expected[i].name;
  }
  for (int l = 0; l < 2; ++l) {
    for (const std::string& name : llama_layer_reshard_names(l)) {
      auto ref = m.graph.find(name);
      ASSERT_TRUE(ref.has_value()) << name;
      EXPECT_EQ(m.graph.op(ref->op).kind, graph::OpKind::kReshard);
      EXPECT_EQ(m.graph.op(ref->op).layer, l);
      // Integer tensors (positions, document offsets) carry no gradient back.
      const bool differentiable = !name.ends_with("positions") && !name.ends_with("cu_seqlens") &&
                                  !name.ends_with("token_index") && !name.ends_with("kv_index");
      EXPECT_EQ(m.graph.find(name + ".bwd").has_value(), differentiable) << name;
    }
  }
  EXPECT_TRUE(m.graph.find("model.embed_out").has_value());
  // The head apart (by default for this vocabulary): a matmul, a Reshard and a cross-entropy; fused,
  // one lm_head_loss op (by default from kFusedHeadLossVocab entries).
  EXPECT_EQ(m.graph.op(m.loss.op).kind, graph::OpKind::kCrossEntropy);
  EXPECT_EQ(m.graph.op(m.graph.find("lm_head_out")->op).kind, graph::OpKind::kReshard);
  const LlamaModel fused = build_llama(tiny_config(), {.fused_head_loss = true});
  EXPECT_EQ(fused.graph.op(fused.loss.op).kind, graph::OpKind::kLmHeadLoss);
  EXPECT_FALSE(fused.graph.find("lm_head_out").has_value());
  LlamaConfig large_vocab = tiny_config();
  large_vocab.vocab_size = kFusedHeadLossVocab;
  const LlamaModel by_default = build_llama(large_vocab);
  EXPECT_EQ(by_default.graph.op(by_default.loss.op).kind, graph::OpKind::kLmHeadLoss);
}

// The fused head (lm_head_loss) computes the loss and every gradient of matmul + cross_entropy.
TEST_F(Llama, FusedHeadLossEqualsMatmulAndCrossEntropy) {
  for (const bool tied : {false, true}) {
    const LlamaModel fused =
        build_llama(tiny_config(tied), {.dtype = DType::kFloat64, .init_std = 0.3, .fused_head_loss = true});
    const LlamaModel apart =
        build_llama(tiny_config(tied), {.dtype = DType::kFloat64, .init_std = 0.3, .fused_head_loss = false});
    const TensorMap params = graph::init_parameters(fused.graph, 7);
    const TensorMap feeds = pack(kDocs, labels(kDocs), DType::kFloat64);
    const std::vector<Tensor> a = Executor(fused.graph, fused.fetches()).run(feeds, params);
    const std::vector<Tensor> b = Executor(apart.graph, apart.fetches()).run(feeds, params);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string what = (tied ? "tied, " : "") + (i == 0 ? std::string("loss") : fused.param_names[i - 1]);
      double worst = 0, scale = 0;
      for (int64_t j = 0; j < a[i].numel(); ++j) {
        worst = std::max(worst, std::abs(a[i].element_as_double(j) - b[i].element_as_double(j)));
        scale = std::max(scale, std::abs(b[i].element_as_double(j)));
      }
      EXPECT_LE(worst, 1e-12 * std::max(scale, 1.0)) << what;
    }
  }
}

// Central differences on a sample of every parameter's elements; the error is scaled by the
// largest analytic gradient of that parameter.
void check_model_gradients(const LlamaConfig& config, bool fused_head = false) {
  LlamaModel m = build_llama(config, {.dtype = DType::kFloat64, .init_std = 0.3, .fused_head_loss = fused_head});
  TensorMap params = graph::init_parameters(m.graph, 7);
  // Perturb the norm weights away from 1 so their gradients are generic.
  for (const std::string& name : m.param_names) {
    if (name.find("norm") != std::string::npos) params[name] = graph::testing::uniform({16}, 3, 0.5, 1.5);
  }
  TensorMap feeds = pack(kDocs, labels(kDocs), DType::kFloat64);
  Executor ex(m.graph, m.fetches());
  std::vector<Tensor> out = ex.run(feeds, params);
  const double eps = 1e-5;
  for (size_t p = 0; p < m.params.size(); ++p) {
    const std::string& name = m.param_names[p];
    Tensor& x = params.at(name);
    const Tensor& analytic = out[p + 1];
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < analytic.numel(); ++i) scale = std::max(scale, std::abs(analytic.element_as_double(i)));
    ASSERT_GT(scale, 1e-8) << name << " has a zero gradient";
    int64_t stride = std::max<int64_t>(1, x.numel() / 12);
    for (int64_t i = 0; i < x.numel(); i += stride) {
      double* px = x.data<double>();
      double saved = px[i];
      px[i] = saved + eps;
      double plus = graph::testing::run_loss(m.graph, m.loss, feeds, params);
      px[i] = saved - eps;
      double minus = graph::testing::run_loss(m.graph, m.loss, feeds, params);
      px[i] = saved;
      worst = std::max(worst, std::abs((plus - minus) / (2 * eps) - analytic.element_as_double(i)));
    }
    EXPECT_LT(worst / scale, 1e-6) << name;
  }
}

// --precision bf16: every matmul and attention, forward and backward, rounds its operands; no
// other op changes, and parameters stay float32 (the master weights).
TEST_F(Llama, Bf16PrecisionMarksEveryMatmulAndAttention) {
  const LlamaModel m = build_llama(tiny_config(), {.precision = DType::kBFloat16});
  int marked = 0;
  for (int id = 0; id < m.graph.num_ops(); ++id) {
    const graph::Op& op = m.graph.op(id);
    const bool product = op.kind == graph::OpKind::kMatmul || op.kind == graph::OpKind::kAttention ||
                         op.kind == graph::OpKind::kAttentionBwd || op.kind == graph::OpKind::kContextAttention ||
                         op.kind == graph::OpKind::kContextAttentionBwd || op.kind == graph::OpKind::kLmHeadLoss ||
                         op.kind == graph::OpKind::kLmHeadLossBwd;
    EXPECT_EQ(op.attrs.bf16_operands, product) << op.name;
    marked += op.attrs.bf16_operands ? 1 : 0;
    if (op.kind == graph::OpKind::kParameter) {
      EXPECT_EQ(op.outputs[0].dtype, DType::kFloat32) << op.name;
    }
  }
  // Per layer 7 projections (3 matmuls each: forward, dx, dW) and attention (forward, backward);
  // the lm head's 3 matmuls (apart), or the fused head's forward and backward.
  const int layers = tiny_config().num_hidden_layers;
  EXPECT_EQ(marked, layers * (7 * 3 + 2) + 3);
  const LlamaModel fused = build_llama(tiny_config(), {.precision = DType::kBFloat16, .fused_head_loss = true});
  int marked_fused = 0;
  for (int id = 0; id < fused.graph.num_ops(); ++id) marked_fused += fused.graph.op(id).attrs.bf16_operands ? 1 : 0;
  EXPECT_EQ(marked_fused, layers * (7 * 3 + 2) + 2);
  const LlamaModel fp32 = build_llama(tiny_config());
  for (int id = 0; id < fp32.graph.num_ops(); ++id) EXPECT_FALSE(fp32.graph.op(id).attrs.bf16_operands);
  EXPECT_THAT(hspmd::testing::error_of([] { build_llama(tiny_config(), {.dtype = DType::kFloat64, .precision = DType::kBFloat16}); }),
              ::testing::HasSubstr("precision must be float32, or bfloat16 over float32 parameters"));
}

TEST_F(Llama, WholeModelGradientsMatchFiniteDifferences) { check_model_gradients(tiny_config()); }
TEST_F(Llama, TiedEmbeddingGradientsMatchFiniteDifferences) { check_model_gradients(tiny_config(true)); }
TEST_F(Llama, FusedHeadGradientsMatchFiniteDifferences) { check_model_gradients(tiny_config(true), true); }

TEST_F(Llama, PackedBatchEqualsDocumentsOneByOne) {
  LlamaModel m = build_llama(tiny_config(), {.dtype = DType::kFloat64});
  TensorMap params = graph::init_parameters(m.graph, 11);
  Executor ex(m.graph, m.fetches());
  const int64_t global = labels(kDocs);
  std::vector<Tensor> packed = ex.run(pack(kDocs, global, DType::kFloat64), params);
  EXPECT_EQ(ex.stats().binding.at("T"), 15);
  EXPECT_EQ(ex.stats().binding.at("N"), 3);

  double loss = 0;
  std::vector<Tensor> grads;
  for (const auto& doc : kDocs) {
    // One graph, another batch shape: T = the document's length, N = 1.
    std::vector<Tensor> single = ex.run(pack({doc}, global, DType::kFloat64), params);
    EXPECT_EQ(ex.stats().binding.at("T"), static_cast<int64_t>(doc.size()));
    loss += single[0].element_as_double(0);
    for (size_t i = 1; i < single.size(); ++i) {
      if (grads.size() < i) {
        grads.push_back(single[i].clone());
      } else {
        double* g = grads[i - 1].data<double>();
        for (int64_t j = 0; j < single[i].numel(); ++j) g[j] += single[i].data<double>()[j];
      }
    }
  }
  EXPECT_NEAR(packed[0].element_as_double(0), loss, 1e-12 * std::abs(loss));
  for (size_t i = 0; i < grads.size(); ++i) {
    EXPECT_LT(graph::testing::relative_error(packed[i + 1], grads[i]), 1e-10) << m.param_names[i];
  }
}

TEST_F(Llama, RecomputationGivesIdenticalGradientsWithLowerPeak) {
  LlamaConfig c = tiny_config();
  c.num_hidden_layers = 4;
  c.intermediate_size = 64;
  LlamaModel m = build_llama(c);
  TensorMap params = graph::init_parameters(m.graph, 5);
  std::vector<std::vector<int64_t>> docs;
  for (int d = 0; d < 4; ++d) {
    std::vector<int64_t> doc;
    for (int i = 0; i < 32; ++i) doc.push_back((d * 3 + i * 5) % 11);
    docs.push_back(doc);
  }
  TensorMap feeds = pack(docs, labels(docs), DType::kFloat32);

  auto run = [&](graph::ExecutorOptions options, size_t* peak) {
    Allocator memory;
    options.allocator = &memory;
    Executor ex(m.graph, m.fetches(), options);
    std::vector<Tensor> out = ex.run(feeds, params);
    // Peak of the run minus what the run's outputs still hold (identical in every mode).
    size_t held = 0;
    for (const Tensor& t : out) held += t.nbytes();
    *peak = ex.stats().peak_bytes - held;
    return out;  // outlives `memory`: each tensor's storage holds a handle on its pool
  };
  size_t peak_keep = 0, peak_free = 0, peak_recompute = 0;
  std::vector<Tensor> keep = run({.free_intermediates = false}, &peak_keep);
  std::vector<Tensor> freed = run({}, &peak_free);
  std::vector<Tensor> recomputed = run({.recompute = true}, &peak_recompute);
  EXPECT_LT(peak_free, peak_keep);
  EXPECT_LT(peak_recompute, peak_free);
  for (size_t i = 0; i < keep.size(); ++i) {
    ASSERT_EQ(keep[i].nbytes(), recomputed[i].nbytes());
    EXPECT_EQ(std::memcmp(keep[i].raw_data(), freed[i].raw_data(), keep[i].nbytes()), 0) << i;
    EXPECT_EQ(std::memcmp(keep[i].raw_data(), recomputed[i].raw_data(), keep[i].nbytes()), 0) << i;
  }
  std::printf("peak bytes: keep-all %zu, free-after-last-use %zu, recompute %zu\n", peak_keep, peak_free,
              peak_recompute);
}

TEST_F(Llama, TrainingLossFallsOnASyntheticSequence) {
  LlamaConfig c = tiny_config();
  c.vocab_size = 16;
  LlamaModel m = build_llama(c);
  TensorMap params = graph::init_parameters(m.graph, 1);
  graph::AdamW opt(params, {.adamw = {.weight_decay = 0.01}, .max_grad_norm = 1.0,
                            .schedule = graph::LrSchedule::warmup_cosine(
                                {.peak_lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 5, .total_steps = 50})});
  Executor ex(m.graph, m.fetches());
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    // Documents of a counting pattern with a per-document stride: learnable from context.
    std::vector<std::vector<int64_t>> docs;
    for (int d = 0; d < 4; ++d) {
      int64_t stride = 1 + (step + d) % 3, start = (step * 7 + d * 5) % 16;
      std::vector<int64_t> doc;
      for (int i = 0; i < 12 + d; ++i) doc.push_back((start + stride * i) % 16);
      docs.push_back(doc);
    }
    std::vector<Tensor> out = ex.run(pack(docs, labels(docs), DType::kFloat32), params);
    TensorMap grads;
    for (size_t i = 0; i < m.param_names.size(); ++i) grads[m.param_names[i]] = out[i + 1];
    opt.step(params, grads);
    double loss = out[0].element_as_double(0);
    if (step == 0) first = loss;
    last = loss;
  }
  EXPECT_NEAR(first, std::log(16.0), 0.2);  // small init: close to uniform
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
}

}  // namespace
}  // namespace hspmd::models
