// WorkerEnv: the variables of hspmd launch, mpirun and srun, and errors naming what is missing.
#include <gtest/gtest.h>

#include <map>

#include "hspmd/comm/env.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {
namespace {

WorkerEnv read(const std::map<std::string, std::string>& vars) {
  return WorkerEnv::from_environment([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    read(vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(WorkerEnv, HspmdLaunchVariables) {
  WorkerEnv env = read({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"HSPMD_STORE", "redis://h:1"},
                        {"HSPMD_RUN_ID", "exp7"}, {"HSPMD_HOST", "10.0.0.2"}});
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.store_url, "redis://h:1");
  EXPECT_EQ(env.run_id, "exp7");
  EXPECT_EQ(env.host, "10.0.0.2");
  EXPECT_EQ(env.source, "hspmd launch");
}

TEST(WorkerEnv, MpirunVariables) {
  WorkerEnv env = read({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                        {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"HSPMD_RUN_ID", "r"}});
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.source, "mpirun");
  EXPECT_EQ(env.store_url, "file:///tmp/hspmd-r");  // default: file store on one host
  EXPECT_EQ(env.host, "127.0.0.1");
}

TEST(WorkerEnv, SrunVariablesAndRunIdFromTheJob) {
  WorkerEnv env = read({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "1"}, {"SLURM_JOB_ID", "991"},
                        {"SLURM_STEP_ID", "0"}});
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 6);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.run_id, "slurm-991.0");
  EXPECT_EQ(env.source, "srun");
}

TEST(WorkerEnv, ErrorsNameTheVariable) {
  EXPECT_NE(error_of({}).find("no rank in the environment"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"HSPMD_RUN_ID", "r"}}).find("WORLD_SIZE is not set"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"HSPMD_RUN_ID", "r"}}).find("RANK='x'"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"HSPMD_RUN_ID", "r"}}).find("is not below"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}).find("HSPMD_RUN_ID"), std::string::npos);
}

}  // namespace
}  // namespace hspmd::comm
