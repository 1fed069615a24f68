// CUDA embedding against the CPU kernel (kernels/embedding.h): a whole table and a vocab-parallel
// shard (ids outside it give zero rows), int64 and int32 ids, float32 and bfloat16, and the
// backward's scatter-add with repeated ids.
#include "hspmd/kernels/cuda/embedding.h"

#include <gtest/gtest.h>

#include <string>

#include "gpu/gpu_testlib.h"
#include "hspmd/kernels/embedding.h"

namespace hspmd::kernels::cuda {
namespace {

using namespace hspmd::testing;

class CudaEmbedding : public GpuTest, public ::testing::WithParamInterface<std::tuple<DType, DType, bool>> {};

TEST_P(CudaEmbedding, ForwardAndBackwardMatchTheCpu) {
  const auto [dtype, ids_dtype, shard] = GetParam();
  const bool bf16 = dtype == DType::kBFloat16;
  const int64_t tokens = 41, vocab = 57, hidden = 1031;
  const int64_t vocab_start = shard ? 100 : 0;
  // Ids repeat (41 tokens over fewer rows); a shard sees ids on both sides of it too.
  Tensor ids = shard ? random_ints({tokens}, ids_dtype, 71, 80, 170) : random_ints({tokens}, ids_dtype, 71, 0, vocab);
  Tensor table = random_tensor({vocab, hidden}, DType::kFloat32, 72);
  Tensor dy = random_tensor({tokens, hidden}, DType::kFloat32, 73);
  if (bf16) {
    table = to_f32(to_bf16(table));
    dy = to_f32(to_bf16(dy));
  }
  // The int32 cases also give the first token's id no gradient (padding_id, a global id).
  const int64_t padding_id = ids_dtype == DType::kInt32 ? static_cast<int64_t>(ids.element_as_double(0)) : -1;
  const EmbeddingOptions options{.vocab_start = vocab_start, .outside_ids_are_zero = shard, .padding_id = padding_id};
  Tensor y = Tensor::empty({tokens, hidden}, DType::kFloat32), dtable = Tensor::empty({vocab, hidden}, DType::kFloat32);
  kernels::embedding_fwd(table, ids, y, options);
  kernels::embedding_bwd(ids, dy, dtable, options);

  auto gtable = upload(bf16 ? to_bf16(table) : table), gids = upload(ids), gdy = upload(bf16 ? to_bf16(dy) : dy);
  auto gy = device_empty({tokens, hidden}, dtype), gdtable = device_empty({vocab, hidden}, DType::kFloat32);
  const EmbeddingShape shape{
      .tokens = tokens, .vocab = vocab, .hidden = hidden, .vocab_start = vocab_start, .padding_id = padding_id};
  embedding_fwd(dtype, gtable.data(), ids_dtype, gids.data(), gy.data(), shape, stream_.get());
  embedding_bwd(dtype, ids_dtype, gids.data(), gdy.data(), gdtable.as<float>(), shape, stream_.get());
  EXPECT_TRUE(all_close(to_f32(download(gy, {tokens, hidden}, dtype)), y, 0, 0, "y (a copy)"));
  EXPECT_TRUE(all_close(download(gdtable, {vocab, hidden}, DType::kFloat32), dtable, 1e-6, 1e-6, "dtable"));
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaEmbedding,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::Values(DType::kInt64, DType::kInt32), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param))) +
                                  (std::get<2>(info.param) ? "_shard" : "_whole");
                         });

}  // namespace
}  // namespace hspmd::kernels::cuda
