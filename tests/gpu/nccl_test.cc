// NCCL in training (runtime/comm_choice.h, comm/nccl/nccl_communicator.h) on real GPUs.
//
// One GPU: a communicator of one rank runs every operation on device buffers written just before
// by the compute stream (so the event ordering is exercised), messages to itself, and host buffers
// through device copies (the trainer's loss totals).
//
// Two GPUs or more: two ranks, one per GPU (NCCL refuses two members of one communicator on one
// GPU), train llama-tiny under tensor parallelism (all-reduces, all-gathers, reduce-scatters) and
// as a two-stage pipeline (grouped sends and receives), every Reshard on device buffers, and equal
// one process on the CPU within 1e-4. With fewer GPUs that test is skipped, saying why.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpu/decoder_configs_testlib.h"
#include "gpu/gpu_testlib.h"
#include "hspmd/comm/file_store.h"
#include "hspmd/comm/nccl/nccl_communicator.h"
#include "hspmd/core/cuda/cuda_error.h"
#include "hspmd/core/cuda/cuda_tensor_memory.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/graph/cuda/cuda_compute.h"
#include "hspmd/runtime/comm_choice.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/runtime/rank_compute.h"
#include "hspmd/runtime/trainer.h"

namespace hspmd::runtime {
namespace {

namespace fs = std::filesystem;

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hspmd-gpu-nccl-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "store");
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

std::vector<float> host_values(const Tensor& t) {
  const Tensor h = t.to_host();
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}

TEST_F(NcclTest, OneRankRunsEveryOperationOnDeviceAndHostBuffers) {
  graph::ComputeDevice gpu = graph::cuda_compute({.device = 0, .name = "rank 0"});
  cuda::CudaTensorMemory& memory = cuda::cuda_tensor_memory(gpu.allocator);
  comm::FileStore store((dir_ / "store").string());
  comm::NcclCommunicator comm(store, {0}, 0, 0,
                              {.device = 0, .timeout = comm::Millis(60'000), .compute_stream = memory.stream()});
  const Tensor host = hspmd::testing::random_tensor(Shape{1237}, DType::kFloat32, 5);
  std::vector<float> twice(host.data<float>(), host.data<float>() + host.numel());
  for (float& v : twice) v *= 2;

  // Written by the compute stream right before each call: the operation must wait for it.
  auto doubled = [&] {
    Tensor x = host.clone(&gpu.allocator);
    gpu.add(x, x, x);
    return x;
  };
  Tensor x = doubled();
  comm.allreduce({.data = comm::CommBuffer::of(x)}).wait();
  EXPECT_EQ(host_values(x), twice);

  Tensor in = doubled(), out = Tensor::zeros(Shape{1237}, DType::kFloat32, &gpu.allocator);
  comm.reduce_scatter({.input = comm::CommBuffer::of(in), .output = comm::CommBuffer::of(out)}).wait();
  EXPECT_EQ(host_values(out), twice);
  in = doubled();
  out = Tensor::zeros(Shape{1237}, DType::kFloat32, &gpu.allocator);
  comm.allgather({.input = comm::CommBuffer::of(in), .output = comm::CommBuffer::of(out)}).wait();
  EXPECT_EQ(host_values(out), twice);
  x = doubled();
  comm.broadcast({.data = comm::CommBuffer::of(x), .root = 0}).wait();
  EXPECT_EQ(host_values(x), twice);

  // Messages to itself: device copies in the order given.
  Tensor a = doubled(), b = host.clone(&gpu.allocator);
  Tensor to_a = Tensor::zeros(Shape{1237}, DType::kFloat32, &gpu.allocator);
  Tensor to_b = Tensor::zeros(Shape{1237}, DType::kFloat32, &gpu.allocator);
  comm.send_recv({.sends = {{0, comm::CommBuffer::of(a)}, {0, comm::CommBuffer::of(b)}},
                  .recvs = {{0, comm::CommBuffer::of(to_a)}, {0, comm::CommBuffer::of(to_b)}}})
      .wait();
  EXPECT_EQ(host_values(to_a), twice);
  EXPECT_EQ(host_values(to_b), host_values(host));

  // Host buffers go through device copies, both ways.
  std::vector<double> totals = {1.5, -2.25, 1e300};
  comm.allreduce({.data = comm::CommBuffer::of(totals)}).wait();
  EXPECT_EQ(totals, (std::vector<double>{1.5, -2.25, 1e300}));
  std::vector<float> mine = {3, 4, 5}, all(3, 0);
  comm.allgather({.input = comm::CommBuffer::of(mine), .output = comm::CommBuffer::of(all)}).wait();
  EXPECT_EQ(all, mine);
  comm.barrier().wait();
}

TEST_F(NcclTest, TwoRanksOnTwoGpusTrainAsOneProcessOnTheCpu) {
  const int gpus = cuda::device_count();
  if (gpus < 2) {
    GTEST_SKIP() << "NCCL puts one rank per GPU (it refuses two members of a communicator on one GPU): 2 ranks, "
                 << gpus << " GPU visible";
  }
  data::TokenDatasetWriter w((dir_ / "data").string(), {.vocab_size = 260, .tokenizer_id = "byte"});
  for (int d = 0; d < 60; ++d) {
    std::vector<int32_t> doc;
    const int length = 30 + (d * 53) % 171;
    for (int i = 0; i < length; ++i) doc.push_back(static_cast<int32_t>(97 + (i * (d % 7 + 1) + d) % 26));
    w.add_document(doc);
  }
  w.finish();
  const data::TokenDataset ds = data::TokenDataset::open((dir_ / "data").string());
  const auto model = testing::decoder_model(testing::decoder_configs()[0]);
  TrainerOptions o;
  o.steps = 4;
  o.seq_len = 64;
  o.global_batch_tokens = 512;
  o.warmup = 2;
  o.seed = 3;
  Trainer one(model, ds, o);
  std::vector<double> expected;
  while (!one.done()) expected.push_back(one.step().loss);

  for (const char* text : {R"({"name": "tp2", "pipelines": [
        {"micro_batch_size": 8, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-1"}]}]})",
                           R"({"name": "pp2", "pipelines": [
        {"micro_batch_size": 4, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0"},
                                                                    {"ranks": "1", "layers": "1"}]}]})"}) {
    const sharding::Strategy st = sharding::Strategy::from_json_text(text, "strategy");
    SCOPED_TRACE(st.name);
    const sharding::AnnotationPlan plan = model->compile_plan(st);
    const fs::path store_dir = dir_ / ("store-" + st.name);
    fs::create_directories(store_dir);
    auto store = std::make_shared<comm::FileStore>(store_dir.string());
    std::vector<std::vector<double>> got(2);
    std::vector<std::string> errors(2);
    std::vector<std::thread> ranks;
    for (int rank = 0; rank < 2; ++rank) {
      ranks.emplace_back([&, rank] {
        try {
          DistOptions d;
          d.train = o;
          d.train.device = rank_device(Device{DeviceType::kCUDA, 0}, CommKind::kNccl, rank);
          d.plan_name = st.name;
          const graph::ComputeDevice compute = rank_compute(d.train, d.device, rank);
          d.compute = [compute](int) { return compute; };
          d.comm_on_device = true;
          comm::GroupCache groups(store, rank,
                                  comm_backend(CommKind::kNccl, compute, comm::Millis(120'000), "127.0.0.1"));
          DistTrainer t(model, ds, plan, d, rank, 2, groups);
          while (!t.done()) got[rank].push_back(t.step().loss);
        } catch (const std::exception& e) {
          errors[rank] = e.what();
        }
      });
    }
    for (auto& t : ranks) t.join();
    for (int rank = 0; rank < 2; ++rank) {
      ASSERT_EQ(errors[rank], "") << "rank " << rank;
      ASSERT_EQ(got[rank].size(), expected.size()) << "rank " << rank;
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_NEAR(got[rank][i], expected[i], 1e-4 * std::abs(expected[i])) << "rank " << rank << ", step " << i + 1;
      }
    }
  }
}

}  // namespace
}  // namespace hspmd::runtime
