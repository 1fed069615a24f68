// Errors a person sees: one line on stderr, exit code 1, the text of the problem (what and where
// in the user's files) and no hspmd source location unless --verbose asks for it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "cli/cli_testlib.h"
#if HSPMD_CUDA
#include "hspmd/core/cuda/cuda_error.h"
#endif

namespace hspmd::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class ErrorsCli : public testing::CliTest {};

long lines(const std::string& text) { return std::count(text.begin(), text.end(), '\n'); }

TEST_F(ErrorsCli, BadConfigFileIsOneLineWithTheFileAndKeyAndNoSourceLocation) {
  const std::string config = write_file("config.json", R"({"hidden_size": 64, "intermediate_size": 176,
      "num_hidden_layers": 2, "num_attention_heads": 5, "num_key_value_heads": 1, "vocab_size": 260})");
  const testing::RunResult r = run("explain --model " + config + " --strategy " +
                             testing::source_file("examples/strategies/local-dp2.json"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, StartsWith("hspmd: error: "));
  EXPECT_THAT(r.err, HasSubstr(config));
  EXPECT_THAT(r.err, HasSubstr("num_attention_heads"));
  EXPECT_THAT(r.err, Not(HasSubstr("src/hspmd/")));
  EXPECT_THAT(r.err, Not(HasSubstr("check failed")));

  const testing::RunResult verbose = run("--verbose explain --model " + config + " --strategy " +
                                   testing::source_file("examples/strategies/local-dp2.json"));
  EXPECT_EQ(verbose.code, 1);
  EXPECT_EQ(lines(verbose.err), 2) << verbose.err;
  EXPECT_THAT(verbose.err, HasSubstr("hspmd: raised at src/hspmd/"));
  EXPECT_THAT(verbose.err, HasSubstr(": check failed ("));
}

// A context-parallel stage whose tp x cp is not its rank count: the file and stage are named.
TEST_F(ErrorsCli, BadContextParallelStageNamesTheFileAndStage) {
  const std::string st = write_file("cp.json", R"({"pipelines": [{"micro_batch_size": 1, "num_micro_batches": 1,
      "stages": [{"ranks": "0-5", "layers": "0-3", "tp": 2, "cp": 2}]}]})");
  const testing::RunResult r =
      run("explain --model " + testing::source_file("configs/llama-tiny.json") + " --strategy " + st);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(st + ": pipelines[0].stages[0]: tp 2 x cp 2 = 4 ranks, but the stage lists 6 [0-5]"));
}

// How worker processes started by a verbose run inherit the setting.
TEST_F(ErrorsCli, VerboseFromTheEnvironment) {
  const testing::RunResult r = run("data info " + path("absent"), "HSPMD_VERBOSE=1");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(lines(r.err), 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("hspmd: raised at src/hspmd/data/token_dataset.cc:"));
}

// A file system error (not an hspmd::Error): the output directory's parent is a regular file.
TEST_F(ErrorsCli, UnwritablePathIsOneLineAndExitOne) {
  write_file("not-a-dir", "x");
  const testing::RunResult r = run("data prepare --input " + testing::source_file("data/corpus/kjv-genesis-2kings.txt") +
                             " --output " + path("not-a-dir/dataset"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, StartsWith("hspmd: error: "));
  EXPECT_THAT(r.err, HasSubstr("not-a-dir/dataset"));
  EXPECT_THAT(r.err, Not(HasSubstr("terminate")));
}

// What a new user types first: the version, and hspmd alone, which lists the commands.
TEST_F(ErrorsCli, VersionAndTheCommandList) {
  const testing::RunResult v = run("--version");
  EXPECT_EQ(v.code, 0);
  EXPECT_THAT(v.out, StartsWith("hspmd 0."));
  const testing::RunResult bare = run("");
  EXPECT_EQ(bare.code, 1);
  for (const char* command : {"train", "explain", "plan", "eval", "data", "launch", "checkpoint"}) {
    EXPECT_THAT(bare.out, HasSubstr(std::string("\n  ") + command)) << bare.out;
  }
}

// `--device cuda` where no GPU is visible (this machine, or a build without the CUDA backend): one
// line naming the device, before any step. With a GPU the run would train: skipped there.
TEST_F(ErrorsCli, TrainOnAGpuWithoutOneIsOneLine) {
#if HSPMD_CUDA
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is visible: --device cuda trains here";
#endif
  std::string text;
  for (int i = 0; i < 40; ++i) text += "In the beginning was a line of text, number " + std::to_string(i) + ".\n";
  const testing::RunResult prepared =
      run("data prepare --input " + write_file("text.txt", text) + " --output " + path("data"));
  ASSERT_EQ(prepared.code, 0) << prepared.err;
  const std::string train = "train --model " + testing::source_file("configs/llama-tiny.json") + " --data " +
                            path("data") + " --steps 1 --seq-len 64 --global-batch-tokens 256 --threads 1";
  const testing::RunResult r = run(train + " --device cuda");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, StartsWith("hspmd: error: device cuda:0: "));
#if HSPMD_CUDA
  EXPECT_THAT(r.err, HasSubstr("no CUDA device is visible to this process"));
#else
  EXPECT_THAT(r.err, HasSubstr("built without the CUDA backend"));
#endif
  const testing::RunResult bad = run(train + " --device gpu");
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, HasSubstr("--device gpu: expected cpu, cuda or cuda:N"));
  // NCCL moves GPU memory: with CPU ranks it is an error naming the flag, before any worker starts.
  const std::string dp2 = " --strategy " + testing::source_file("examples/strategies/local-dp2.json");
  const testing::RunResult nccl_on_cpu = run(train + " --comm nccl" + dp2 + " --nproc 2");
  EXPECT_EQ(nccl_on_cpu.code, 1);
  EXPECT_EQ(lines(nccl_on_cpu.err), 1) << nccl_on_cpu.err;
  EXPECT_THAT(nccl_on_cpu.err, HasSubstr("--comm nccl moves GPU memory, but the ranks compute on cpu"));
  const testing::RunResult unknown = run(train + " --comm mpi" + dp2);
  EXPECT_EQ(unknown.code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("--comm mpi: expected gloo or nccl"));
}

// `hspmd profile --device cuda` where no GPU is visible: one line naming the device; with emulated
// devices or a cluster spec beside it, one line saying to give one.
TEST_F(ErrorsCli, ProfileOnAGpuWithoutOneIsOneLine) {
#if HSPMD_CUDA
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is visible: --device cuda profiles here";
#endif
  const std::string profile =
      "profile --model " + testing::source_file("configs/llama-tiny.json") + " --out " + path("p.json");
  const testing::RunResult r = run(profile + " --device cuda:1");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, StartsWith("hspmd: error: profile --device cuda:1: "));
#if HSPMD_CUDA
  EXPECT_THAT(r.err, HasSubstr("no CUDA device is visible to this process"));
#else
  EXPECT_THAT(r.err, HasSubstr("built without the CUDA backend"));
#endif
  const testing::RunResult emulated =
      run(profile + " --device cuda --devices " + testing::source_file("examples/devices/local-hetero-4.json"));
  EXPECT_EQ(emulated.code, 1);
  EXPECT_THAT(emulated.err, HasSubstr("--devices emulates device kinds on the host's cores; --device cuda:0"));
  const testing::RunResult bad = run(profile + " --device tpu");
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, HasSubstr("--device tpu: expected cpu, cuda or cuda:N"));
  EXPECT_FALSE(std::filesystem::exists(path("p.json")));
}

TEST_F(ErrorsCli, MissingDatasetNamesTheFile) {
  const testing::RunResult r = run("data info " + path("absent"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(path("absent") + "/index.bin"));
  EXPECT_THAT(r.err, Not(HasSubstr(".cc:")));
}

}  // namespace
}  // namespace hspmd::cli
