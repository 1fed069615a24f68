#include "hspmd/runtime/gradient_sync.h"

#include "hspmd/core/error.h"

namespace hspmd::runtime {

namespace {

Tensor reduced(const TensorState& s, const Tensor& summand, int rank, resolve::ResolveCache& cache,
               CommSession& session, const graph::ComputeDevice& compute) {
  const resolve::Resolution& r = cache.resolve(s.grad_annotation, s.state_annotation, s.shape, s.name + ".grad");
  Allocator memory = compute.allocator;  // a handle on the device's memory
  return execute_reshard_staged(r, s.shape, rank, summand, session, kGradientChannel, memory);
}

}  // namespace

void reduce_into_shard(TensorState& s, const Tensor& summand, int rank, resolve::ResolveCache& cache,
                       CommSession& session, const graph::ComputeDevice& compute) {
  Tensor part = reduced(s, summand, rank, cache, session, compute);
  if (!s.grad_shard.defined()) {
    s.grad_shard = std::move(part);
  } else {
    compute.add(s.grad_shard, part, s.grad_shard);
  }
}

Tensor take_synced_gradient(TensorState& s, int rank, resolve::ResolveCache& cache, CommSession& session,
                            const graph::ComputeDevice& compute) {
  if (s.grad_shard.defined()) {
    HSPMD_ASSERT(!s.grad.defined()) << "rank " << rank << ": '" << s.name
                                    << "' has both a whole gradient and a reduced shard after the backward pass";
    return std::move(s.grad_shard);
  }
  if (!s.grad.defined()) {  // no micro-batch reached this stage: a zero contribution
    Allocator memory = compute.allocator;  // a handle: the tensor keeps its own
    s.grad = Tensor::zeros(s.grad_annotation.region(rank, s.shape)->shape(), DType::kFloat32, &memory);
  }
  Tensor out = reduced(s, s.grad, rank, cache, session, compute);
  s.grad = Tensor();
  return out;
}

std::vector<int> gradient_group_ends(int micro_batches, int groups) {
  HSPMD_CHECK(groups >= 1 && (micro_batches == 0 || groups <= micro_batches))
      << "ZeRO-2: " << groups << " gradient groups for " << micro_batches << " micro-batches";
  std::vector<int> ends;
  if (micro_batches == 0) return ends;
  // Group g holds micro-batches [g*m/G, (g+1)*m/G): as even as integers allow.
  for (int g = 1; g <= groups; ++g) ends.push_back(static_cast<int>(int64_t{g} * micro_batches / groups));
  return ends;
}

}  // namespace hspmd::runtime
