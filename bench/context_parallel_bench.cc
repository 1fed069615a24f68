// Context-parallel attention (docs/context-parallelism.md) against one rank on a long sequence:
// one document of S tokens, 8 query heads, 2 KV heads, head dim 64, float32, forward + backward.
//   one rank   attention_fwd + attention_bwd on all S tokens;
//   CP 2       2 ranks as threads over Gloo (comm/thread_ranks.h), each holding S/2 tokens: all-gather
//              K and V, context_attention_fwd + _bwd on its queries, reduce-scatter dK and dV: what one
//              layer's attention does in a CP 2 stage. Twice: with the zigzag layout the trainer uses,
//              and with contiguous halves (rank 0 the first half), to show the load balance.
// Per variant: the step's wall time (CP: the slowest rank, from the K/V gather to the dK/dV
// reduce-scatter) and each rank's attention compute as thread CPU time (on a shared host the CPU
// time is what the kernel itself costs; the wall time of 2 ranks needs 2 idle cores), best of N
// interleaved rounds, and the bytes each rank sends. One kernel thread per rank.
// Run: build/release/bench_context_parallel_bench [--seq=S] [--rounds=N]   (default 4096, 3)
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "hspmd/comm/thread_ranks.h"
#include "hspmd/kernels/attention.h"
#include "hspmd/kernels/context_attention.h"
#include "hspmd/kernels/threading.h"

namespace hspmd {
namespace {

constexpr int64_t kNq = 8, kNkv = 2, kD = 64;

double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Tensor random_rows(int64_t rows, int64_t heads, uint64_t seed) {
  Tensor t = Tensor::empty({rows, heads, kD}, DType::kFloat32);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& v : std::span<float>(t.data<float>(), static_cast<size_t>(t.numel()))) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  return t;
}

Tensor take_rows(const Tensor& t, const std::vector<int64_t>& index) {
  const int64_t row = t.numel() / t.dim(0);
  Tensor out = Tensor::empty({static_cast<int64_t>(index.size()), t.dim(1), t.dim(2)}, t.dtype());
  for (size_t i = 0; i < index.size(); ++i) {
    std::memcpy(out.data<float>() + i * row, t.data<float>() + index[i] * row, sizeof(float) * row);
  }
  return out;
}

Tensor int64_tensor(const std::vector<int64_t>& v) { return Tensor::from_vector(Shape{static_cast<int64_t>(v.size())}, v); }

struct Timing {
  double wall = 1e30;                        // step, the slowest rank
  std::vector<double> cpu{1e30, 1e30};       // attention compute per rank
  int64_t sent_bytes = 0;                    // per rank
};

// Attention fwd + bwd on all tokens: {wall, thread CPU} seconds.
std::pair<double, double> one_rank(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& cu) {
  const int64_t s = q.dim(0);
  Tensor out = Tensor::empty(q.shape(), DType::kFloat32), lse = Tensor::empty({kNq, s}, DType::kFloat32);
  Tensor dq = Tensor::empty(q.shape(), DType::kFloat32), dk = Tensor::empty(k.shape(), DType::kFloat32);
  Tensor dv = Tensor::empty(v.shape(), DType::kFloat32);
  const double start = thread_cpu_seconds(), wall = wall_seconds();
  kernels::attention_fwd(q, k, v, cu, out, lse);
  kernels::attention_bwd(q, k, v, cu, out, lse, dout, dq, dk, dv);
  return {wall_seconds() - wall, thread_cpu_seconds() - start};
}

// One CP 2 step of attention; `order` lists the fed tokens (rank 0's S/2, then rank 1's).
void cp2(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& cu,
         const std::vector<int64_t>& order, Timing& best) {
  const int64_t s = q.dim(0), share = s / 2;
  std::mutex mu;
  double wall = 0;
  std::vector<double> cpu(2, 0.0);
  int64_t sent = 0;
  comm::run_thread_ranks(2, [&](int rank, comm::GroupCache& groups) {
    kernels::set_num_threads(1);
    const std::vector<int64_t> mine(order.begin() + rank * share, order.begin() + (rank + 1) * share);
    const Tensor q_r = take_rows(q, mine), k_r = take_rows(k, mine), v_r = take_rows(v, mine);
    const Tensor dout_r = take_rows(dout, mine), q_index = int64_tensor(mine), kv_index = int64_tensor(order);
    auto group = groups.get({0, 1}, "cp");
    group->barrier({}).wait();  // connected and started together
    const double start = wall_seconds();
    Tensor k_all = Tensor::empty(k.shape(), DType::kFloat32), v_all = Tensor::empty(v.shape(), DType::kFloat32);
    group->allgather({.input = comm::CommBuffer::of(k_r), .output = comm::CommBuffer::of(k_all)}).wait();
    group->allgather({.input = comm::CommBuffer::of(v_r), .output = comm::CommBuffer::of(v_all)}).wait();
    Tensor out = Tensor::empty(q_r.shape(), DType::kFloat32), lse = Tensor::empty({kNq, share}, DType::kFloat32);
    Tensor dq = Tensor::empty(q_r.shape(), DType::kFloat32), dk = Tensor::empty(k.shape(), DType::kFloat32);
    Tensor dv = Tensor::empty(v.shape(), DType::kFloat32);
    const double cpu_start = thread_cpu_seconds();
    kernels::context_attention_fwd(q_r, k_all, v_all, cu, q_index, kv_index, out, lse);
    kernels::context_attention_bwd(q_r, k_all, v_all, cu, q_index, kv_index, out, lse, dout_r, dq, dk, dv);
    const double compute = thread_cpu_seconds() - cpu_start;
    Tensor dk_r = Tensor::empty(k_r.shape(), DType::kFloat32), dv_r = Tensor::empty(v_r.shape(), DType::kFloat32);
    group->reduce_scatter({.input = comm::CommBuffer::of(dk), .output = comm::CommBuffer::of(dk_r)}).wait();
    group->reduce_scatter({.input = comm::CommBuffer::of(dv), .output = comm::CommBuffer::of(dv_r)}).wait();
    const double elapsed = wall_seconds() - start;
    std::lock_guard<std::mutex> lock(mu);
    wall = std::max(wall, elapsed);
    cpu[rank] = compute;
    // All-gather: its K and V shards to the other rank; reduce-scatter: the other rank's half of dK, dV.
    sent = static_cast<int64_t>(k_r.nbytes() + v_r.nbytes() + dk_r.nbytes() + dv_r.nbytes());
  });
  best.wall = std::min(best.wall, wall);
  for (int r = 0; r < 2; ++r) best.cpu[r] = std::min(best.cpu[r], cpu[r]);
  best.sent_bytes = sent;
}

int64_t flag(int argc, char** argv, const std::string& name, int64_t fallback) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i], prefix = "--" + name + "=";
    if (a.rfind(prefix, 0) == 0) return std::stoll(a.substr(prefix.size()));
  }
  return fallback;
}

}  // namespace
}  // namespace hspmd

int main(int argc, char** argv) {
  using namespace hspmd;
  const int64_t s = flag(argc, argv, "seq", 4096), rounds = flag(argc, argv, "rounds", 3);
  if (s % 4 != 0) {
    std::fprintf(stderr, "--seq must be a multiple of 4 (2 CP ranks x 2 chunks)\n");
    return 2;
  }
  kernels::set_num_threads(1);
  const Tensor q = random_rows(s, kNq, 1), k = random_rows(s, kNkv, 2), v = random_rows(s, kNkv, 3);
  const Tensor dout = random_rows(s, kNq, 4), cu = int64_tensor({0, s});
  std::vector<int64_t> zigzag, contiguous(s);
  std::iota(contiguous.begin(), contiguous.end(), 0);
  const int64_t chunk = s / 4;
  for (int64_t c : {0, 3, 1, 2}) {
    for (int64_t i = 0; i < chunk; ++i) zigzag.push_back(c * chunk + i);
  }
  double single = 1e30, single_wall = 1e30;
  Timing zz, halves;
  for (int64_t r = 0; r < rounds; ++r) {  // interleaved, best of N
    const auto [wall, cpu] = one_rank(q, k, v, dout, cu);
    single_wall = std::min(single_wall, wall);
    single = std::min(single, cpu);
    cp2(q, k, v, dout, cu, zigzag, zz);
    cp2(q, k, v, dout, cu, contiguous, halves);
  }
  std::printf("attention fwd+bwd, one document of %lld tokens, %lld q heads, %lld kv heads, D %lld, float32,\n"
              "1 kernel thread per rank, best of %lld interleaved rounds\n\n",
              static_cast<long long>(s), static_cast<long long>(kNq), static_cast<long long>(kNkv),
              static_cast<long long>(kD), static_cast<long long>(rounds));
  std::printf("%-22s %12s %14s %14s %12s %14s\n", "variant", "step wall s", "rank0 cpu s", "rank1 cpu s",
              "max/single", "sent B/rank");
  std::printf("%-22s %12.4f %14.4f %14s %12.3f %14d\n", "one rank", single_wall, single, "-", 1.0, 0);
  for (const auto& [name, t] : {std::pair<const char*, const Timing&>{"CP 2 zigzag", zz}, {"CP 2 contiguous", halves}}) {
    std::printf("%-22s %12.4f %14.4f %14.4f %12.3f %14lld\n", name, t.wall, t.cpu[0], t.cpu[1],
                std::max(t.cpu[0], t.cpu[1]) / single, static_cast<long long>(t.sent_bytes));
  }
  return 0;
}
