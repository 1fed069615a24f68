// Training on the GPU equals training on the CPU: llama-tiny for 5 steps through the same trainer
// (runtime/trainer.h) with --device cuda and cpu, losses within 1e-4 relative in float32, within
// bf16's rounding under bf16 mixed precision; the GPU run's checkpoint (written from host copies)
// restores into a CPU trainer with the GPU run's weights and moments; and two ranks sharing the
// GPU under tensor parallelism (Gloo with host staging, a vocabulary-parallel loss) and under
// context parallelism (the CUDA context_attention on each rank's share of the queries) equal one
// process.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "gpu/decoder_configs_testlib.h"
#include "gpu/gpu_testlib.h"
#include "hspmd/comm/thread_ranks.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/runtime/trainer.h"

namespace hspmd::runtime {
namespace {

namespace fs = std::filesystem;

const Device kGpu{DeviceType::kCUDA, 0};

void expect_losses_match(const std::vector<double>& gpu, const std::vector<double>& cpu, double rtol) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_NEAR(gpu[i], cpu[i], rtol * std::abs(cpu[i])) << "step " << i + 1;
  }
}

// A byte-level dataset of 60 documents of 30..200 tokens with some structure to learn.
class GpuTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hspmd-gpu-train-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    data::TokenDatasetWriter w((dir_ / "data").string(), {.vocab_size = 260, .tokenizer_id = "byte"});
    for (int d = 0; d < 60; ++d) {
      std::vector<int32_t> doc;
      const int length = 30 + (d * 53) % 171;
      for (int i = 0; i < length; ++i) doc.push_back(static_cast<int32_t>(97 + (i * (d % 7 + 1) + d) % 26));
      w.add_document(doc);
    }
    w.finish();
  }
  void TearDown() override { fs::remove_all(dir_); }

  TrainerOptions options(Device device, DType precision) const {
    TrainerOptions o;
    o.steps = 5;
    o.seq_len = 64;
    o.global_batch_tokens = 512;
    o.warmup = 2;
    o.seed = 3;
    o.precision = precision;
    o.device = device;
    return o;
  }

  std::vector<double> losses(Trainer& t) const {
    std::vector<double> out;
    while (!t.done()) out.push_back(t.step().loss);
    return out;
  }

  // Two ranks sharing the GPU under `strategy` (one stage of layers 0-1, ranks 0-1): their losses
  // against one process on the CPU.
  void expect_two_gpu_ranks_equal_one_process(const std::string& strategy, const std::string& name) const {
    const data::TokenDataset ds = data::TokenDataset::open((dir_ / "data").string());
    const auto model = testing::decoder_model(testing::decoder_configs()[0]);
    Trainer one(model, ds, options(Device::cpu(), DType::kFloat32));
    const std::vector<double> expected = losses(one);
    const sharding::AnnotationPlan plan = model->compile_plan(sharding::Strategy::from_json_text(strategy, name));
    std::vector<std::vector<double>> got(2);
    comm::run_thread_ranks(
        2,
        [&](int rank, comm::GroupCache& groups) {
          DistOptions o;
          o.train = options(kGpu, DType::kFloat32);
          o.plan_name = name;
          DistTrainer t(model, ds, plan, o, rank, 2, groups);
          while (!t.done()) got[rank].push_back(t.step().loss);
        },
        comm::Millis(60'000));
    expect_losses_match(got[0], expected, 1e-4);
    expect_losses_match(got[1], expected, 1e-4);
  }

  fs::path dir_;
};

TEST_F(GpuTrainTest, Float32LossesEqualTheCpusWithin1e4) {
  const data::TokenDataset ds = data::TokenDataset::open((dir_ / "data").string());
  const auto model = testing::decoder_model(testing::decoder_configs()[0]);
  Trainer cpu(model, ds, options(Device::cpu(), DType::kFloat32));
  Trainer gpu(model, ds, options(kGpu, DType::kFloat32));
  const std::vector<double> expected = losses(cpu);
  expect_losses_match(losses(gpu), expected, 1e-4);
  EXPECT_LT(expected.back(), expected.front());  // it learns
}

TEST_F(GpuTrainTest, Bf16LossesEqualTheCpusWithinBf16Rounding) {
  const data::TokenDataset ds = data::TokenDataset::open((dir_ / "data").string());
  const auto model = testing::decoder_model(testing::decoder_configs()[0]);
  Trainer cpu(model, ds, options(Device::cpu(), DType::kBFloat16));
  Trainer gpu(model, ds, options(kGpu, DType::kBFloat16));
  // Both round the same operands to bfloat16 (2^-8 relative); the sums differ in order.
  expect_losses_match(losses(gpu), losses(cpu), 1e-2);
}

TEST_F(GpuTrainTest, ACheckpointOfTheGpuRunRestoresOnTheCpu) {
  const data::TokenDataset ds = data::TokenDataset::open((dir_ / "data").string());
  const auto model = testing::decoder_model(testing::decoder_configs()[0]);
  TrainerOptions o = options(kGpu, DType::kFloat32);
  o.steps = 2;
  Trainer gpu(model, ds, o);
  losses(gpu);
  const std::string ckpt = (dir_ / "ckpt").string();
  gpu.save(ckpt);
  TrainerOptions on_cpu = o;
  on_cpu.device = Device::cpu();
  Trainer cpu(model, ds, on_cpu);
  cpu.restore(ckpt);
  EXPECT_EQ(cpu.step_count(), 2);
  const graph::TensorMap a = gpu.parameters(), b = cpu.parameters();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(t.on_host()) << name;  // parameters() are host copies on a GPU run
    EXPECT_TRUE(testing::all_close(b.at(name), t, 0, 0)) << name;
  }
  const Checkpoint c = gpu.checkpoint();
  EXPECT_EQ(c.exp_avg.size(), a.size());
}

// Tensor parallelism: a vocabulary-parallel loss, each shard's row statistics on the GPU.
TEST_F(GpuTrainTest, TwoTensorParallelRanksSharingTheGpuEqualOneProcess) {
  expect_two_gpu_ranks_equal_one_process(R"({"name": "tp2", "pipelines": [
      {"micro_batch_size": 8, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-1"}]}]})",
                                         "tp2");
}

// Context parallelism: each rank's share of the queries (zigzag) against the gathered keys.
TEST_F(GpuTrainTest, TwoContextParallelRanksSharingTheGpuEqualOneProcess) {
  expect_two_gpu_ranks_equal_one_process(R"({"name": "cp2", "pipelines": [
      {"micro_batch_size": 8, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-1", "cp": 2}]}]})",
                                         "cp2");
}

}  // namespace
}  // namespace hspmd::runtime
