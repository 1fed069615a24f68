#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "error_of.h"
#include "hspmd/core/error.h"
#include "hspmd/sharding/plan.h"
#include "hspmd/sharding/strategy.h"

namespace hspmd::sharding {
namespace {

using hspmd::testing::error_of;

TEST(AnnotationPlan, RoundTripsThroughJsonAndFile) {
  AnnotationPlan plan;
  plan.set("w", Annotation::parse("dup{[0-1](S0:2;zero);[2-3](S0:2;zero)}"));
  plan.set("input_ids", Annotation::parse("split0{[0-1](D:2);[2-3](D:2)}"));
  plan.set_optimizer_state("w", Annotation::parse("split1{[0-1](S0:2);[2-3](S0:2)}"));
  plan.pipelines = {{2, 4}, {1, 8, 2, 6}};
  plan.recompute = true;
  plan.shard_gradients = true;
  plan.shard_parameters = true;
  AnnotationPlan back = AnnotationPlan::from_json_text(plan.to_json_text(), "mem");
  EXPECT_EQ(back, plan);
  EXPECT_EQ(back.optimizer_state("input_ids"), plan.at("input_ids"));  // falls back to the tensor
  const std::string path = ::testing::TempDir() + "/plan_round_trip.json";
  plan.save(path);
  EXPECT_EQ(AnnotationPlan::from_file(path), plan);
  std::remove(path.c_str());
}

TEST(AnnotationPlan, ErrorsNameTheKey) {
  const std::string bad = error_of([] { AnnotationPlan::from_json_text(R"({"tensors": {"lm_head.weight": "dup{[0-3"}})", "p.json"); });
  EXPECT_NE(bad.find("p.json: tensors.\"lm_head.weight\": "), std::string::npos) << bad;
  EXPECT_NE(bad.find("cannot parse annotation 'dup{[0-3' at offset 8: expected ']'"), std::string::npos) << bad;
  EXPECT_NE(error_of([] { AnnotationPlan::from_json_text(R"({"tensors": {}, "shard_parameters": true})", "p.json"); })
                .find("p.json: \"shard_parameters\" (ZeRO-3) needs \"shard_gradients\" (ZeRO-2) too"),
            std::string::npos);
  EXPECT_NE(error_of([] { AnnotationPlan::from_json_text(R"({"tensors": {"w": 3}})", "p.json"); })
                .find("tensors.\"w\": expected an annotation string"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              AnnotationPlan::from_json_text(R"({"tensors": {}, "optimizer_states": {"w": "dup{[0]()}"}})", "p.json");
            }).find("optimizer_states.\"w\": no tensor of that name"),
            std::string::npos);
  EXPECT_NE(error_of([] { AnnotationPlan::from_json_text(R"({"tensors": {}, "pipelines": [{"micro_batch_size": 0}]})", "p.json"); })
                .find("pipelines[0].micro_batch_size: expected a positive integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { AnnotationPlan::from_json_text("{}", "p.json"); }).find("missing required key \"tensors\""),
            std::string::npos);
  EXPECT_NE(error_of([] { AnnotationPlan().at("x"); }).find("tensor x is not in the annotation plan"), std::string::npos);
}

const char* kGood = R"({
  "name": "two-pipes", "zero1": true,
  "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 4,
     "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": [2], "layers": "2-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 8, "stages": [{"ranks": "3", "layers": "0-3"}]}
  ]})";

TEST(Strategy, ParsesValidatesAndRoundTrips) {
  Strategy s = Strategy::from_json_text(kGood, "s.json");
  EXPECT_EQ(s.zero, 1);
  EXPECT_FALSE(s.recompute);
  ASSERT_EQ(s.pipelines.size(), 2u);
  EXPECT_EQ(s.pipelines[0].stages[0].tp(), 2);
  EXPECT_EQ(s.pipelines[0].stages[1].first_layer, 2);
  EXPECT_EQ(s.stage_of_layer(0, 3), 1);
  EXPECT_EQ(s.ranks(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_NO_THROW(s.validate(4));
  EXPECT_EQ(Strategy::from_json_text(s.to_json_text(), "again"), s);
}

TEST(Strategy, ValidationCatchesEachBadCase) {
  Strategy s = Strategy::from_json_text(kGood, "s.json");
  // Layers not covered exactly once: a gap, an overlap, beyond the model.
  EXPECT_NE(error_of([&] { s.validate(5); }).find("pipelines[0]: layer 4 is not covered by any stage"), std::string::npos);
  Strategy overlap = s;
  overlap.pipelines[1].stages.push_back({{9}, 3, 3});
  EXPECT_NE(error_of([&] { overlap.validate(4); }).find("pipelines[1].stages[1].layers: layer 3 is also in stages[0]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.validate(3); }).find("exceeds the model's 3 layers"), std::string::npos);
  // A rank in two places.
  std::string two = kGood;
  two.replace(two.find("\"ranks\": \"3\""), 12, "\"ranks\": \"1\"");
  EXPECT_NE(error_of([&] { Strategy::from_json_text(two, "s.json"); })
                .find("s.json: pipelines[1].stages[0].ranks: rank 1 is also in pipelines[0].stages[0]"),
            std::string::npos);
  // Stages out of layer order, malformed ranges, missing keys.
  std::string order = kGood;
  order.replace(order.find("\"2-3\""), 5, "\"1-3\"");
  EXPECT_NE(error_of([&] { Strategy::from_json_text(order, "s.json"); }).find("stages must follow the layer order"),
            std::string::npos);
  std::string bad_layers = kGood;
  bad_layers.replace(bad_layers.find("\"2-3\""), 5, "\"3-2\"");
  EXPECT_NE(error_of([&] { Strategy::from_json_text(bad_layers, "s.json"); }).find("pipelines[0].stages[1].layers"),
            std::string::npos);
  EXPECT_NE(error_of([] { Strategy::from_json_text(R"({"pipelines": [{"micro_batch_size": 1, "stages": []}]})", "s.json"); })
                .find("pipelines[0]: missing required key \"num_micro_batches\""),
            std::string::npos);
  EXPECT_NE(error_of([] { Strategy::from_json_text(R"({"pipelines": [{"micro_batch_size": 1, "num_micro_batches": 1,
      "stages": [{"ranks": "0-x", "layers": "0"}]}]})", "s.json"); }).find("pipelines[0].stages[0].ranks"),
            std::string::npos);
}

// Context parallelism: "tp" x "cp" ranks per stage, CP coordinate outer (docs/context-parallelism.md).
TEST(Strategy, ContextParallelStagesParseAndRoundTrip) {
  Strategy s = Strategy::from_json_text(R"({"pipelines": [{"micro_batch_size": 2, "num_micro_batches": 1,
      "stages": [{"ranks": "0-3", "layers": "0-1", "tp": 2, "cp": 2}, {"ranks": "4-5", "layers": "2-3", "cp": 2}]}]})",
                                        "cp.json");
  EXPECT_EQ(s.pipelines[0].stages[0].cp, 2);
  EXPECT_EQ(s.pipelines[0].stages[0].tp(), 2);
  EXPECT_EQ(s.pipelines[0].stages[1].tp(), 1);
  EXPECT_NO_THROW(s.validate(4));
  EXPECT_EQ(Strategy::from_json_text(s.to_json_text(), "again"), s);
}

// Rows are padded for the zigzag chunks (2 x CP) and for the SP stages' token split (TP x CP) alike.
TEST(Strategy, SequenceParallelStagesSetTheRowMultiple) {
  const Strategy s = Strategy::from_json_text(R"({"pipelines": [{"micro_batch_size": 2, "num_micro_batches": 1,
      "stages": [{"ranks": "0-5", "layers": "0-1", "tp": 3, "cp": 2, "sequence_parallel": true},
                 {"ranks": "6-9", "layers": "2-3", "sequence_parallel": true}, {"ranks": "10", "layers": "4"}]}]})",
                                              "sp.json");
  EXPECT_EQ(s.sequence_parallel_multiple(), 12);  // lcm(3 x 2, 4)
  const PipelineSchedule schedule{2, 1, s.pipelines[0].token_order_degree(), s.sequence_parallel_multiple()};
  EXPECT_EQ(schedule.row_multiple(), 12);  // lcm(2 x 2, 12)
  EXPECT_EQ(schedule.row_tokens(63), 72);
  EXPECT_EQ(schedule.row_tokens(72), 72);
  EXPECT_EQ((PipelineSchedule{1, 1, 3, 2}).row_tokens(7), 12);  // lcm(6, 2)
  EXPECT_EQ((PipelineSchedule{1, 1, 1, 1}).row_tokens(7), 7);
}

TEST(Strategy, BadContextParallelDegreesAreRefused) {
  auto parse = [](const std::string& stage) {
    return Strategy::from_json_text(R"({"pipelines": [{"micro_batch_size": 1, "num_micro_batches": 1, "stages": [)" +
                                        stage + "]}]}",
                                    "cp.json");
  };
  EXPECT_NE(error_of([&] { parse(R"({"ranks": "0-3", "layers": "0-3", "cp": 3})"); })
                .find("cp.json: pipelines[0].stages[0].cp: 3 does not divide the stage's 4 ranks [0-3]; a stage has "
                      "tp x cp ranks"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse(R"({"ranks": "0-5", "layers": "0-3", "tp": 2, "cp": 2})"); })
                .find("cp.json: pipelines[0].stages[0]: tp 2 x cp 2 = 4 ranks, but the stage lists 6 [0-5]"),
            std::string::npos);
  const std::string zero = error_of([&] { parse(R"({"ranks": "0-3", "layers": "0-3", "tp": 2, "cp": 0})"); });
  EXPECT_NE(zero.find("cp.json: pipelines[0].stages[0]"), std::string::npos) << zero;
  EXPECT_NE(zero.find("cp"), std::string::npos) << zero;
  // Stages of one pipeline may differ in CP (the boundary between them is a Reshard of the tokens).
  Strategy mixed = parse(R"({"ranks": "0-1", "layers": "0-1", "cp": 2}, {"ranks": "2-3", "layers": "2-3"})");
  EXPECT_NO_THROW(mixed.validate(4));
  EXPECT_EQ(mixed.pipelines[0].stages[1].cp, 1);
}

// The ZeRO stage: "zero": 0|1|2|3, the older "zero1" read as 1 or 0, both must agree.
TEST(Strategy, ZeroStageKeyAndTheOlderZero1Key) {
  auto with = [](const std::string& keys) {
    return Strategy::from_json_text("{" + keys + R"(, "pipelines": [{"micro_batch_size": 1, "num_micro_batches": 1,
      "stages": [{"ranks": "0", "layers": "0-3"}]}]})", "z.json");
  };
  EXPECT_EQ(with(R"("name": "a")").zero, 0);
  EXPECT_EQ(with(R"("zero": 2)").zero, 2);
  EXPECT_TRUE(with(R"("zero": 2)").shards_gradients());
  EXPECT_EQ(with(R"("zero1": true)").zero, 1);
  EXPECT_FALSE(with(R"("zero1": true)").shards_gradients());
  EXPECT_EQ(with(R"("zero1": false)").zero, 0);
  EXPECT_EQ(with(R"("zero1": true, "zero": 1)").zero, 1);
  const Strategy two = with(R"("zero": 2)");
  EXPECT_EQ(Strategy::from_json_text(two.to_json_text(), "again"), two);
  const std::string disagree = error_of([&] { with(R"("zero1": true, "zero": 2)"); });
  EXPECT_NE(disagree.find("z.json: \"zero1\": true and \"zero\": 2 disagree"), std::string::npos) << disagree;
  const Strategy three = with(R"("zero": 3)");
  EXPECT_TRUE(three.shards_parameters() && three.shards_gradients() && three.shards_optimizer_states());
  EXPECT_FALSE(two.shards_parameters());
  EXPECT_EQ(Strategy::from_json_text(three.to_json_text(), "again"), three);
  const std::string bad = error_of([&] { with(R"("zero": "two")"); });
  EXPECT_NE(bad.find("z.json: \"zero\" must be 0, 1, 2 or 3"), std::string::npos) << bad;
  const std::string four = error_of([&] { with(R"("zero": 4)"); });
  EXPECT_NE(four.find("z.json: \"zero\" must be 0, 1, 2 or 3 (the ZeRO stage), got 4"), std::string::npos) << four;
}

// Strict reading: a key hspmd does not read is refused where it is, with the nearest known key,
// instead of training another strategy than the one written.
TEST(Strategy, UnknownKeysAreRefusedWithTheNearestKnownKey) {
  const std::string top = error_of([] {
    Strategy::from_json_text(R"({"zer01": true, "pipelines": [{"micro_batch_size": 1, "num_micro_batches": 1,
      "stages": [{"ranks": "0", "layers": "0-3"}]}]})", "s.json");
  });
  EXPECT_NE(top.find("s.json: unknown key \"zer01\" (did you mean \"zero1\"?)"), std::string::npos) << top;
  const std::string stage = error_of([] {
    Strategy::from_json_text(R"({"pipelines": [{"micro_batch_size": 1, "num_micro_batches": 1,
      "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1-2", "layers": "2-3", "tpp": 2}]}]})", "s.json");
  });
  EXPECT_NE(stage.find("s.json: pipelines[0].stages[1]: unknown key \"tpp\" (did you mean \"tp\"?); the keys here "
                       "are ranks, layers, tp, cp, sequence_parallel, comment"),
            std::string::npos)
      << stage;
  const std::string pipe = error_of([] {
    Strategy::from_json_text(R"({"pipelines": [{"micro_batch_size": 1, "num_micro_batches": 1, "schedule": "1f1b",
      "stages": [{"ranks": "0", "layers": "0-3"}]}]})", "s.json");
  });
  // Nothing close to "schedule": the key and its place are named, no guess.
  EXPECT_NE(pipe.find("s.json: pipelines[0]: unknown key \"schedule\"; the keys here are micro_batch_size"),
            std::string::npos)
      << pipe;
  EXPECT_NE(error_of([] { Strategy::from_json_text(R"({"pipelines": [3]})", "s.json"); })
                .find("s.json: pipelines[0]: expected a JSON object, got 3"),
            std::string::npos);
  // "comment" is allowed at every level.
  EXPECT_NO_THROW(Strategy::from_json_text(R"({"comment": "c", "pipelines": [{"micro_batch_size": 1,
      "num_micro_batches": 1, "comment": "p", "stages": [{"ranks": "0", "layers": "0-3", "comment": "s"}]}]})",
                                           "s.json"));
}

// Every strategy file shipped in examples/ still reads under the strict rules.
TEST(Strategy, EveryExampleStrategyFileParses) {
  // This file is tests/sharding/plan_strategy_test.cc; CMake compiles it by absolute path.
  const std::filesystem::path dir =
      std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "examples" / "strategies";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    EXPECT_NO_THROW(Strategy::from_file(entry.path().string())) << entry.path();
    ++files;
  }
  EXPECT_GE(files, 24) << dir;
}

}  // namespace
}  // namespace hspmd::sharding
