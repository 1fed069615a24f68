// N ranks as N threads of one process (architecture §8: rank is a parameter, never a global), for
// tests, benchmarks and single-host experiments: each thread is one rank with its own
// GroupCache (Gloo over loopback TCP) and all of them rendezvous through one file store in a fresh
// temporary directory. Fast on 2 cores, and every distributed code path runs for real.
//
//   run_thread_ranks(4, [&](int rank, GroupCache& groups) {
//     runtime::CommSession session(groups, rank);
//     Tensor mine = execute_reshard(r, shape, rank, shards[rank], session, "F");
//     EXPECT_EQ(...);   // gtest assertions work from the rank threads
//   });
//
// run_thread_ranks returns when every rank's body has returned. If any body threw, it then throws an
// Error "rank R: <what>" for the first failure (the other ranks' bodies usually fail soon after
// on a communication timeout, bounded by `timeout`). The store directory is removed afterwards.
#pragma once

#include <functional>

#include "hspmd/comm/group_cache.h"
#include "hspmd/comm/store.h"

namespace hspmd::comm {

// `timeout` bounds connecting and every communication operation (gloo_backend's timeout), so a
// test whose ranks disagree fails in that time instead of hanging. `backend_of`, when set, gives
// each rank's communicators instead of Gloo's (NCCL on the rank's GPU: `hspmd profile --device cuda`).
void run_thread_ranks(int world, const std::function<void(int rank, GroupCache& groups)>& body,
                      Millis timeout = Millis(10'000), const std::function<Backend(int rank)>& backend_of = {});

}  // namespace hspmd::comm
