// `hspmd train` and `hspmd eval` through the built binary: a short run with checkpoint, resume,
// metrics and eval; and the error paths (one clear line, non-zero exit).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using testing::corpus_dataset;

using testing::CommandResult;

CommandResult run(const std::string& args) { return testing::run_hspmd(args); }

int count_lines(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

// The "loss" field of every metrics line, as printed (full double precision).
std::vector<std::string> losses(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    size_t at = line.find("\"loss\":");
    if (at != std::string::npos) out.push_back(line.substr(at, line.find(',', at) - at));
  }
  return out;
}

class CliTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    ASSERT_TRUE(std::ifstream(testing::hspmd_binary()).good()) << testing::hspmd_binary() << " not built (set HSPMD_BINARY_DIR)";
    data_ = corpus_dataset();
    config_ = path("config.json");
    std::ofstream(config_) << testing::tiny_config().to_json_text();
  }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(path(name)) << text;
    return path(name);
  }
  std::string small_run() const {
    return "--model " + config_ + " --data " + data_ + " --seq-len 64 --global-batch-tokens 256 --threads 1 ";
  }
  std::string data_, config_;
};

TEST_F(CliTest, TrainSavesResumesAndEvaluates) {
  CommandResult r = run("train " + small_run() + "--steps 3 --decay-steps 5 --save " + path("ckpt") + " --metrics " +
                 path("m.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("step     3/3  loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tok/s"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(path("m.jsonl")), 3);

  r = run("train " + small_run() + "--steps 5 --resume " + path("ckpt") + " --save " + path("ckpt") +
          " --metrics " + path("m.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step     5/5"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step     3/5"), std::string::npos) << r.output;  // steps 1..3 are not redone
  EXPECT_EQ(count_lines(path("m.jsonl")), 5);
  // The uninterrupted 5-step run logs the same losses, digit for digit.
  r = run("train " + small_run() + "--steps 5 --metrics " + path("full.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(losses(path("m.jsonl")), losses(path("full.jsonl")));
  EXPECT_EQ(losses(path("full.jsonl")).size(), 5u);

  r = run("eval --model " + config_ + " --weights " + path("ckpt") + " --data " + data_ +
          " --max-tokens 2000 --seq-len 64 --threads 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("perplexity"), std::string::npos) << r.output;
}

TEST_F(CliTest, InitWeightsStartFromTheGivenModel) {
  // --dump-init-weights (hidden, for benchmarks) writes a run's initial weights. Loading them with
  // --init-weights reproduces that run's losses exactly; another seed's weights give other losses
  // on the same batches.
  CommandResult r = run("train " + small_run() + "--steps 2 --seed 1 --dump-init-weights " + path("w1.safetensors") +
                 " --metrics " + path("plain.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = run("train " + small_run() + "--steps 1 --seed 2 --dump-init-weights " + path("w2.safetensors"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = run("train " + small_run() + "--steps 2 --seed 1 --init-weights " + path("w1.safetensors") + " --metrics " +
          path("same.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("loaded weights from"), std::string::npos) << r.output;
  EXPECT_EQ(losses(path("same.jsonl")), losses(path("plain.jsonl")));
  r = run("train " + small_run() + "--steps 2 --seed 1 --init-weights " + path("w2.safetensors") + " --metrics " +
          path("other.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(losses(path("other.jsonl")), losses(path("plain.jsonl")));

  models::LlamaConfig one = testing::tiny_config();
  one.num_hidden_layers = 1;
  std::string one_layer = write("one.json", one.to_json_text());
  CommandResult bad = run("train --model " + one_layer + " --data " + data_ + " --seq-len 64 --steps 1 --init-weights " +
                   path("w1.safetensors"));
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(bad.output.find("unexpected tensor 'model.layers.1."), std::string::npos) << bad.output;
}

TEST_F(CliTest, TrainsInBf16AndResumesInBf16) {
  CommandResult r = run("train " + small_run() + "--steps 3 --decay-steps 4 --precision bf16 --save " + path("ckpt") +
                        " --metrics " + path("m.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("precision bf16"), std::string::npos) << r.output;
  // The checkpoint records the precision: the resumed run stays in bf16 without the flag.
  r = run("train " + small_run() + "--steps 4 --resume " + path("ckpt") + " --metrics " + path("m.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("precision bf16"), std::string::npos) << r.output;
  r = run("train " + small_run() + "--steps 4 --precision bf16 --metrics " + path("bf16.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(losses(path("m.jsonl")), losses(path("bf16.jsonl")));
  r = run("train " + small_run() + "--steps 4 --metrics " + path("fp32.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("precision fp32"), std::string::npos) << r.output;
  EXPECT_NE(losses(path("fp32.jsonl")), losses(path("bf16.jsonl")));
  r = run("train " + small_run() + "--steps 1 --precision fp16");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--precision"), std::string::npos) << r.output;
}

TEST_F(CliTest, HelpListsTheOptions) {
  CommandResult r = run("train --help");
  EXPECT_EQ(r.code, 0);
  for (const char* flag : {"--model", "--data", "--steps", "--seq-len", "--global-batch-tokens", "--lr", "--warmup",
                           "--save", "--save-every", "--resume", "--init-weights", "--metrics", "--threads", "--seed",
                           "--precision"}) {
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag;
  }
  r = run("eval --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("--weights"), std::string::npos);
  EXPECT_NE(r.output.find("--max-tokens"), std::string::npos);
}

// Each bad input gives exit code 1 and exactly one line naming what is wrong.
void expect_one_line_error(const CommandResult& r, const std::string& needle) {
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("hspmd: error: ", 0), 0u) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "more than one line: " << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
}

TEST_F(CliTest, BadInputGivesOneClearErrorLine) {
  expect_one_line_error(run("train --model " + path("nope.json") + " --data " + data_), "nope.json");
  expect_one_line_error(run("train --model " + config_ + " --data " + path("nodata")), "nodata");
  std::string bad = write("bad.json", "{\"hidden_size\": 32,");
  expect_one_line_error(run("train --model " + bad + " --data " + data_), "bad.json");
  models::LlamaConfig small = testing::tiny_config();
  small.vocab_size = 100;
  std::string v100 = write("v100.json", small.to_json_text());
  expect_one_line_error(run("train --model " + v100 + " --data " + data_ + " --steps 1"), "vocab_size");
  expect_one_line_error(run("train " + small_run() + "--steps 1 --resume " + path("none")), "none");
  expect_one_line_error(run("eval --model " + v100 + " --weights " + path("w") + " --data " + data_), "vocab_size");
  expect_one_line_error(run("eval --model " + config_ + " --weights " + path("w") + " --data " + data_),
                        path("w"));
}

}  // namespace
}  // namespace hspmd::runtime
