#include "hspmd/comm/group_id.h"

#include "hspmd/core/error.h"

namespace hspmd::comm {

std::string share_group_id(Store& store, int group_rank, size_t size, const std::function<std::string()>& make,
                           Millis timeout, const std::string& what) {
  if (group_rank == 0) {
    std::string id = make();
    HSPMD_CHECK(id.size() == size) << what << ": made a group id of " << id.size() << " bytes, expected " << size;
    store.set(kGroupIdKey, id);
    return id;
  }
  std::string id;
  try {
    id = store.get(kGroupIdKey, timeout);
  } catch (const std::exception& e) {
    HSPMD_THROW() << what << ": no group id from member 0 under '" << kGroupIdKey << "' in " << store.describe() << " ("
                  << e.what() << ")";
  }
  HSPMD_CHECK(id.size() == size) << what << ": the group id under '" << kGroupIdKey << "' in " << store.describe()
                                 << " has " << id.size() << " bytes, expected " << size;
  return id;
}

}  // namespace hspmd::comm
