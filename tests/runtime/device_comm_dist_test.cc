// Reshards and fused BSRs on device buffers, as a GPU rank over NCCL runs them, without a GPU: two
// ranks (threads, Gloo over loopback) whose session buffers are a fake device's memory (host
// memory that says it is cuda:3, so Gloo can move it). Collectives and a fused BSR whose messages
// carry pieces of two tensors both ways pack and unpack on the device (the compute's
// copy_region), and every rank ends with exactly its shards of the global tensors, on the device.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <tuple>
#include <vector>

#include "hspmd/comm/thread_ranks.h"
#include "hspmd/kernels/slice.h"
#include "hspmd/resolve/fused_bsr.h"
#include "hspmd/resolve/resolver.h"
#include "hspmd/runtime/reshard_exec.h"
#include "hspmd/sharding/annotation.h"
#include "runtime/fake_device_compute_testlib.h"

namespace hspmd::runtime {
namespace {

using sharding::Annotation;

// Global tensor `shape` holding start, start + 1, ...: region r of it, on the host.
Tensor part_of(const Shape& shape, float start, const sharding::Region& r) {
  std::vector<float> values(static_cast<size_t>(shape.numel()));
  std::iota(values.begin(), values.end(), start);
  const Tensor whole = Tensor::from_vector<float>(shape, values);
  Tensor out = Tensor::zeros(r.shape(), DType::kFloat32);
  kernels::copy_region(whole, r.begin, out, std::vector<int64_t>(r.begin.size(), 0), r.shape().dims());
  return out;
}

std::vector<float> values_of(const Tensor& t) { return t.to_host().to_vector<float>(); }

TEST(DeviceComm, CollectivesAndAFusedBsrRunOnDeviceBuffers) {
  const Shape a_shape{4, 2}, b_shape{6};
  const Annotation a_from = Annotation::parse("dup{[0-1](S0:2)}"), a_to = Annotation::parse("dup{[0-1](S1:2)}");
  const Annotation b_from = Annotation::parse("dup{[0](D:1)}"), b_to = Annotation::parse("dup{[1](D:1)}");
  const resolve::FusedBsr bsr =
      resolve::plan_fused_bsr({{"a", a_shape, a_from, a_to, 4}, {"b", b_shape, b_from, b_to, 4}}, nullptr);
  const resolve::Resolution sum =
      resolve::resolve(Annotation::parse("dup{[0-1](P:2)}"), Annotation::parse("dup{[0-1](S0:2)}"), a_shape, "g");
  std::vector<std::shared_ptr<hspmd::testing::FakeDeviceMemory>> fakes(2);
  comm::run_thread_ranks(2, [&](int rank, comm::GroupCache& groups) {
    fakes[rank] = std::make_shared<hspmd::testing::FakeDeviceMemory>();
    graph::ComputeDevice device = testing::fake_device_compute(fakes[rank]);
    CommSession session(groups, rank, &device.allocator, device.copy_region);

    // Partial -> split: a reduce-scatter on device buffers; each rank adds its rank + 1 times the tensor.
    const sharding::Region whole{{0, 0}, {4, 2}};
    Tensor summand = part_of(a_shape, 0, whole);
    for (int64_t i = 0; i < summand.numel(); ++i) summand.data<float>()[i] *= static_cast<float>(rank + 1);
    const Tensor reduced =
        execute_reshard_staged(sum, a_shape, rank, summand.clone(&device.allocator), session, "post", device.allocator);
    ASSERT_EQ(reduced.device().to_string(), "cuda:3");
    std::vector<float> expected =
        values_of(part_of(a_shape, 0, *Annotation::parse("dup{[0-1](S0:2)}").region(rank, a_shape)));
    for (float& v : expected) v *= 3;
    EXPECT_EQ(values_of(reduced), expected) << "rank " << rank;

    // The fused BSR: a's rows become columns (both ranks send and keep a quarter), b moves 0 -> 1.
    std::vector<LocalShard> sources, destinations;
    for (const auto& [shape, from, to, start] :
         {std::tuple{a_shape, a_from, a_to, 0.0f}, std::tuple{b_shape, b_from, b_to, 100.0f}}) {
      const auto src = from.region(rank, shape);
      const auto dst = to.region(rank, shape);
      sources.push_back(
          {src ? part_of(shape, start, *src).clone(&device.allocator) : Tensor(), src.value_or(sharding::Region{})});
      destinations.push_back({dst ? Tensor::zeros(dst->shape(), DType::kFloat32, &device.allocator) : Tensor(),
                              dst.value_or(sharding::Region{})});
    }
    execute_fused_bsr(bsr, rank, sources, destinations, session, "switch");
    session.wait_deferred();
    int checked = 0;
    for (const auto& [shape, to, start, d] :
         {std::tuple{a_shape, a_to, 0.0f, 0}, std::tuple{b_shape, b_to, 100.0f, 1}}) {
      const auto dst = to.region(rank, shape);
      if (!dst) continue;
      ASSERT_EQ(destinations[d].tensor.device().to_string(), "cuda:3");
      EXPECT_EQ(values_of(destinations[d].tensor), values_of(part_of(shape, start, *dst)))
          << "rank " << rank << ", tensor " << d;
      ++checked;
    }
    EXPECT_EQ(checked, rank == 0 ? 1 : 2);
    EXPECT_GT(fakes[rank]->region_copies, 0);
  });
}

}  // namespace
}  // namespace hspmd::runtime
