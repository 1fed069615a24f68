// The communicator of a group of one, served by GroupCache without a store or transport.
#include "hspmd/comm/self_communicator.h"

#include <gtest/gtest.h>

#include <vector>

#include "hspmd/comm/group_cache.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {
namespace {

TEST(SelfCommunicator, CollectivesOfOneAreCopies) {
  GroupCache groups(nullptr, 0, nullptr);
  std::shared_ptr<Communicator> self = groups.get({0}, "post");
  EXPECT_EQ(self->ranks(), (std::vector<int>{0}));
  EXPECT_EQ(groups.get({0}, "post"), self);  // cached like any group

  std::vector<double> x{1.5, -2.0};
  self->allreduce({.data = CommBuffer::of(x)}).wait();
  EXPECT_EQ(x, (std::vector<double>{1.5, -2.0}));

  std::vector<float> in{1, 2, 3}, out(3, 0);
  self->allgather({.input = CommBuffer::of(in), .output = CommBuffer::of(out)}).wait();
  EXPECT_EQ(out, in);
  std::fill(out.begin(), out.end(), 0.0f);
  self->reduce_scatter({.input = CommBuffer::of(in), .output = CommBuffer::of(out)}).wait();
  EXPECT_EQ(out, in);

  std::vector<float> sent{7, 8}, received(2, 0);
  self->send_recv({.sends = {{0, CommBuffer::of(sent)}}, .recvs = {{0, CommBuffer::of(received)}}}).wait();
  EXPECT_EQ(received, sent);
  self->barrier().wait();
}

TEST(SelfCommunicator, WrongSizesAndOtherPeersAreErrors) {
  GroupCache groups(nullptr, 0, nullptr);
  std::shared_ptr<Communicator> self = groups.get({0});
  std::vector<float> in{1, 2, 3}, out(2, 0);
  EXPECT_THROW(self->allgather({.input = CommBuffer::of(in), .output = CommBuffer::of(out)}), Error);
  EXPECT_THROW(self->send_recv({.sends = {{1, CommBuffer::of(in)}}, .recvs = {{1, CommBuffer::of(in)}}}), Error);
  // Without a store, groups of several ranks cannot be made.
  GroupCache two(nullptr, 1, nullptr);
  EXPECT_THROW(two.get({0, 1}), Error);
}

}  // namespace
}  // namespace hspmd::comm
