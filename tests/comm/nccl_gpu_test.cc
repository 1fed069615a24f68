// NCCL backend (label gpu): every operation on device buffers, one rank per visible GPU (up to
// 4) as threads. Skipped when fewer than 2 GPUs are visible or hspmd was built without HSPMD_CUDA.
#include <gtest/gtest.h>

#if defined(HSPMD_CUDA)

#include <cuda_runtime.h>

#include "comm/comm_testlib.h"
#include "hspmd/comm/nccl/nccl_communicator.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {
namespace {

using testing::input;
using testing::sum_value;
using testing::value;

// A device copy of a host tensor; freed on destruction.
class DeviceTensor {
 public:
  explicit DeviceTensor(const Tensor& host) : dtype_(host.dtype()), count_(host.numel()) {
    HSPMD_CHECK(cudaMalloc(&data_, std::max<size_t>(host.nbytes(), 1)) == cudaSuccess) << "cudaMalloc";
    if (host.nbytes() > 0) cudaMemcpy(data_, host.raw_data(), host.nbytes(), cudaMemcpyHostToDevice);
  }
  ~DeviceTensor() { cudaFree(data_); }
  CommBuffer buffer() const { return {data_, count_, dtype_}; }
  Tensor to_host() const {
    Tensor t = Tensor::empty({count_}, dtype_);
    if (t.nbytes() > 0) cudaMemcpy(t.raw_data(), data_, t.nbytes(), cudaMemcpyDeviceToHost);
    return t;
  }

 private:
  void* data_ = nullptr;
  DType dtype_;
  int64_t count_;
};

TEST(NcclCommunicator, EveryOperationOnVisibleGpus) {
  int gpus = NcclCommunicator::device_count();
  if (gpus == 0) GTEST_SKIP() << "no GPU visible";
  // A group of one is served by SelfCommunicator (host memcpy), not NCCL: the one-rank NCCL
  // communicator is tests/gpu/nccl_test.cc's.
  if (gpus < 2) GTEST_SKIP() << "one GPU visible: NCCL groups need 2 ranks, one per GPU";
  int world = std::min(gpus, 4);
  std::printf("NCCL test on %d GPU rank(s)\n", world);
  testing::run_ranks(
      world,
      [&](int rank, GroupCache& groups) {
        HSPMD_CHECK(cudaSetDevice(rank) == cudaSuccess) << "cudaSetDevice";
        auto comm = groups.get(testing::iota(world));
        std::vector<int> members = testing::iota(world);
        for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt64}) {
          DeviceTensor x(input(rank, 1001, dtype));
          comm->allreduce({.data = x.buffer()}).wait();
          Tensor h = x.to_host();
          for (int64_t i = 0; i < h.numel(); ++i) ASSERT_EQ(h.element_as_double(i), sum_value(members, i));

          std::vector<int64_t> counts(world);
          int64_t total = 0, offset = 0;
          for (int i = 0; i < world; ++i) total += counts[i] = 2 * i + 1;
          for (int i = 0; i < rank; ++i) offset += counts[i];
          DeviceTensor in(input(rank, total, dtype)), out(Tensor::zeros({counts[rank]}, dtype));
          comm->reduce_scatter({.input = in.buffer(), .output = out.buffer(), .counts = counts}).wait();
          h = out.to_host();
          for (int64_t i = 0; i < h.numel(); ++i) ASSERT_EQ(h.element_as_double(i), sum_value(members, offset + i));

          DeviceTensor mine(input(rank, counts[rank], dtype)), all(Tensor::zeros({total}, dtype));
          comm->allgather({.input = mine.buffer(), .output = all.buffer(), .counts = counts}).wait();
          h = all.to_host();
          int64_t pos = 0;
          for (int r = 0; r < world; ++r) {
            for (int64_t i = 0; i < counts[r]; ++i, ++pos) ASSERT_EQ(h.element_as_double(pos), value(r, i));
          }

          int root = world - 1;
          DeviceTensor b(rank == root ? input(root, 77, dtype) : Tensor::zeros({77}, dtype));
          comm->broadcast({.data = b.buffer(), .root = root}).wait();
          h = b.to_host();
          for (int64_t i = 0; i < h.numel(); ++i) ASSERT_EQ(h.element_as_double(i), value(root, i));
        }
        // Ring exchange plus a message to self.
        int next = (rank + 1) % world, prev = (rank + world - 1) % world;
        DeviceTensor a(input(rank, 333, DType::kFloat32)), self(input(rank, 5, DType::kFloat32));
        DeviceTensor from_prev(Tensor::zeros({333}, DType::kFloat32)), to_self(Tensor::zeros({5}, DType::kFloat32));
        SendRecvOptions p2p;
        p2p.sends = {{next, a.buffer()}, {rank, self.buffer()}};
        p2p.recvs = {{prev, from_prev.buffer()}, {rank, to_self.buffer()}};
        comm->send_recv(p2p).wait();
        Tensor h = from_prev.to_host();
        for (int64_t i = 0; i < h.numel(); ++i) ASSERT_EQ(h.element_as_double(i), value(prev, i));
        h = to_self.to_host();
        for (int64_t i = 0; i < h.numel(); ++i) ASSERT_EQ(h.element_as_double(i), value(rank, i));
        comm->barrier().wait(std::chrono::seconds(60));
      },
      Millis(60'000), [](int rank) { return nccl_backend({.device = rank}); });
}

}  // namespace
}  // namespace hspmd::comm

#else

TEST(NcclCommunicator, EveryOperationOnVisibleGpus) { GTEST_SKIP() << "hspmd was built without HSPMD_CUDA"; }

#endif
