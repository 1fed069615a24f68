// hspmd_comm_worker: the worker process of the comm dist tests. It reads its identity from the
// environment (hspmd launch, mpirun or srun variables) and runs one scenario:
//
//   hspmd_comm_worker collectives
//       every collective on the world and on subgroups (comm_testlib.h check_collectives)
//   hspmd_comm_worker failure VICTIM HEARTBEAT_TIMEOUT_MS
//       all ranks loop on allreduce; rank VICTIM kill -9s itself in the middle of one; the
//       survivors get a failure, agree on the new membership, rebuild their group under the new
//       generation and check an allreduce among themselves. Prints the times measured.
//
// Exits 0 on success; prints "rank R: error: ..." and exits 1 otherwise.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "comm/comm_testlib.h"
#include "hspmd/comm/env.h"
#include "hspmd/comm/heartbeat.h"
#include "hspmd/comm/membership.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {
namespace {

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void failure_scenario(const WorkerEnv& env, std::shared_ptr<Store> store, GroupCache& groups, int victim,
                      Millis heartbeat_timeout) {
  int rank = env.rank;
  Heartbeat heartbeat(store, rank, testing::iota(env.world_size),
                      {.interval = heartbeat_timeout / 10, .timeout = heartbeat_timeout});
  Membership membership(store, rank, testing::iota(env.world_size));
  auto comm = groups.get(testing::iota(env.world_size));
  comm->barrier().wait();

  if (rank == victim) {
    // kill -9 from inside, while the main thread is in the middle of an allreduce.
    std::thread([store] {
      std::this_thread::sleep_for(Millis(30));
      store->set("kill_time_us", std::to_string(now_us()));
      ::raise(SIGKILL);
    }).detach();
  }
  // Static: an allreduce abandoned below may still hold it until its own timeout.
  static std::vector<float> big(1 << 18, 1.0f);
  std::string failure;
  try {
    for (int i = 0; i < 100000 && failure.empty(); ++i) {
      Work work = comm->allreduce({.data = CommBuffer::of(big)});
      // A survivor whose ring neighbours are alive gets no Gloo error (it just waits for data
      // that will never come): the missed heartbeats bound how long it waits.
      while (!work.done() && failure.empty()) {
        if (!heartbeat.dead().empty()) failure = "heartbeat: rank " + std::to_string(heartbeat.dead().front()) + " is dead";
        std::this_thread::sleep_for(Millis(5));
      }
      if (failure.empty()) work.wait();
    }
  } catch (const Error& e) {
    failure = e.what();
  }
  HSPMD_CHECK(!failure.empty()) << "rank " << rank << ": 100000 allreduces completed despite the kill";
  int64_t surfaced_us = now_us();
  const std::vector<int>& members = membership.regroup(heartbeat, Millis(20'000));
  int64_t agreed_us = now_us();
  int64_t kill_us = std::stoll(store->get("kill_time_us", Millis(5'000)));
  std::cout << "rank " << rank << ": failure surfaced " << (surfaced_us - kill_us) / 1000.0
            << " ms after the kill: " << failure << "\n";
  std::cout << "rank " << rank << ": agreed on generation " << membership.generation() << " members ["
            << group_key(members) << "] " << (agreed_us - kill_us) / 1000.0 << " ms after the kill" << std::endl;

  groups.reset(membership.generation());
  auto survivors = groups.get(members);
  Tensor x = testing::input(rank, 1001, DType::kFloat32);
  survivors->allreduce({.data = CommBuffer::of(x)}).wait();
  for (int64_t i = 0; i < x.numel(); ++i) {
    HSPMD_CHECK(x.element_as_double(i) == testing::sum_value(members, i))
        << "allreduce among survivors: element " << i << " is " << x.element_as_double(i);
  }
  std::cout << "rank " << rank << ": allreduce among survivors ok" << std::endl;
}

int worker_main(int argc, char** argv) {
  HSPMD_CHECK(argc >= 2) << "usage: hspmd_comm_worker collectives | failure VICTIM HEARTBEAT_TIMEOUT_MS";
  std::string mode = argv[1];
  WorkerEnv env = WorkerEnv::from_environment();
  auto store = open_run_store(env);
  GroupCache groups(store, env.rank, gloo_backend({.timeout = Millis(20'000), .host = env.host}));
  if (mode == "collectives") {
    testing::check_collectives(env.rank, env.world_size, groups);
    std::cout << "rank " << env.rank << " of " << env.world_size << " (" << env.source << "): collectives ok"
              << std::endl;
  } else if (mode == "failure") {
    HSPMD_CHECK(argc == 4) << "usage: hspmd_comm_worker failure VICTIM HEARTBEAT_TIMEOUT_MS";
    failure_scenario(env, store, groups, std::atoi(argv[2]), Millis(std::atoi(argv[3])));
  } else {
    HSPMD_THROW() << "unknown mode '" << mode << "'";
  }
  return 0;
}

}  // namespace
}  // namespace hspmd::comm

int main(int argc, char** argv) {
  try {
    return hspmd::comm::worker_main(argc, argv);
  } catch (const std::exception& e) {
    const char* rank = std::getenv("RANK");
    std::cerr << "rank " << (rank ? rank : "?") << ": error: " << e.what() << std::endl;
    return 1;
  }
}
