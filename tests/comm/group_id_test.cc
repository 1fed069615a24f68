// The group id exchange a transport (NCCL) connects with: member 0's bytes reach every member
// through the store, binary-safe; wrong sizes and a missing member 0 are errors naming the key and
// the store.
#include "hspmd/comm/group_id.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "comm/comm_testlib.h"
#include "hspmd/comm/file_store.h"
#include "hspmd/comm/prefix_store.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

// 128 bytes, as an ncclUniqueId, with NULs and high bytes.
std::string id_bytes(unsigned char seed) {
  std::string id(128, '\0');
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>((seed * 31 + i * 7) % 256);
  return id;
}

TEST(GroupId, MemberZerosBytesReachEveryMember) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  PrefixStore group(store, "gen0/group/0,1,2/");
  std::vector<std::string> seen(3);
  std::vector<int> made(3, 0);
  std::vector<std::thread> members;
  for (int r = 2; r >= 0; --r) {  // the readers start first and wait
    members.emplace_back([&, r] {
      seen[r] = share_group_id(
          group, r, 128,
          [&] {
            ++made[r];
            return id_bytes(9);
          },
          Millis(10'000), "test");
    });
  }
  for (auto& t : members) t.join();
  EXPECT_EQ(made, (std::vector<int>{1, 0, 0}));
  for (const std::string& s : seen) EXPECT_EQ(s, id_bytes(9));
  EXPECT_EQ(*store->try_get(std::string("gen0/group/0,1,2/") + kGroupIdKey), id_bytes(9));
}

TEST(GroupId, WrongSizesAndAMissingMemberZeroAreErrorsNamingKeyAndStore) {
  TempDir dir;
  FileStore store(dir.path());
  auto error_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string missing = error_of([&] {
    share_group_id(
        store, 1, 128, [] { return std::string(); }, Millis(50), "connecting group [0,1]");
  });
  EXPECT_THAT(missing, HasSubstr("connecting group [0,1]: no group id from member 0 under 'group_id' in file://"));
  const std::string made_short = error_of([&] {
    share_group_id(
        store, 0, 128, [] { return std::string(5, 'x'); }, Millis(50), "connecting group [0,1]");
  });
  EXPECT_THAT(made_short, HasSubstr("made a group id of 5 bytes, expected 128"));
  store.set(kGroupIdKey, std::string(64, 'y'));  // another transport's id
  const std::string wrong =
      error_of([&] { share_group_id(store, 1, 128, nullptr, Millis(50), "connecting group [0,1]"); });
  EXPECT_THAT(wrong, HasSubstr("the group id under 'group_id' in file://"));
  EXPECT_THAT(wrong, HasSubstr("has 64 bytes, expected 128"));
}

}  // namespace
}  // namespace hspmd::comm
