#include "comm/comm_testlib.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "hspmd/comm/file_store.h"
#include "hspmd/core/bfloat16.h"
#include "hspmd/core/error.h"

namespace hspmd::comm::testing {

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/hspmd-comm-test-XXXXXX";
  HSPMD_CHECK(::mkdtemp(pattern.data()) != nullptr) << "mkdtemp " << pattern;
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void run_ranks(int world, const std::function<void(int rank, GroupCache& groups)>& body, Millis timeout,
               const std::function<Backend(int rank)>& make_backend) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::mutex mutex;
  std::string first_error;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        GroupCache groups(store, rank, make_backend ? make_backend(rank) : gloo_backend({.timeout = timeout}));
        body(rank, groups);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        if (first_error.empty()) first_error = "rank " + std::to_string(rank) + ": " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  HSPMD_CHECK(first_error.empty()) << first_error;
}

double value(int rank, int64_t i) { return (rank + 1) + static_cast<double>(i % 5); }

Tensor input(int rank, int64_t n, DType dtype, int64_t offset) {
  Tensor t = Tensor::empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) {
    double v = value(rank, i + offset);
    switch (dtype) {
      case DType::kFloat32: t.data<float>()[i] = static_cast<float>(v); break;
      case DType::kFloat64: t.data<double>()[i] = v; break;
      case DType::kBFloat16: t.data<BFloat16>()[i] = BFloat16(static_cast<float>(v)); break;
      case DType::kInt32: t.data<int32_t>()[i] = static_cast<int32_t>(v); break;
      case DType::kInt64: t.data<int64_t>()[i] = static_cast<int64_t>(v); break;
    }
  }
  return t;
}

double sum_value(const std::vector<int>& members, int64_t i) {
  double s = 0;
  for (int r : members) s += value(r, i);
  return s;
}

std::vector<int> iota(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

float message_value(int src, int dst, int k, int64_t i) {
  return static_cast<float>(src * 1000 + dst * 100 + k * 10) + static_cast<float>(i) * 0.5f;
}

P2PPattern random_pattern(int world, uint32_t seed) {
  std::mt19937 rng(seed);
  P2PPattern p;
  std::map<std::pair<int, int>, int> ordinal;
  int n_messages = 3 * world + static_cast<int>(rng() % 8);
  for (int m = 0; m < n_messages; ++m) {
    int src = static_cast<int>(rng() % world), dst = static_cast<int>(rng() % world);
    int64_t n = (rng() % 6 == 0) ? 0 : 1 + static_cast<int64_t>(rng() % 3000);
    p.messages.push_back({src, dst, ordinal[{src, dst}]++, n});
  }
  return p;
}

void check_send_recv(Communicator& comm, const P2PPattern& pattern) {
  const auto& ranks = comm.ranks();
  int me = comm.group_rank();
  SendRecvOptions options;
  std::vector<std::vector<float>> sent, received;
  std::vector<const P2PPattern::Message*> expected;
  sent.reserve(pattern.messages.size());
  received.reserve(pattern.messages.size());
  for (const auto& m : pattern.messages) {
    if (m.src == me) {
      auto& buf = sent.emplace_back(m.n);
      for (int64_t i = 0; i < m.n; ++i) buf[i] = message_value(m.src, m.dst, m.k, i);
      options.sends.push_back({ranks[m.dst], CommBuffer::of(buf)});
    }
    if (m.dst == me) {
      auto& buf = received.emplace_back(m.n, -1.0f);
      options.recvs.push_back({ranks[m.src], CommBuffer::of(buf)});
      expected.push_back(&m);
    }
  }
  comm.send_recv(options).wait();
  for (size_t j = 0; j < expected.size(); ++j) {
    const auto& m = *expected[j];
    for (int64_t i = 0; i < m.n; ++i) {
      HSPMD_CHECK(received[j][i] == message_value(m.src, m.dst, m.k, i))
          << "send_recv on " << comm.describe() << ": message " << m.src << "->" << m.dst << " #" << m.k
          << " element " << i << " is " << received[j][i] << ", expected " << message_value(m.src, m.dst, m.k, i);
    }
  }
}

namespace {

void expect_element(const Tensor& t, int64_t i, double expected, const char* op, const Communicator& comm) {
  double got = t.element_as_double(i);
  HSPMD_CHECK(got == expected) << op << " on " << comm.describe() << " " << dtype_name(t.dtype()) << ": element "
                               << i << " is " << got << ", expected " << expected;
}

void check_group(Communicator& comm, DType dtype) {
  const auto& members = comm.ranks();
  int me = comm.global_rank(), index = comm.group_rank(), size = comm.size();
  // allreduce, odd count
  Tensor x = input(me, 1001, dtype);
  comm.allreduce({.data = CommBuffer::of(x)}).wait();
  for (int64_t i = 0; i < x.numel(); ++i) expect_element(x, i, sum_value(members, i), "allreduce", comm);
  // reduce_scatter, uneven odd counts 2*i + 1
  std::vector<int64_t> counts(size);
  int64_t total = 0, offset = 0;
  for (int i = 0; i < size; ++i) total += counts[i] = 2 * i + 1;
  for (int i = 0; i < index; ++i) offset += counts[i];
  Tensor in = input(me, total, dtype), out = Tensor::zeros({counts[index]}, dtype);
  comm.reduce_scatter({.input = CommBuffer::of(in), .output = CommBuffer::of(out), .counts = counts}).wait();
  for (int64_t i = 0; i < out.numel(); ++i) expect_element(out, i, sum_value(members, offset + i), "reduce_scatter", comm);
  // allgatherv with the same counts
  Tensor mine = input(me, counts[index], dtype), all = Tensor::zeros({total}, dtype);
  comm.allgather({.input = CommBuffer::of(mine), .output = CommBuffer::of(all), .counts = counts}).wait();
  int64_t pos = 0;
  for (int r = 0; r < size; ++r) {
    for (int64_t i = 0; i < counts[r]; ++i, ++pos) expect_element(all, pos, value(members[r], i), "allgather", comm);
  }
  // broadcast from the last member
  int root = members.back();
  Tensor b = me == root ? input(root, 77, dtype) : Tensor::zeros({77}, dtype);
  comm.broadcast({.data = CommBuffer::of(b), .root = root}).wait();
  for (int64_t i = 0; i < b.numel(); ++i) expect_element(b, i, value(root, i), "broadcast", comm);
}

}  // namespace

void check_collectives(int rank, int world, GroupCache& groups) {
  std::vector<int> all = iota(world);
  std::vector<std::vector<int>> subgroups{all};
  if (world >= 3) subgroups.push_back(std::vector<int>(all.begin() + 1, all.end()));  // without rank 0
  if (world >= 4) subgroups.push_back({0, 2});                                        // evens
  for (const auto& group : subgroups) {
    if (std::find(group.begin(), group.end(), rank) == group.end()) continue;
    auto comm = groups.get(group);
    for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt64}) check_group(*comm, dtype);
    check_send_recv(*comm, random_pattern(comm->size(), 17 + static_cast<uint32_t>(comm->size())));
    comm->barrier().wait();
  }
}

Subprocess::Subprocess(const std::vector<std::string>& argv,
                       const std::vector<std::pair<std::string, std::string>>& env) {
  int fds[2];
  HSPMD_CHECK(::pipe2(fds, O_CLOEXEC) == 0) << "pipe";
  pid_ = ::fork();
  HSPMD_CHECK(pid_ >= 0) << "fork";
  if (pid_ == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  fd_ = fds[0];
}

Subprocess::~Subprocess() {
  if (!exited_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (fd_ >= 0) ::close(fd_);
}

int Subprocess::read_some(Millis timeout) {
  if (fd_ < 0) return -1;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return 0;
  char buf[4096];
  ssize_t n = ::read(fd_, buf, sizeof(buf));
  if (n <= 0) {
    ::close(fd_);
    fd_ = -1;
    return -1;
  }
  output_.append(buf, static_cast<size_t>(n));
  return 1;
}

bool Subprocess::wait_for_output(const std::string& text, Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (output_.find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline || read_some(Millis(20)) < 0) break;
  }
  return output_.find(text) != std::string::npos;
}

int Subprocess::finish(Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline && read_some(Millis(20)) >= 0) {
  }
  int status = 0;
  bool timed_out = false;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid_, SIGKILL);
      timed_out = true;
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(Millis(5));
  }
  exited_ = true;
  while (read_some(Millis(0)) > 0) {
  }
  if (timed_out) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string binary_path(const std::string& name) {
  const char* dir = std::getenv("HSPMD_BINARY_DIR");
  HSPMD_CHECK(dir != nullptr) << "HSPMD_BINARY_DIR is not set: run this test through ctest, or set it to the "
                                 "build directory";
  return std::string(dir) + "/" + name;
}

}  // namespace hspmd::comm::testing
