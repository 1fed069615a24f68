// Values read back from the store are validated (a malformed one is an Error naming the key),
// and what `hspmd launch` takes from Slurm's environment under srun.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "hspmd/comm/slurm_job.h"
#include "hspmd/comm/store_values.h"
#include "hspmd/core/error.h"
#include "error_of.h"

namespace hspmd::comm {
namespace {

using ::testing::HasSubstr;

using hspmd::testing::error_of;

TEST(StoreValues, RankListAcceptsWhatGroupKeyWritesAndNamesTheKeyOtherwise) {
  EXPECT_EQ(parse_rank_list("0,2,3", "gen1/members"), (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(parse_rank_list("7", "k"), std::vector<int>{7});
  for (const char* bad : {"", ",", "1,", ",1", "1,,2", "a", "1 ,2", "-1", "2,1", "1,1", "99999999", "1048576",
                          "1\n", "+1"}) {
    EXPECT_THAT(error_of([&] { parse_rank_list(bad, "gen1/members"); }), HasSubstr("store key gen1/members"))
        << "'" << bad << "'";
  }
}

TEST(StoreValues, DeathNoticeKeepsPrintableTextAndDescribesTheRest) {
  EXPECT_EQ(death_notice_text("signal 9 (Killed)", "dead/2"), "signal 9 (Killed)");
  EXPECT_THAT(death_notice_text("\x1b[2Jgone", "dead/2"), HasSubstr("malformed notice (8 bytes"));
  EXPECT_THAT(death_notice_text(std::string(300, 'x'), "dead/2"), HasSubstr("at store key dead/2"));
}

TEST(SlurmJob, FirstHostOfAHostList) {
  EXPECT_EQ(first_host_of("node[01-04,07],gpu3"), "node01");
  EXPECT_EQ(first_host_of("a,b"), "a");
  EXPECT_EQ(first_host_of("host"), "host");
  EXPECT_EQ(first_host_of("rack[2-3]-n[5,6]"), "rack2-n5");
  EXPECT_THAT(error_of([] { first_host_of("node[01-04"); }), HasSubstr("unclosed '['"));
  EXPECT_THAT(error_of([] { first_host_of("node[x]"); }), HasSubstr("does not start with a number"));
  EXPECT_THAT(error_of([] { first_host_of(""); }), HasSubstr("names no host"));
}

TEST(SlurmJob, ReadsNodeCountRankAndFirstHostUnderSrun) {
  std::map<std::string, std::string> env = {{"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_NODEID", "1"},
                                            {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_STEP_NODELIST", "gpu[07-08]"},
                                            {"SLURM_JOB_ID", "4711"},       {"SLURM_STEP_ID", "0"}};
  auto get = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  const auto job = SlurmJob::from_environment(get);
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->nnodes, 2);
  EXPECT_EQ(job->node_rank, 1);
  EXPECT_EQ(job->first_host, "gpu07");
  EXPECT_EQ(job->run_id, "slurm-4711.0");
  env["SLURM_STEP_NUM_TASKS"] = "8";
  EXPECT_THAT(error_of([&] { SlurmJob::from_environment(get); }), HasSubstr("srun --ntasks-per-node 1"));
  env["SLURM_STEP_NUM_TASKS"] = "2";
  env["SLURM_NODEID"] = "2";
  EXPECT_THAT(error_of([&] { SlurmJob::from_environment(get); }), HasSubstr("is not below SLURM_STEP_NUM_NODES=2"));
  env.erase("SLURM_STEP_NUM_NODES");
  EXPECT_FALSE(SlurmJob::from_environment(get).has_value()) << "outside srun nothing is taken from Slurm";
}

}  // namespace
}  // namespace hspmd::comm
