// The training loop of every `hspmd train` mode (runtime/training_loop.h) on the tiny Llama in one
// process: its losses are the trainer's own, evaluation and checkpoints follow their cadence and
// come before the after-step hooks, scheduled switches happen before their step (a refused one is
// logged and training goes on, one already in the past is skipped), a non-finite loss stops the run,
// and a recovering hook lets the loop go on where an unrecovered error ends it.
#include "hspmd/runtime/training_loop.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "hspmd/models/llama_plan.h"
#include "hspmd/runtime/sharded_checkpoint.h"
#include "hspmd/runtime/scheduled_switches.h"
#include "hspmd/runtime/trainer.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::corpus_dataset;
using testing::error_of;
using testing::tiny_config;
using testing::tiny_options;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::vector<nlohmann::json> records_of(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Records what the hook sees, in order: "before 3", "after 3 (checkpoint at 2)".
class RecordingHook : public TrainingHook {
 public:
  explicit RecordingHook(std::string save_dir) : save_dir_(std::move(save_dir)) {}
  void before_step(TrainingLoop& loop) override {
    events.push_back("before " + std::to_string(loop.trainer().step_count() + 1));
  }
  void after_step(TrainingLoop&, const StepMetrics& m) override {
    const std::string saved = std::filesystem::exists(save_dir_)
                                  ? std::to_string(read_checkpoint_state(save_dir_).at("step").get<int64_t>())
                                  : "none";
    events.push_back("after " + std::to_string(m.step) + " (checkpoint at " + saved + ")");
  }
  std::vector<std::string> events;

 private:
  std::string save_dir_;
};

class TrainingLoopTest : public testing::TempDirTest {
 protected:
  data::TokenDataset dataset_ = data::TokenDataset::open(corpus_dataset());
};

TEST_F(TrainingLoopTest, LossesAreTheTrainersOwnBitForBit) {
  Trainer by_hand(tiny_config(), dataset_, tiny_options(4));
  std::vector<double> expected;
  while (!by_hand.done()) expected.push_back(by_hand.step().loss);

  Trainer trainer(tiny_config(), dataset_, tiny_options(4));
  std::ostringstream out;
  TrainingLog log(out, {.total_steps = 4});
  TrainingLoop loop(trainer.distributed(), log, {});
  loop.run();
  EXPECT_EQ(loop.losses(), expected);
  EXPECT_EQ(loop.first_step(), 1);
  const std::vector<std::string> lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 4u) << out.str();
  EXPECT_THAT(lines[0], StartsWith("step     1/4  loss "));
  EXPECT_THAT(lines[3], StartsWith("step     4/4  loss "));
}

TEST_F(TrainingLoopTest, EvaluatesAndSavesOnTheirCadenceThenRunsTheAfterStepHooks) {
  Trainer trainer(tiny_config(), dataset_, tiny_options(5));
  std::ostringstream out;
  TrainingLog log(out, {.total_steps = 5, .metrics_path = path("metrics.jsonl")});
  TrainingLoop loop(trainer.distributed(), log,
                    {.eval_every = 2, .eval_tokens = 1024, .validation = &dataset_, .save_dir = path("ckpt"),
                     .save_every = 2});
  RecordingHook hook(path("ckpt"));
  loop.add_hook(hook);
  loop.run();

  const std::string ckpt = path("ckpt");
  const std::vector<std::string> expected_starts = {
      "step     1/5", "step     2/5", "eval after step 2: validation loss", "saved checkpoint " + ckpt + " at step 2",
      "step     3/5", "step     4/5", "eval after step 4: validation loss", "saved checkpoint " + ckpt + " at step 4",
      "step     5/5", "eval after step 5: validation loss", "saved checkpoint " + ckpt + " at step 5"};
  const std::vector<std::string> lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), expected_starts.size()) << out.str();
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_THAT(lines[i], StartsWith(expected_starts[i])) << i;

  // The after-step hook runs once the step's checkpoint is written.
  ASSERT_EQ(hook.events.size(), 10u);
  EXPECT_EQ(hook.events[0], "before 1");
  EXPECT_EQ(hook.events[1], "after 1 (checkpoint at none)");
  EXPECT_EQ(hook.events[3], "after 2 (checkpoint at 2)");
  EXPECT_EQ(hook.events[5], "after 3 (checkpoint at 2)");
  EXPECT_EQ(hook.events[9], "after 5 (checkpoint at 5)");

  const std::vector<nlohmann::json> records = records_of(path("metrics.jsonl"));
  ASSERT_EQ(records.size(), 8u);  // 5 steps, 3 evaluations; checkpoints have no record
  std::vector<std::string> kinds;
  for (const nlohmann::json& r : records) {
    kinds.push_back(r.contains("event") ? r.at("event").get<std::string>() + " " + std::to_string(r.at("step").get<int>())
                                        : "step " + std::to_string(r.at("step").get<int>()));
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"step 1", "step 2", "eval 2", "step 3", "step 4", "eval 4", "step 5",
                                             "eval 5"}));
  EXPECT_EQ(records[1].at("loss").get<double>(), loop.losses()[1]);
  EXPECT_TRUE(std::isfinite(records[2].at("val_loss").get<double>()));
  EXPECT_EQ(read_checkpoint_state(ckpt).at("step"), 5);
}

TEST_F(TrainingLoopTest, SwitchesBeforeTheirStepLogsARefusalAndSkipsThePast) {
  const models::LlamaConfig config = tiny_config();
  const TrainerOptions options = tiny_options(5);
  const sharding::Strategy start = single_rank_strategy(config, options);
  sharding::Strategy halves = start;
  halves.name = "two-micro-batches";
  halves.pipelines[0].micro_batch_size = (halves.pipelines[0].micro_batch_size + 1) / 2;
  halves.pipelines[0].num_micro_batches = 2;
  ScheduledPlan refused{3, "none.json", start, models::compile_llama_plan(config, start)};
  refused.strategy.name = "no-pipelines";
  refused.plan.pipelines.clear();  // invalid: the switch is refused before anything moves
  std::vector<ScheduledPlan> plans = {{1, "start.json", start, models::compile_llama_plan(config, start)},
                                      {2, "past.json", halves, models::compile_llama_plan(config, halves)},
                                      refused,
                                      {5, "halves.json", halves, models::compile_llama_plan(config, halves)}};

  Trainer trainer(config, dataset_, options);
  trainer.step();  // step 1 taken before the loop: the switch before step 2 is the next one
  trainer.step();  // and now it is past
  std::ostringstream out;
  TrainingLog log(out, {.total_steps = 5, .metrics_path = path("metrics.jsonl")});
  TrainingLoop loop(trainer.distributed(), log, {});
  ScheduledSwitches switches(plans, 0);
  loop.add_hook(switches);
  loop.run();

  EXPECT_EQ(loop.first_step(), 3);
  EXPECT_EQ(loop.losses().size(), 3u);
  EXPECT_EQ(trainer.distributed().plan_name(), "two-micro-batches");
  const std::vector<std::string> lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 6u) << out.str();  // refusal, step 3, step 4, switch, describe(), step 5
  EXPECT_THAT(lines[0], HasSubstr("training goes on under plan single-process"));
  EXPECT_THAT(lines[1], StartsWith("step     3/5"));
  EXPECT_THAT(lines[2], StartsWith("step     4/5"));
  EXPECT_THAT(lines[3], StartsWith("switch after step 4: plan single-process -> two-micro-batches"));
  EXPECT_THAT(lines[4], StartsWith("rank 0:"));
  EXPECT_THAT(lines[5], StartsWith("step     5/5"));
  const std::vector<nlohmann::json> records = records_of(path("metrics.jsonl"));
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[2].at("event"), "switch");
  EXPECT_EQ(records[2].at("to"), "two-micro-batches");
  EXPECT_EQ(records[3].at("step"), 5);
}

// Makes every weight NaN before step `at`.
class PoisonHook : public TrainingHook {
 public:
  PoisonHook(Trainer& trainer, int64_t at) : trainer_(trainer), at_(at) {}
  void before_step(TrainingLoop& loop) override {
    if (loop.trainer().step_count() + 1 != at_) return;
    graph::TensorMap nan;
    for (const auto& [name, value] : trainer_.parameters()) {
      Tensor t = value.clone();
      t.fill(std::numeric_limits<double>::quiet_NaN());
      nan.emplace(name, t);
    }
    loop.trainer().load_weights(nan);
  }

 private:
  Trainer& trainer_;
  int64_t at_;
};

TEST_F(TrainingLoopTest, ANonFiniteLossStopsTheRunNamingTheStep) {
  TrainerOptions options = tiny_options(6);
  Trainer trainer(tiny_config(), dataset_, options);
  std::ostringstream out;
  TrainingLog log(out, {.total_steps = 6});
  TrainingLoop loop(trainer.distributed(), log, {.save_dir = path("ckpt"), .save_every = 1});
  PoisonHook poison(trainer, 3);
  loop.add_hook(poison);
  const std::string error = error_of([&] { loop.run(); });
  EXPECT_THAT(error, HasSubstr("training diverged at step 3: loss nan"));
  EXPECT_THAT(error, HasSubstr("lower --lr or enable --clip"));
  EXPECT_EQ(lines_of(out.str()).size(), 4u) << out.str();  // steps 1, 2 and their checkpoints
  EXPECT_EQ(read_checkpoint_state(path("ckpt")).at("step"), 2);  // the diverged step was not saved
  EXPECT_EQ(loop.losses().size(), 3u);
}

// Recovers from the first error by forgetting what it knew after step 1 and logging that.
class RecoverOnceHook : public TrainingHook {
 public:
  void before_step(TrainingLoop& loop) override {
    if (loop.trainer().step_count() == 2 && !failed_) {
      failed_ = true;
      HSPMD_THROW() << "worker lost before step 3";
    }
  }
  bool recover(TrainingLoop& loop, const Error& error) override {
    if (recovered_) return false;
    recovered_ = true;
    causes.push_back(error.what());
    loop.rewind(1);
    loop.log().line("recovered");
    return true;
  }
  std::vector<std::string> causes;

 private:
  bool failed_ = false, recovered_ = false;
};

TEST_F(TrainingLoopTest, ARecoveringHookLetsTheLoopGoOnAndOtherErrorsEndIt) {
  Trainer trainer(tiny_config(), dataset_, tiny_options(4));
  std::ostringstream out;
  TrainingLog log(out, {.total_steps = 4});
  TrainingLoop loop(trainer.distributed(), log, {});
  RecoverOnceHook hook;
  loop.add_hook(hook);
  loop.run();
  ASSERT_EQ(hook.causes.size(), 1u);
  EXPECT_THAT(hook.causes[0], HasSubstr("worker lost before step 3"));
  // Step 2's loss was forgotten by rewind(1); steps 3 and 4 follow (the trainer itself was not rewound).
  EXPECT_EQ(loop.losses().size(), 3u);
  const std::vector<std::string> lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 5u) << out.str();
  EXPECT_EQ(lines[2], "recovered");

  Trainer again(tiny_config(), dataset_, tiny_options(4));
  TrainingLoop unrecovered(again.distributed(), log, {});
  RecoverOnceHook once;
  once.recover(unrecovered, Error("spent"));  // its one recovery is used up
  unrecovered.add_hook(once);
  EXPECT_THAT(error_of([&] { unrecovered.run(); }), HasSubstr("worker lost before step 3"));
}

TEST_F(TrainingLoopTest, EvaluationWithoutAValidationDatasetIsRefused) {
  Trainer trainer(tiny_config(), dataset_, tiny_options(2));
  std::ostringstream out;
  TrainingLog log(out, {.total_steps = 2});
  EXPECT_THAT(error_of([&] { TrainingLoop loop(trainer.distributed(), log, {.eval_every = 1}); }),
              HasSubstr("needs a validation dataset"));
}

}  // namespace
}  // namespace hspmd::runtime
