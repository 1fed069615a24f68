// Collectives of the Gloo communicator, N ranks as N threads in one process (fast). Expected
// values are closed forms of the inputs: rank r contributes value(r, i) = (r + 1) + (i % 5).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "comm/comm_testlib.h"
#include "hspmd/comm/communicator.h"
#include "hspmd/core/bfloat16.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {
namespace {

using testing::input;
using testing::iota;
using testing::run_ranks;
using testing::sum_value;
using testing::value;

const DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt64, DType::kInt32};

TEST(GlooCommunicator, AllreduceEveryDtypeWorldSizeAndCount) {
  for (int world = 1; world <= 4; ++world) {
    run_ranks(world, [&](int rank, GroupCache& groups) {
      auto comm = groups.get(iota(world));
      for (DType dtype : kDTypes) {
        for (int64_t n : {0, 1, 7, 1001}) {
          Tensor x = input(rank, n, dtype);
          comm->allreduce({.data = CommBuffer::of(x)}).wait();
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(x.element_as_double(i), sum_value(iota(world), i))
                << dtype_name(dtype) << " world " << world << " n " << n << " i " << i;
          }
        }
      }
    });
  }
}

TEST(GlooCommunicator, BFloat16SumsInFloat32AndRoundsOnce) {
  // 256 + 1 + 1 + 1: bfloat16 (8 bits of mantissa) loses each +1 when added one at a time, but
  // the float32 sum 259 rounds once to 260.
  run_ranks(4, [&](int rank, GroupCache& groups) {
    std::vector<BFloat16> x{BFloat16(rank == 0 ? 256.0f : 1.0f)};
    groups.get(iota(4))->allreduce({.data = CommBuffer::of(x)}).wait();
    EXPECT_EQ(static_cast<float>(x[0]), 260.0f);
  });
}

TEST(GlooCommunicator, ReduceScatterEvenAndUneven) {
  for (int world = 1; world <= 4; ++world) {
    // Uneven: group index i gets 2*i + 1 elements (odd counts); even: 3 each.
    std::vector<int64_t> uneven, even(world, 3);
    for (int i = 0; i < world; ++i) uneven.push_back(2 * i + 1);
    run_ranks(world, [&](int rank, GroupCache& groups) {
      auto comm = groups.get(iota(world));
      for (DType dtype : kDTypes) {
        for (const auto& counts : {even, uneven}) {
          int64_t total = 0, offset = 0;
          for (int i = 0; i < world; ++i) total += counts[i];
          for (int i = 0; i < rank; ++i) offset += counts[i];
          Tensor in = input(rank, total, dtype);
          Tensor out = Tensor::zeros({counts[rank]}, dtype);
          bool is_even = counts == even;
          comm->reduce_scatter({.input = CommBuffer::of(in), .output = CommBuffer::of(out),
                                .counts = is_even ? std::vector<int64_t>{} : counts})
              .wait();
          for (int64_t i = 0; i < counts[rank]; ++i) {
            ASSERT_EQ(out.element_as_double(i), sum_value(iota(world), offset + i))
                << dtype_name(dtype) << " world " << world << " i " << i;
          }
        }
      }
    });
  }
}

TEST(GlooCommunicator, AllgatherEvenAndV) {
  for (int world = 1; world <= 4; ++world) {
    run_ranks(world, [&](int rank, GroupCache& groups) {
      auto comm = groups.get(iota(world));
      for (DType dtype : kDTypes) {
        // Even: 5 elements each. V: group index i contributes (i * 3) % 4 elements (some 0).
        for (bool v : {false, true}) {
          std::vector<int64_t> counts(world, 5);
          if (v) for (int i = 0; i < world; ++i) counts[i] = (i * 3) % 4;
          int64_t total = 0;
          for (auto c : counts) total += c;
          Tensor in = input(rank, counts[rank], dtype);
          Tensor out = Tensor::zeros({total}, dtype);
          comm->allgather({.input = CommBuffer::of(in), .output = CommBuffer::of(out),
                           .counts = v ? counts : std::vector<int64_t>{}})
              .wait();
          int64_t pos = 0;
          for (int r = 0; r < world; ++r) {
            for (int64_t i = 0; i < counts[r]; ++i, ++pos) {
              ASSERT_EQ(out.element_as_double(pos), static_cast<double>(input(r, counts[r], dtype).element_as_double(i)))
                  << dtype_name(dtype) << " world " << world << " from " << r << " i " << i;
            }
          }
        }
      }
    });
  }
}

TEST(GlooCommunicator, BroadcastFromEveryRoot) {
  run_ranks(3, [&](int rank, GroupCache& groups) {
    auto comm = groups.get({0, 1, 2});
    for (int root = 0; root < 3; ++root) {
      for (DType dtype : kDTypes) {
        Tensor x = rank == root ? input(root, 13, dtype) : Tensor::zeros({13}, dtype);
        comm->broadcast({.data = CommBuffer::of(x), .root = root}).wait();
        for (int64_t i = 0; i < 13; ++i) ASSERT_EQ(x.element_as_double(i), value(root, i)) << "root " << root;
      }
    }
  });
}

TEST(GlooCommunicator, SubgroupsRunWithoutRanksOutsideThem) {
  // Rank 1 only ever uses the singleton group {1}: groups {0,2,3}, {0,2} and {2,3} must complete
  // without it, concurrently.
  std::atomic<bool> rank1_done{false};
  run_ranks(4, [&](int rank, GroupCache& groups) {
    if (rank == 1) {
      std::vector<float> x{5.0f};
      groups.get({1})->allreduce({.data = CommBuffer::of(x)}).wait();
      EXPECT_EQ(x[0], 5.0f);
      rank1_done = true;
      return;
    }
    Tensor x = input(rank, 9, DType::kFloat32);
    groups.get({0, 2, 3})->allreduce({.data = CommBuffer::of(x)}).wait();
    for (int64_t i = 0; i < 9; ++i) ASSERT_EQ(x.element_as_double(i), sum_value({0, 2, 3}, i));
    std::vector<int> pair = rank == 3 ? std::vector<int>{2, 3} : std::vector<int>{0, 2};
    if (rank == 2) {
      // Rank 2 is in both pairs; both must work, one after the other.
      for (auto p : {std::vector<int>{0, 2}, std::vector<int>{2, 3}}) {
        Tensor y = input(rank, 4, DType::kInt64);
        groups.get(p)->allreduce({.data = CommBuffer::of(y)}).wait();
        for (int64_t i = 0; i < 4; ++i) ASSERT_EQ(y.element_as_double(i), sum_value(p, i));
      }
    } else {
      Tensor y = input(rank, 4, DType::kInt64);
      groups.get(pair)->allreduce({.data = CommBuffer::of(y)}).wait();
      for (int64_t i = 0; i < 4; ++i) ASSERT_EQ(y.element_as_double(i), sum_value(pair, i));
    }
    EXPECT_EQ(groups.cached(), rank == 2 ? 3u : 2u);  // {0,2,3} plus its pair(s)
  });
  EXPECT_TRUE(rank1_done);
}

TEST(GlooCommunicator, BatchedSendRecvRandomManyToMany) {
  for (int world = 2; world <= 4; ++world) {
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      auto pattern = testing::random_pattern(world, seed * 7 + world);
      run_ranks(world, [&](int, GroupCache& groups) { testing::check_send_recv(*groups.get(iota(world)), pattern); });
    }
  }
}

TEST(GlooCommunicator, SendRecvOnASubgroupUsesGlobalRanks) {
  // Group [1, 3] of a world of 4: pattern index 0 is rank 1, index 1 is rank 3.
  auto pattern = testing::random_pattern(2, 5);
  run_ranks(4, [&](int rank, GroupCache& groups) {
    if (rank == 1 || rank == 3) testing::check_send_recv(*groups.get({1, 3}), pattern);
  });
}

TEST(GlooCommunicator, FullCollectiveCheckOnOneToFourRanks) {
  for (int world = 1; world <= 4; ++world) {
    run_ranks(world, [&](int rank, GroupCache& groups) { testing::check_collectives(rank, world, groups); });
  }
}

TEST(GlooCommunicator, AsyncOperationsCompleteInSubmissionOrder) {
  run_ranks(3, [&](int rank, GroupCache& groups) {
    auto comm = groups.get({0, 1, 2});
    std::vector<double> x(1000, rank + 1.0);
    // allreduce then broadcast from rank 2 then allreduce again, all queued before any wait:
    // order matters for the result ((6 -> 6) -> 18).
    std::vector<Work> works;
    works.push_back(comm->allreduce({.data = CommBuffer::of(x)}));
    works.push_back(comm->broadcast({.data = CommBuffer::of(x), .root = 2}));
    works.push_back(comm->allreduce({.data = CommBuffer::of(x)}));
    works.push_back(comm->barrier());
    for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait(std::chrono::seconds(10));
    for (double v : x) ASSERT_EQ(v, 18.0);
  });
}

TEST(GlooCommunicator, CachedPerRankListAndResetByGeneration) {
  run_ranks(2, [&](int, GroupCache& groups) {
    auto a = groups.get({1, 0});
    EXPECT_EQ(a, groups.get({0, 1}));  // same sorted rank list, same communicator
    EXPECT_EQ(a->generation(), 0);
    groups.reset(1);
    EXPECT_EQ(groups.cached(), 0u);
    auto b = groups.get({0, 1});
    EXPECT_NE(a, b);
    EXPECT_EQ(b->generation(), 1);
    std::vector<int64_t> x{1};
    b->allreduce({.data = CommBuffer::of(x)}).wait();
    EXPECT_EQ(x[0], 2);
  });
}

TEST(GlooCommunicator, ChannelsOfOnePairAreIndependent) {
  run_ranks(
      2,
      [&](int rank, GroupCache& groups) {
        auto fwd = groups.get({0, 1}, "F");
        auto bwd = groups.get({1, 0}, "B");
        EXPECT_NE(fwd, bwd);
        EXPECT_NE(fwd, groups.get({0, 1}));  // the default channel is a third communicator
        EXPECT_EQ(fwd, groups.get({1, 0}, "F"));
        EXPECT_EQ(groups.cached(), 3u);
        EXPECT_THROW(groups.get({0, 1}, "F/B"), Error);
        const int peer = 1 - rank;
        // Rank 0 queues a large send on F; rank 1 posts the matching receive only after the
        // exchange on B. Were F and B one communicator, B would wait behind the unmatched send
        // (which cannot complete: 8 MiB does not fit in socket buffers) until the timeout.
        std::vector<double> activations(1 << 20);
        for (size_t i = 0; i < activations.size(); ++i) activations[i] = static_cast<double>(i);
        Work forward;
        if (rank == 0) forward = fwd->send_recv({.sends = {{1, CommBuffer::of(activations)}}});
        std::vector<int64_t> mine{10 + rank}, theirs{-1};
        bwd->send_recv({.sends = {{peer, CommBuffer::of(mine)}}, .recvs = {{peer, CommBuffer::of(theirs)}}})
            .wait(std::chrono::seconds(5));
        EXPECT_EQ(theirs[0], 10 + peer);
        if (rank == 0) {
          forward.wait(std::chrono::seconds(5));
        } else {
          std::vector<double> got(activations.size(), -1.0);
          fwd->send_recv({.recvs = {{0, CommBuffer::of(got)}}}).wait(std::chrono::seconds(5));
          EXPECT_EQ(got, activations);
        }
      },
      std::chrono::milliseconds(3000));
}

TEST(GlooCommunicator, BadArgumentsNameTheOperationAndGroup) {
  run_ranks(2, [&](int rank, GroupCache& groups) {
    auto comm = groups.get({0, 1});
    std::vector<float> in(5), out(2);
    try {
      comm->reduce_scatter({.input = CommBuffer::of(in), .output = CommBuffer::of(out)});
      ADD_FAILURE() << "no error for 5 elements over 2 members";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("reduce_scatter on group [0,1] gen 0"), std::string::npos) << e.what();
    }
    EXPECT_THROW(comm->broadcast({.data = CommBuffer::of(in), .root = 7}), Error);
    EXPECT_THROW(groups.get({rank == 0 ? 1 : 0}), Error);  // not a member
    EXPECT_THROW(groups.get({0, 0, 1}), Error);             // duplicate rank
    // Neither rank closes the group while the other may still be finishing its connect (seen on a
    // loaded host: "Connection closed by peer" in rank 0's connect).
    comm->barrier().wait();
  });
}

TEST(GlooCommunicator, MissingPeerTimesOutWithClearErrorAndBreaksTheGroup) {
  std::atomic<bool> rank0_done{false};
  auto start = std::chrono::steady_clock::now();
  run_ranks(
      2,
      [&](int rank, GroupCache& groups) {
        auto comm = groups.get({0, 1});
        if (rank == 1) {
          // Stays connected but never joins the allreduce.
          while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          return;
        }
        std::vector<float> x(10, 1.0f);
        try {
          comm->allreduce({.data = CommBuffer::of(x)}).wait();
          ADD_FAILURE() << "allreduce without its peer completed";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("allreduce on group [0,1] gen 0 (rank 0)"), std::string::npos)
              << e.what();
        }
        try {
          comm->barrier().wait();
          ADD_FAILURE() << "barrier on a broken group completed";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("broken"), std::string::npos) << e.what();
        }
        rank0_done = true;
      },
      std::chrono::milliseconds(300));
  auto elapsed = std::chrono::steady_clock::now() - start;
  // The 300 ms timeout, not a hang: generous for a loaded machine, far below ctest's 300 s limit.
  EXPECT_LT(elapsed, std::chrono::seconds(30));
}

TEST(GlooCommunicator, GroupWhoseMemberNeverComesTimesOut) {
  run_ranks(
      2,
      [&](int rank, GroupCache& groups) {
        if (rank == 1) return;
        try {
          groups.get({0, 1});
          ADD_FAILURE() << "connected without rank 1";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("connecting group [0,1] gen 0"), std::string::npos) << e.what();
        }
      },
      std::chrono::milliseconds(300));
}

TEST(GroupCache, AbortReleasesAWaiterBlockedOnALivePeerAndReconnectsAfterReset) {
  // Rank 0 waits for a message rank 1 never sends (rank 1 is alive, busy elsewhere): abort() from
  // another thread releases the wait at once with the reason, later get() calls fail until
  // reset(), and the next generation connects and works.
  run_ranks(2, [&](int rank, GroupCache& groups) {
    auto pair = groups.get({0, 1});
    std::vector<float> x(4, 1.0f);
    if (rank == 0) {
      Work w = pair->send_recv({.recvs = {{.peer = 1, .buffer = CommBuffer::of(x)}}});
      const auto start = std::chrono::steady_clock::now();
      std::thread aborter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        groups.abort("rank 7 died");
      });
      try {
        w.wait();
        ADD_FAILURE() << "the wait was not aborted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("aborted: rank 7 died"), std::string::npos) << e.what();
      }
      aborter.join();
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
      EXPECT_THROW(groups.get({0, 1}), Error);
      EXPECT_EQ(groups.aborted(), "rank 7 died");
    } else {
      // Rank 1 notices the closed connection when it next uses the group.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      EXPECT_THROW(pair->allreduce({.data = CommBuffer::of(x)}).wait(), Error);
      groups.abort("peer closed");
    }
    groups.reset(1);
    std::vector<float> y{static_cast<float>(rank + 1)};
    groups.get({0, 1})->allreduce({.data = CommBuffer::of(y)}).wait();
    EXPECT_EQ(y[0], 3.0f);
  });
}

}  // namespace
}  // namespace hspmd::comm
