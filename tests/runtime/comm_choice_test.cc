// Which communicators a rank uses (--comm) and where it computes: NCCL by default for GPU ranks of
// a build with NCCL, Gloo otherwise; NCCL for CPU ranks, or without NCCL, is an error naming
// --comm; NCCL puts each rank of a host on its own GPU, Gloo lets them share one.
#include "hspmd/runtime/comm_choice.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hspmd/core/error.h"

namespace hspmd::runtime {
namespace {

using ::testing::HasSubstr;

const Device kCpu = Device::cpu();
const Device kGpu2{DeviceType::kCUDA, 2};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(CommChoice, ParsesTheTwoNamesAndNamesTheFlagOtherwise) {
  EXPECT_EQ(parse_comm("gloo"), CommKind::kGloo);
  EXPECT_EQ(parse_comm("nccl"), CommKind::kNccl);
  EXPECT_STREQ(comm_name(CommKind::kNccl), "nccl");
  EXPECT_STREQ(comm_name(CommKind::kGloo), "gloo");
  EXPECT_THAT(error_of([] { parse_comm("mpi"); }), HasSubstr("--comm mpi: expected gloo or nccl"));
}

TEST(CommChoice, DefaultsToNcclForGpuRanksOfABuildWithNccl) {
  EXPECT_EQ(choose_comm(std::nullopt, kGpu2, true), CommKind::kNccl);
  EXPECT_EQ(choose_comm(std::nullopt, kGpu2, false), CommKind::kGloo);
  EXPECT_EQ(choose_comm(std::nullopt, kCpu, true), CommKind::kGloo);
  EXPECT_EQ(choose_comm(CommKind::kGloo, kGpu2, true), CommKind::kGloo);  // several ranks on one GPU
  EXPECT_EQ(choose_comm(CommKind::kNccl, kGpu2, true), CommKind::kNccl);
  EXPECT_EQ(choose_comm(std::nullopt, kGpu2), nccl_built() ? CommKind::kNccl : CommKind::kGloo);
}

TEST(CommChoice, NcclOnTheCpuOrWithoutNcclIsAnErrorNamingTheFlag) {
  EXPECT_THAT(error_of([] { choose_comm(CommKind::kNccl, kCpu, true); }),
              HasSubstr("--comm nccl moves GPU memory, but the ranks compute on cpu"));
  EXPECT_THAT(error_of([] { choose_comm(CommKind::kNccl, kGpu2, false); }),
              HasSubstr("--comm nccl: this hspmd was built without NCCL"));
}

TEST(CommChoice, NcclGivesEachLocalRankItsOwnGpuGlooLetsThemShare) {
  EXPECT_EQ(rank_device(kGpu2, CommKind::kNccl, 0), kGpu2);
  EXPECT_EQ(rank_device(kGpu2, CommKind::kNccl, 3), (Device{DeviceType::kCUDA, 5}));
  EXPECT_EQ(rank_device(kGpu2, CommKind::kGloo, 3), kGpu2);
  EXPECT_EQ(rank_device(kCpu, CommKind::kGloo, 3), kCpu);
}

TEST(CommChoice, BackendsAreGlooCommunicatorsOrNcclOnAGpuComputeOnly) {
  const graph::ComputeDevice host = graph::cpu_compute({.name = "rank 0"});
  const comm::Backend gloo = comm_backend(CommKind::kGloo, host, comm::Millis(5'000), "127.0.0.1");
  ASSERT_TRUE(gloo);
  // NCCL's communicators order themselves after a GPU's compute stream: a host compute has none.
  const std::string nccl = error_of([&] { comm_backend(CommKind::kNccl, host, comm::Millis(5'000), "127.0.0.1"); });
  EXPECT_THAT(nccl, HasSubstr("cpu")) << nccl;
}

}  // namespace
}  // namespace hspmd::runtime
