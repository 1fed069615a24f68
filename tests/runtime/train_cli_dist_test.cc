// `hspmd train --strategy` through the built binary and real worker processes: a heterogeneous
// 4-process run on emulated devices whose losses match a single-process retraining (the demo's
// check), a resume under another strategy, and a plan refused up front for an emulated memory cap.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hspmd/core/safetensors.h"
#include "hspmd/models/llama_config.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::run_hspmd;

class TrainCli : public testing::TempDirTest {
 protected:
  std::string common(int steps) const {
    return "train --model " + (testing::source_dir() / "configs/llama-tiny.json").string() + " --data " +
           testing::corpus_dataset() + " --steps " + std::to_string(steps) +
           " --seq-len 64 --global-batch-tokens 512 --warmup 2 --threads 1";
  }
  std::string example(const std::string& rel) const { return (testing::source_dir() / rel).string(); }
};

TEST_F(TrainCli, HeterogeneousStrategyOnEmulatedDevicesMatchesOneProcess) {
  const std::string trace = path("trace.json");
  testing::CommandResult r = run_hspmd(common(3) + " --nproc 4 --strategy " +
                                       example("examples/strategies/local-hetero-4.json") + " --devices " +
                                       example("examples/devices/local-hetero-4.json") + " --trace " + trace +
                                       " --check-single");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("emulated devices: rank 0 fast"), HasSubstr("pipeline 1, stage 2/2"),
                              HasSubstr("step     3/3"), HasSubstr("losses match the single-process run"),
                              HasSubstr("PASS")));
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(std::filesystem::exists(path("trace.rank" + std::to_string(rank) + ".json"))) << rank;
  }
}

// --check-single retrains at the run's precision: a bf16 run is compared with a bf16 process.
TEST_F(TrainCli, CheckSingleRetrainsAtTheRunsPrecision) {
  testing::CommandResult r = run_hspmd(common(2) + " --precision bf16 --nproc 2 --strategy " +
                                       example("examples/strategies/local-dp2.json") + " --check-single");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("precision bf16"), HasSubstr("tolerance 1e-04): PASS")));
}

// Every "loss" (or another field) of a metrics file's step lines, in order.
std::vector<double> metric(const std::string& path, const std::string& field = "loss") {
  std::ifstream in(path);
  std::vector<double> out;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("event")) out.push_back(j.at(field).get<double>());
  }
  return out;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i])) << "step " << i + 1;
}

// Steps 1-2 under DP 2, steps 3-4 resumed under TP 2 x PP 2 with recomputation: the same losses
// and learning rates as one uninterrupted process. The resumed run is not given --lr: it keeps the
// checkpoint's (not the default), and takes the new --steps it is given.
TEST_F(TrainCli, SaveUnderOneStrategyResumeUnderAnother) {
  const std::string ckpt = path("ckpt"), metrics = path("m.jsonl"), reference = path("ref.jsonl");
  testing::CommandResult a = run_hspmd(common(2) + " --lr 5e-3 --decay-steps 4 --nproc 2 --strategy " +
                                       example("examples/strategies/local-dp2.json") + " --save " + ckpt +
                                       " --metrics " + metrics);
  ASSERT_EQ(a.code, 0) << a.output;
  testing::CommandResult b =
      run_hspmd(common(4) + " --nproc 4 --strategy " + example("examples/strategies/local-tp2-pp2.json") +
                " --resume " + ckpt + " --recompute --metrics " + metrics + " --check-single");
  ASSERT_EQ(b.code, 0) << b.output;
  EXPECT_THAT(b.output, AllOf(HasSubstr("resumed from"), HasSubstr("at step 2"), HasSubstr("step     4/4"),
                              HasSubstr("recomputing each layer in B")));
  // --check-single retrains from the same checkpoint: steps 3 and 4, with its options.
  EXPECT_THAT(b.output, AllOf(HasSubstr("retraining 2 steps in one process"), HasSubstr("step   3  distributed"),
                              HasSubstr("PASS")));
  testing::CommandResult r = run_hspmd(common(4) + " --lr 5e-3 --decay-steps 4 --metrics " + reference);
  ASSERT_EQ(r.code, 0) << r.output;
  expect_close(metric(metrics), metric(reference));
  expect_close(metric(metrics, "lr"), metric(reference, "lr"));
}

// One checkpoint format: a distributed run's checkpoint is evaluated and resumed by one process,
// and a run under another model config is refused, naming the key that differs.
TEST_F(TrainCli, DistributedCheckpointServesEvalAndOneProcess) {
  const std::string ckpt = path("ckpt"), metrics = path("m.jsonl"), reference = path("ref.jsonl");
  testing::CommandResult a = run_hspmd(common(2) + " --decay-steps 3 --nproc 4 --strategy " +
                                       example("examples/strategies/local-hetero-4.json") + " --save " + ckpt +
                                       " --metrics " + metrics);
  ASSERT_EQ(a.code, 0) << a.output;
  testing::CommandResult e = run_hspmd("eval --model " + example("configs/llama-tiny.json") + " --weights " + ckpt +
                                       " --data " + testing::corpus_dataset() + " --max-tokens 2000 --seq-len 64");
  ASSERT_EQ(e.code, 0) << e.output;
  EXPECT_THAT(e.output, HasSubstr("perplexity"));
  testing::CommandResult b = run_hspmd(common(3) + " --resume " + ckpt + " --metrics " + metrics);
  ASSERT_EQ(b.code, 0) << b.output;
  testing::CommandResult r = run_hspmd(common(3) + " --decay-steps 3 --metrics " + reference);
  ASSERT_EQ(r.code, 0) << r.output;
  expect_close(metric(metrics), metric(reference));

  models::LlamaConfig wider = models::LlamaConfig::from_file(example("configs/llama-tiny.json"));
  wider.intermediate_size = 256;
  std::ofstream(path("wider.json")) << wider.to_json_text();
  testing::CommandResult bad = run_hspmd("train --model " + path("wider.json") + " --data " +
                                         testing::corpus_dataset() + " --steps 3 --seq-len 64 --resume " + ckpt);
  EXPECT_NE(bad.code, 0);
  EXPECT_THAT(bad.output, AllOf(HasSubstr("intermediate_size"), HasSubstr("352"), HasSubstr("256")));
}

// --init-weights under a strategy: Hugging Face weights sharded over two files with their index;
// every rank reads its slices, and the losses are those of one process started from the same file.
TEST_F(TrainCli, DistributedRunStartsFromShardedHuggingFaceWeights) {
  const std::string single = path("single.safetensors");
  testing::CommandResult d = run_hspmd(common(1) + " --seed 7 --dump-init-weights " + single);
  ASSERT_EQ(d.code, 0) << d.output;
  std::filesystem::create_directories(path("hf"));
  const std::map<std::string, Tensor> all = safetensors::load_all(single);
  std::vector<std::pair<std::string, Tensor>> first, second;
  nlohmann::json map;
  for (const auto& [name, t] : all) {
    const bool in_first = name.find("layers.0.") != std::string::npos || name.find("embed") != std::string::npos;
    (in_first ? first : second).emplace_back(name, t);
    map[name] = in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  safetensors::save(path("hf/model-00001-of-00002.safetensors"), first, {{"format", "pt"}});
  safetensors::save(path("hf/model-00002-of-00002.safetensors"), second, {{"format", "pt"}});
  std::ofstream(path("hf/model.safetensors.index.json")) << nlohmann::json{{"metadata", {}}, {"weight_map", map}}.dump();

  testing::CommandResult one = run_hspmd(common(2) + " --init-weights " + single + " --metrics " + path("one.jsonl"));
  ASSERT_EQ(one.code, 0) << one.output;
  testing::CommandResult dist = run_hspmd(common(2) + " --nproc 4 --strategy " +
                                          example("examples/strategies/local-hetero-4.json") + " --init-weights " +
                                          path("hf") + " --metrics " + path("dist.jsonl") + " --check-single");
  ASSERT_EQ(dist.code, 0) << dist.output;
  // --check-single starts its one process from the same weights, not from the seed's.
  EXPECT_THAT(dist.output, AllOf(HasSubstr("loaded weights from"), HasSubstr("PASS")));
  expect_close(metric(path("dist.jsonl")), metric(path("one.jsonl")));
  // The weights differ from the run's own initialization (seed 1): otherwise this proves nothing.
  testing::CommandResult plain = run_hspmd(common(2) + " --metrics " + path("plain.jsonl"));
  ASSERT_EQ(plain.code, 0) << plain.output;
  EXPECT_NE(metric(path("plain.jsonl")), metric(path("one.jsonl")));
}

// --eval-every on a dataset with a validation split: one process and a strategy report the same
// validation losses, in the log and in the metrics; without a split the run refuses to start.
TEST_F(TrainCli, ValidationLossEveryKStepsEqualsOneProcess) {
  const std::string data = path("kjv");
  testing::CommandResult p = run_hspmd("data prepare --input " + testing::corpus_file() + " --output " + data +
                                       " --append-eos --val-fraction 0.02");
  ASSERT_EQ(p.code, 0) << p.output;
  const std::string args = "train --model " + example("configs/llama-tiny.json") + " --data " + data +
                           " --steps 3 --seq-len 64 --global-batch-tokens 512 --warmup 2 --threads 1 --eval-every 2 "
                           "--eval-tokens 1024";
  testing::CommandResult one = run_hspmd(args + " --metrics " + path("one.jsonl"));
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_THAT(one.output, AllOf(HasSubstr("eval after step 2: validation loss"), HasSubstr("eval after step 3")));
  testing::CommandResult dist = run_hspmd(args + " --nproc 4 --strategy " +
                                          example("examples/strategies/local-hetero-4.json") + " --metrics " +
                                          path("dist.jsonl"));
  ASSERT_EQ(dist.code, 0) << dist.output;
  auto val_losses = [](const std::string& file) {
    std::ifstream in(file);
    std::vector<double> out;
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.value("event", "") == "eval") out.push_back(j.at("val_loss").get<double>());
    }
    return out;
  };
  ASSERT_EQ(val_losses(path("one.jsonl")).size(), 2u);
  expect_close(val_losses(path("dist.jsonl")), val_losses(path("one.jsonl")));

  testing::CommandResult none = run_hspmd(common(2) + " --eval-every 1");
  EXPECT_NE(none.code, 0);
  EXPECT_THAT(none.output, HasSubstr("--val-fraction"));
}

// The communication timeout: `hspmd launch --comm-timeout` hands it to the workers, `hspmd train`
// reads it (or its own flag) and refuses a bad value before training.
TEST_F(TrainCli, CommTimeoutReachesTheWorkers) {
  testing::CommandResult r = run_hspmd("launch -n 2 --comm-timeout 7 -- /bin/sh -c 'test \"$HSPMD_COMM_TIMEOUT\" = 7.000000'");
  EXPECT_EQ(r.code, 0) << r.output;
  r = run_hspmd(common(1) + " --nproc 2 --strategy " + example("examples/strategies/local-dp2.json") +
                " --comm-timeout 0");
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.output, HasSubstr("--comm-timeout"));
  testing::CommandResult bad = run_hspmd("launch -n 2 -- /usr/bin/env HSPMD_COMM_TIMEOUT=soon " +
                                         testing::hspmd_binary() + " " + common(1) + " --strategy " +
                                         example("examples/strategies/local-dp2.json"));
  EXPECT_NE(bad.code, 0);
  EXPECT_THAT(bad.output, HasSubstr("HSPMD_COMM_TIMEOUT=soon is not a positive number of seconds"));
}

// --grad-bucket-mb reaches the workers: with buckets, rank 0's gradient reductions (its
// "grad-bucket" trace spans) run on a thread of their own, with 0 on the thread that runs B; the
// losses are the same. A negative size is refused before training.
TEST_F(TrainCli, GradientBucketsMoveTheSyncToACommunicationThread) {
  std::map<std::string, std::vector<double>> losses;
  for (const std::string name : {"after", "overlapped"}) {
    const std::string mib = name == "after" ? "0" : "0.004";
    testing::CommandResult r = run_hspmd(common(2) + " --nproc 2 --strategy " +
                                         example("examples/strategies/local-dp2.json") + " --grad-bucket-mb " + mib +
                                         " --trace " + path(name + ".json") + " --metrics " + path(name + ".jsonl"));
    ASSERT_EQ(r.code, 0) << r.output;
    losses[name] = metric(path(name + ".jsonl"));
    std::ifstream in(path(name + ".rank0.json"));
    const nlohmann::json trace = nlohmann::json::parse(in);
    std::set<int> backward_threads, sync_threads;
    int buckets = 0;
    for (const nlohmann::json& e : trace.at("traceEvents")) {
      const std::string event = e.at("name").get<std::string>();
      if (event.rfind("grad-bucket", 0) == 0) {
        sync_threads.insert(e.at("tid").get<int>());
        ++buckets;
      } else if (event[0] == 'B' && event.size() > 1 && std::isdigit(static_cast<unsigned char>(event[1]))) {
        backward_threads.insert(e.at("tid").get<int>());
      }
    }
    ASSERT_EQ(backward_threads.size(), 1u) << name;
    ASSERT_EQ(sync_threads.size(), 1u) << name;
    EXPECT_EQ(*sync_threads.begin() == *backward_threads.begin(), name == "after") << name;
    if (name == "overlapped") {
      EXPECT_GT(buckets, 2 * 2) << "more than 2 buckets in each of the 2 steps";
    }
  }
  EXPECT_EQ(losses["overlapped"], losses["after"]);
  testing::CommandResult bad = run_hspmd(common(1) + " --nproc 2 --strategy " +
                                         example("examples/strategies/local-dp2.json") + " --grad-bucket-mb -1");
  EXPECT_NE(bad.code, 0);
  EXPECT_THAT(bad.output, HasSubstr("--grad-bucket-mb"));
}

TEST_F(TrainCli, PlanBeyondEmulatedMemoryIsRefusedUpFront) {
  const std::string strategy = path("one.json");
  std::ofstream(strategy) << R"({"name": "one", "pipelines": [{"micro_batch_size": 8, "num_micro_batches": 1,
                                 "stages": [{"ranks": "0", "layers": "0-3"}]}]})";
  testing::CommandResult r = run_hspmd(common(1) + " --nproc 1 --strategy " + strategy + " --devices " +
                                       example("examples/devices/tiny-memory.json"));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.output, AllOf(HasSubstr("rank 0 (tiny)"), HasSubstr("needs about"),
                              HasSubstr("capacity of 1048576 bytes")));
}

// A strategy that cannot run, given as the start or as a --switch, is refused by the launching
// process in one line before any worker starts (no "[rank N]" output), naming what is at fault.
TEST_F(TrainCli, UnrunnableStrategiesAreRefusedOnceBeforeLaunch) {
  auto refused_once = [](const testing::CommandResult& r) {
    EXPECT_NE(r.code, 0);
    EXPECT_THAT(r.output, Not(HasSubstr("[rank ")));
    size_t errors = 0;
    for (size_t at = r.output.find("hspmd: error:"); at != std::string::npos; at = r.output.find("hspmd: error:", at + 1)) {
      ++errors;
    }
    EXPECT_EQ(errors, 1u) << r.output;
  };
  const std::string tp3 = path("tp3.json");
  std::ofstream(tp3) << R"({"name": "tp3", "pipelines": [{"micro_batch_size": 2, "num_micro_batches": 2,
      "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1-3", "layers": "2-3", "tp": 3}]}]})";
  testing::CommandResult r = run_hspmd(common(2) + " --nproc 4 --strategy " + tp3);
  refused_once(r);
  EXPECT_THAT(r.output, HasSubstr("pipelines[0].stages[1]: TP degree 3 (ranks [1-3]) does not divide num_attention_heads 4"));
  const std::string typo = path("typo.json");
  std::ofstream(typo) << R"({"name": "typo", "pipelines": [{"micro_batch_size": 2, "num_micro_batches": 2,
      "stages": [{"ranks": "0-1", "layers": "0-3", "tpp": 2}]}]})";
  r = run_hspmd(common(3) + " --nproc 2 --strategy " + example("examples/strategies/local-dp2.json") + " --switch 2:" +
                typo);
  refused_once(r);
  EXPECT_THAT(r.output, HasSubstr(typo + ": pipelines[0].stages[0]: unknown key \"tpp\" (did you mean \"tp\"?)"));
}

// --switch: TP 2 x PP 2, then 2-way data parallelism (ranks 2-3 wait as spares), then back, each
// switch one fused BSR without a restart; the losses stay those of one process, and the metrics
// record each switch.
TEST_F(TrainCli, SwitchesStrategiesMidRunWithoutRestart) {
  const std::string metrics = path("metrics.jsonl");
  testing::CommandResult r = run_hspmd(common(5) + " --nproc 4 --strategy " +
                                       example("examples/strategies/local-tp2-pp2.json") + " --switch 3:" +
                                       example("examples/strategies/local-dp2.json") + " --switch 5:" +
                                       example("examples/strategies/local-tp2-pp2.json") + " --metrics " + metrics +
                                       " --check-single");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("switch after step 2: plan local-tp2-pp2 -> local-dp2 (specialized now)"),
                              HasSubstr("switch after step 4: plan local-dp2 -> local-tp2-pp2 (cached graphs)"),
                              HasSubstr("rank 3: spare under plan local-dp2"), HasSubstr("PASS")));
  std::ifstream in(metrics);
  int switches = 0, steps = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.value("event", "") == "switch") {
      ++switches;
      EXPECT_GT(j.at("sent_bytes").get<int64_t>(), 0) << line;
      EXPECT_GT(j.at("sent_bytes_by_tier").at("intra-node").get<int64_t>(), 0) << line;
      EXPECT_GT(j.at("bsr_seconds").get<double>(), 0) << line;
      EXPECT_GE(j.at("total_seconds").get<double>(), j.at("bsr_seconds").get<double>()) << line;
    } else {
      ++steps;
    }
  }
  EXPECT_EQ(switches, 2);
  EXPECT_EQ(steps, 5);
}

// bf16-only switches between tensor parallelism and a two-stage pipeline on two ranks; the
// master state lives under the strategy the run starts with (tp2), or under --base-strategy (pp2).
class Bf16BaseStrategy : public TrainCli {
 protected:
  void SetUp() override {
    TrainCli::SetUp();
    std::ofstream(path("tp2.json")) << R"({"name": "tp2", "pipelines": [
      {"micro_batch_size": 2, "num_micro_batches": 4, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})";
    std::ofstream(path("pp2.json")) << R"({"name": "pp2", "pipelines": [
      {"micro_batch_size": 1, "num_micro_batches": 8,
       "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]}]})";
  }
  // tp2 for steps 1-2, pp2 for steps 3-4.
  std::string run(const std::string& flags) const {
    return common(4) + " --nproc 2 --precision bf16 --switch-states bf16-params --strategy " + path("tp2.json") +
           " --switch 3:" + path("pp2.json") + flags;
  }
};

// Each step's metrics record: its bf16 moves (base, parameter bytes out), or none under the base.
std::vector<nlohmann::json> bf16_moves(const std::string& metrics) {
  std::ifstream in(metrics);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("event")) out.push_back(j.value("bf16_switch", nlohmann::json()));
  }
  return out;
}

// With --base-strategy pp2 the state is laid out under pp2 from the start: steps 1-2 (tp2) pay the
// moves from pp2 and steps 3-4 none, the reverse of the default run; both train the same within
// bf16 rounding of the weights no kernel rounds (2e-3, as --check-single allows bf16-only switches).
TEST_F(Bf16BaseStrategy, ChoosesTheLayoutHoldingTheStateAndTrainsTheSame) {
  const testing::CommandResult by_default = run_hspmd(run(" --metrics " + path("default.jsonl")));
  ASSERT_EQ(by_default.code, 0) << by_default.output;
  const testing::CommandResult r =
      run_hspmd(run(" --base-strategy " + path("pp2.json") + " --check-single --metrics " + path("pp2.jsonl")));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("switch after step 0: plan pp2 -> tp2 (specialized now), bf16 only: weights and "
                                  "Adam moments stay under plan pp2"));
  EXPECT_THAT(r.output, HasSubstr("| bf16 switch pp2 -> tp2: params out"));
  EXPECT_THAT(r.output, HasSubstr("(tolerance 2e-03): PASS"));

  const std::vector<nlohmann::json> pp2_base = bf16_moves(path("pp2.jsonl"));
  const std::vector<nlohmann::json> tp2_base = bf16_moves(path("default.jsonl"));
  ASSERT_EQ(pp2_base.size(), 4u);
  ASSERT_EQ(tp2_base.size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    const bool under_tp2 = k < 2;
    const nlohmann::json& moved = under_tp2 ? pp2_base[k] : tp2_base[k];
    ASSERT_TRUE(moved.is_object()) << "step " << k + 1;
    EXPECT_EQ(moved.at("base"), under_tp2 ? "pp2" : "tp2") << "step " << k + 1;
    EXPECT_GT(moved.at("params_out_bytes").get<int64_t>(), 0) << "step " << k + 1;
    EXPECT_TRUE((under_tp2 ? tp2_base[k] : pp2_base[k]).is_null()) << "step " << k + 1 << " runs under the base";
  }
  const std::vector<double> got = metric(path("pp2.jsonl")), want = metric(path("default.jsonl"));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-3 * std::abs(want[i])) << "step " << i + 1;
}

TEST_F(Bf16BaseStrategy, ABaseOutsideTheRunIsRefusedNamingTheFile) {
  std::ofstream(path("dp2.json")) << R"({"name": "dp2", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "1", "layers": "0-3"}]}]})";
  testing::CommandResult r = run_hspmd(run(" --base-strategy " + path("dp2.json")));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.output, HasSubstr("--base-strategy " + path("dp2.json") + " (strategy dp2) is none of the run's "
                                  "strategies (tp2, pp2)"));
  EXPECT_THAT(r.output, Not(HasSubstr("[rank "))) << "a worker was started";

  r = run_hspmd(common(4) + " --nproc 2 --strategy " + path("tp2.json") + " --base-strategy " + path("tp2.json"));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.output, HasSubstr("--base-strategy " + path("tp2.json") + " names where bf16-only switches keep the "
                                  "master weights and Adam moments: it needs --switch-states bf16-params"));
}

TEST_F(TrainCli, BadSwitchIsRefusedBeforeTraining) {
  testing::CommandResult r = run_hspmd(common(4) + " --nproc 4 --strategy " +
                                       example("examples/strategies/local-tp2-pp2.json") + " --switch 9:" +
                                       example("examples/strategies/local-dp2.json"));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.output, HasSubstr("--switch 9:"));
  EXPECT_THAT(r.output, HasSubstr("the run has only 4 steps"));
}

TEST_F(TrainCli, BadOptionsAreRefusedBeforeAnyWorkerStarts) {
  // Otherwise every worker fails alike (and with --elastic --max-restarts each is restarted).
  testing::CommandResult r = run_hspmd(common(2) + " --lr 1e-4 --min-lr 1e-3 --nproc 4 --strategy " +
                                       example("examples/strategies/local-tp2-pp2.json"));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.output, HasSubstr("0 <= min_lr <= lr"));
  EXPECT_THAT(r.output, Not(HasSubstr("[rank "))) << "a worker was started";
}

TEST_F(TrainCli, WorldSizeMustMatchTheStrategy) {
  testing::CommandResult r =
      run_hspmd(common(1) + " --nproc 2 --strategy " + example("examples/strategies/local-hetero-4.json"));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.output, HasSubstr("but the run has 2 workers"));
}

}  // namespace
}  // namespace hspmd::runtime
