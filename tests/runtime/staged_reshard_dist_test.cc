// execute_reshard_staged without a GPU: two ranks (threads, Gloo over loopback) whose tensors live
// on a fake device (core/fake_device_testlib.h) all-reduce a partial tensor through host buffers,
// as a GPU rank's Reshards and gradient syncs do. The result is back on the device, exact, and
// every byte crossed the host once each way; on a host rank, and on a device rank whose session
// buffers are on that device, the call is execute_reshard itself.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/fake_device_testlib.h"
#include "error_of.h"
#include "hspmd/comm/thread_ranks.h"
#include "hspmd/resolve/resolver.h"
#include "hspmd/runtime/reshard_exec.h"
#include "hspmd/sharding/annotation.h"

namespace hspmd::runtime {
namespace {

using sharding::Annotation;

TEST(StagedReshard, ADeviceRanksAllReduceGoesThroughTheHost) {
  const Shape shape{4, 3};
  const resolve::Resolution r =
      resolve::resolve(Annotation::parse("dup{[0-1](P:2)}"), Annotation::parse("dup{[0-1](D:2)}"), shape, "x");
  std::vector<Tensor> results(2);
  std::vector<std::shared_ptr<testing::FakeDeviceMemory>> fakes(2);
  comm::run_thread_ranks(2, [&](int rank, comm::GroupCache& groups) {
    fakes[rank] = std::make_shared<testing::FakeDeviceMemory>();
    Allocator device(fakes[rank]);
    Allocator host;
    CommSession session(groups, rank, &host);
    std::vector<float> values(12);
    for (int i = 0; i < 12; ++i) values[i] = static_cast<float>((rank + 1) * (i + 1));  // summands of 3 * (i + 1)
    const Tensor mine = Tensor::from_vector<float>(shape, values, &device);
    results[rank] = execute_reshard_staged(r, shape, rank, mine, session, "F", device);
    session.wait_deferred();
  });
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(results[rank].device().to_string(), "cuda:3");
    const std::vector<float> sum = results[rank].to_host().to_vector<float>();
    for (int i = 0; i < 12; ++i) EXPECT_EQ(sum[i], static_cast<float>(3 * (i + 1))) << "rank " << rank << ", " << i;
    // To the device: the source and the staged result; to the host: the staged source and this read.
    EXPECT_EQ(fakes[rank]->to_device, 2) << rank;
    EXPECT_EQ(fakes[rank]->to_host, 2) << rank;
  }
}

TEST(StagedReshard, WithBuffersWhereTheTensorsAreItIsExecuteReshard) {
  const Shape shape{2, 2};
  const resolve::Resolution r =
      resolve::resolve(Annotation::parse("dup{[0](D:1)}"), Annotation::parse("dup{[0](D:1)}"), shape, "w");
  comm::run_thread_ranks(1, [&](int rank, comm::GroupCache& groups) {
    Allocator host;
    CommSession session(groups, rank, &host);
    const Tensor w = Tensor::from_vector<float>(shape, {1, 2, 3, 4}, &host);
    EXPECT_TRUE(execute_reshard_staged(r, shape, rank, w, session, "post", host).shares_storage_with(w));

    // A session whose buffers are the device's (communicators that move device memory, NCCL) runs
    // the device's tensors directly: no host crossing.
    auto fake = std::make_shared<testing::FakeDeviceMemory>();
    Allocator device(fake);
    CommSession on_device(groups, rank, &device);
    const Tensor w_on_device = w.clone(&device);
    const int to_host = fake->to_host;
    EXPECT_TRUE(execute_reshard_staged(r, shape, rank, w_on_device, on_device, "post", device)
                    .shares_storage_with(w_on_device));
    EXPECT_EQ(fake->to_host, to_host);
    // Device buffers for host tensors: neither staged nor direct.
    EXPECT_THAT(testing::error_of([&] { execute_reshard_staged(r, shape, rank, w, on_device, "post", host); }),
                ::testing::HasSubstr("tensors on cpu, comm session buffers on cuda:3"));
  });
}

}  // namespace
}  // namespace hspmd::runtime
