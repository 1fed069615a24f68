// Allreduce and batched send/receive bandwidth through hspmd's comm layer vs direct Gloo calls
// on the same Gloo context, side by side in one run. Two ranks are two benchmark threads in one
// process (thread_index() = rank), connected over loopback TCP. Prints Google Benchmark's table,
// then a ratio table: hspmd time / Gloo time per size (goal: within 5%, i.e. <= 1.05).
#include <benchmark/benchmark.h>

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/transport/unbound_buffer.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

#include "hspmd/comm/file_store.h"
#include "hspmd/comm/gloo_communicator.h"
#include "hspmd/comm/group_cache.h"

namespace hspmd::comm {
namespace {

constexpr int kRanks = 2;
std::vector<std::shared_ptr<GlooCommunicator>> g_comms(kRanks);
std::vector<std::unique_ptr<GroupCache>> g_groups(kRanks);

void connect_ranks() {
  std::string dir = "/tmp/hspmd-comm-bench-" + std::to_string(::getpid());
  auto store = std::make_shared<FileStore>(dir);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      g_groups[r] = std::make_unique<GroupCache>(store, r, gloo_backend({}));
      g_comms[r] = std::dynamic_pointer_cast<GlooCommunicator>(g_groups[r]->get({0, 1}));
    });
  }
  for (auto& t : threads) t.join();
  std::filesystem::remove_all(dir);
}

void BM_allreduce_hspmd(benchmark::State& state) {
  auto& comm = *g_comms[state.thread_index()];
  std::vector<float> x(state.range(0) / sizeof(float), 1.0f);
  for (auto _ : state) comm.allreduce({.data = CommBuffer::of(x)}).wait();
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_allreduce_gloo(benchmark::State& state) {
  const auto& context = g_comms[state.thread_index()]->gloo_context();
  std::vector<float> x(state.range(0) / sizeof(float), 1.0f);
  uint32_t tag = 1u << 23;  // away from the communicator's own tags
  for (auto _ : state) {
    gloo::AllreduceOptions opts(context);
    opts.setOutput(x.data(), x.size());
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(tag++);
    gloo::allreduce(opts);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

// Each rank sends 4 messages of range(0)/4 bytes to its peer and receives 4 from it.
constexpr int kMessages = 4;

void BM_sendrecv_hspmd(benchmark::State& state) {
  int rank = state.thread_index(), peer = 1 - rank;
  auto& comm = *g_comms[rank];
  size_t n = state.range(0) / sizeof(float) / kMessages;
  std::vector<std::vector<float>> out(kMessages, std::vector<float>(n, 1.0f)), in(kMessages, std::vector<float>(n));
  SendRecvOptions options;
  for (int m = 0; m < kMessages; ++m) {
    options.sends.push_back({peer, CommBuffer::of(out[m])});
    options.recvs.push_back({peer, CommBuffer::of(in[m])});
  }
  for (auto _ : state) comm.send_recv(options).wait();
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_sendrecv_gloo(benchmark::State& state) {
  int rank = state.thread_index(), peer = 1 - rank;
  const auto& context = g_comms[rank]->gloo_context();
  size_t n = state.range(0) / sizeof(float) / kMessages;
  std::vector<std::vector<float>> out(kMessages, std::vector<float>(n, 1.0f)), in(kMessages, std::vector<float>(n));
  uint64_t slot = uint64_t{0x41} << 56;
  for (auto _ : state) {
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> recvs, sends;
    for (int m = 0; m < kMessages; ++m) {
      recvs.push_back(context->createUnboundBuffer(in[m].data(), n * sizeof(float)));
      recvs.back()->recv(peer, slot + m);
    }
    for (int m = 0; m < kMessages; ++m) {
      sends.push_back(context->createUnboundBuffer(out[m].data(), n * sizeof(float)));
      sends.back()->send(peer, slot + m);
    }
    for (auto& b : recvs) b->waitRecv();
    for (auto& b : sends) b->waitSend();
    slot += kMessages;
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

#define HSPMD_COMM_BENCH(fn) \
  BENCHMARK(fn)->Threads(kRanks)->UseRealTime()->RangeMultiplier(16)->Range(4 << 10, 16 << 20)->MinTime(0.3)

HSPMD_COMM_BENCH(BM_allreduce_gloo);
HSPMD_COMM_BENCH(BM_allreduce_hspmd);
HSPMD_COMM_BENCH(BM_sendrecv_gloo);
HSPMD_COMM_BENCH(BM_sendrecv_hspmd);

// Keeps each run's time per iteration so the ratio table can pair hspmd with Gloo.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& run : runs) {
      if (run.run_type == Run::RT_Iteration) times_[run.benchmark_name()] = run.GetAdjustedRealTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }

  void print_ratios() const {
    std::printf("\n%-10s %12s %14s %14s %10s\n", "op", "bytes", "gloo us", "hspmd us", "ratio");
    for (const auto& [name, gloo_time] : times_) {
      auto pos = name.find("_gloo");
      if (pos == std::string::npos) continue;
      std::string hspmd_name = name.substr(0, pos) + "_hspmd" + name.substr(pos + 5);
      auto it = times_.find(hspmd_name);
      if (it == times_.end()) continue;
      std::string op = name.substr(3, pos - 3);
      std::string bytes = name.substr(pos + 6, name.find('/', pos + 6) - pos - 6);
      std::printf("%-10s %12s %14.1f %14.1f %10.3f\n", op.c_str(), bytes.c_str(), gloo_time / 1e3,
                  it->second / 1e3, it->second / gloo_time);
    }
  }

 private:
  std::map<std::string, double> times_;
};

}  // namespace
}  // namespace hspmd::comm

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  hspmd::comm::connect_ranks();
  hspmd::comm::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios();
  hspmd::comm::g_comms.clear();
  hspmd::comm::g_groups.clear();
  benchmark::Shutdown();
  return 0;
}
