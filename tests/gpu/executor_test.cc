// The decoder graphs of every family through the one Executor on the GPU (the CUDA kernel
// registry, graph/cuda/cuda_kernels.h, with tensors on the device) against the CPU: the loss and
// every parameter's gradient of one forward and backward, float32 and bf16 mixed precision, the
// fused and the separate lm-head loss, with per-layer recomputation.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu/decoder_configs_testlib.h"
#include "gpu/gpu_testlib.h"
#include "hspmd/core/cuda/cuda_tensor_memory.h"
#include "hspmd/data/packing.h"
#include "hspmd/graph/cuda/cuda_kernels.h"
#include "hspmd/graph/executor.h"

namespace hspmd::graph {
namespace {

// Three documents of odd lengths in rows of 32 tokens (packed: attention restarts per document).
data::Batch batch(int64_t vocab) {
  std::vector<data::Segment> segments;
  uint64_t doc = 0;
  for (int64_t length : {23, 9, 30}) {
    data::Segment s{.document = doc++, .begin = 0, .tokens = {}};
    for (int64_t i = 0; i < length; ++i) s.tokens.push_back(static_cast<int32_t>((i * 37 + length * 11) % vocab));
    segments.push_back(std::move(s));
  }
  return data::pack(segments, {.seq_len = 32});
}

struct Case {
  DType precision;
  bool fused_head;
  bool recompute;
};

TEST(CudaExecutor, DecoderGraphsMatchTheCpu) {
  Allocator gpu = cuda::make_cuda_allocator({.device = 0, .capacity_bytes = 0, .name = "rank 0"});
  for (const testing::DecoderConfig& config : testing::decoder_configs()) {
    const auto model = testing::decoder_model(config);
    for (const Case& c : {Case{DType::kFloat32, true, false}, Case{DType::kFloat32, false, true},
                          Case{DType::kBFloat16, true, false}}) {
      const std::string what = config.name + " " + std::string(dtype_name(c.precision)) +
                               (c.fused_head ? " fused" : " apart") + (c.recompute ? " recompute" : "");
      SCOPED_TRACE(what);
      const models::ModelGraph m = model->build({.precision = c.precision, .fused_head_loss = c.fused_head});
      const data::Batch b = batch(model->vocab_size());
      const TensorMap feeds = model->feeds(b, b.num_label_tokens(), models::packed_order(b.num_tokens()));
      const TensorMap params = init_parameters(m.graph, 17);
      std::vector<TensorRef> fetches{m.loss};
      fetches.insert(fetches.end(), m.grads.begin(), m.grads.end());

      const std::vector<Tensor> cpu = Executor(m.graph, fetches, {.recompute = c.recompute}).run(feeds, params);
      TensorMap gpu_feeds, gpu_params;
      for (const auto& [name, t] : feeds) gpu_feeds.emplace(name, t.clone(&gpu));
      for (const auto& [name, t] : params) gpu_params.emplace(name, t.clone(&gpu));
      const KernelRegistry& kernels = cuda_kernels();
      const std::vector<Tensor> out =
          Executor(m.graph, fetches, {.allocator = &gpu, .recompute = c.recompute, .kernels = &kernels})
              .run(gpu_feeds, gpu_params);

      // bf16 operands: the products' inputs round alike on both, the sums differ in order; the
      // gradients' relative error is the widest of the rounded chains.
      const bool bf16 = c.precision == DType::kBFloat16;
      const double loss_rtol = bf16 ? 2e-3 : 1e-5, grad_tol = bf16 ? 3e-2 : 1e-4;
      ASSERT_EQ(out[0].device(), gpu.device());
      EXPECT_NEAR(out[0].to_host().element_as_double(0), cpu[0].element_as_double(0),
                  loss_rtol * std::abs(cpu[0].element_as_double(0)));
      for (size_t i = 0; i < m.grads.size(); ++i) {
        EXPECT_LE(testing::max_relative_error(out[1 + i].to_host(), cpu[1 + i]), grad_tol)
            << "d loss / d " << m.param_names[i];
      }
    }
  }
}

TEST(CudaExecutor, AHostFeedIsAClearError) {
  Allocator gpu = cuda::make_cuda_allocator({.device = 0, .capacity_bytes = 0, .name = ""});
  const auto model = testing::decoder_model(testing::decoder_configs()[0]);
  const models::ModelGraph m = model->build({});
  const data::Batch b = batch(model->vocab_size());
  const TensorMap feeds = model->feeds(b, b.num_label_tokens(), models::packed_order(b.num_tokens()));
  TensorMap params;
  for (const auto& [name, t] : init_parameters(m.graph, 1)) params.emplace(name, t.clone(&gpu));
  const KernelRegistry& kernels = cuda_kernels();
  try {
    Executor(m.graph, {m.loss}, {.allocator = &gpu, .kernels = &kernels}).run(feeds, params);
    FAIL() << "host feeds on a GPU run";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is on cpu, but this run's ops run on cuda:0"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hspmd::graph
