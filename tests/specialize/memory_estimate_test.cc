// The activation estimate of the lm head: apart, its logits (the matmul's output and the Reshard
// lm_head_out's) count; fused, one chunk of them (the kernel's scratch) does.
#include "hspmd/specialize/memory_estimate.h"

#include <gtest/gtest.h>

#include "hspmd/kernels/lm_head_loss.h"
#include "hspmd/models/llama.h"
#include "hspmd/models/llama_plan.h"

namespace hspmd::specialize {
namespace {

models::LlamaConfig large_vocab() {
  models::LlamaConfig c;  // 2 layers, H 64
  c.vocab_size = 20000;
  return c;
}

MemoryEstimate activations_of(bool fused, int64_t tokens) {
  const models::LlamaModel m = models::build_llama(large_vocab(), {.fused_head_loss = fused});
  sharding::Strategy st;
  st.name = "one";
  st.pipelines.push_back({.micro_batch_size = 1, .num_micro_batches = 1, .stages = {{.ranks = {0}, .first_layer = 0, .last_layer = 1}}});
  const ExecGraph exec(m.graph, models::compile_llama_plan(large_vocab(), st), 0);
  return estimate_memory(exec, {.micro_batch_tokens = tokens});
}

TEST(MemoryEstimate, FusedHeadCountsOneChunkOfLogitsInsteadOfAllOfThem) {
  const int64_t V = large_vocab().vocab_size;
  for (const int64_t tokens : {int64_t{256}, int64_t{8192}}) {
    const int64_t logits = tokens * V * 4;
    const int64_t chunk = kernels::lm_head_loss_chunk_rows(tokens, V) * V * 4;
    EXPECT_EQ(activations_of(false, tokens).activations - activations_of(true, tokens).activations, 2 * logits - chunk)
        << tokens << " tokens";
  }
  EXPECT_LT(kernels::lm_head_loss_chunk_rows(8192, V), 8192);  // the long batch really is chunked
}

}  // namespace
}  // namespace hspmd::specialize
