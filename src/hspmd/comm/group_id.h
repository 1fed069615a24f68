// The opaque id a transport's members must all hold before they can connect (NCCL's
// ncclUniqueId): the group's first member makes it and publishes it in the group's store (already
// namespaced by group and generation, group_cache.h), the others read it, as Gloo's rendezvous
// exchanges addresses there. Independent of the transport, so it is tested without one.
//
//   std::string id = share_group_id(store, comm.group_rank(), sizeof(ncclUniqueId),
//                                   [] { return make_id_bytes(); }, timeout, "connecting NCCL group [0,1]");
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "hspmd/comm/store.h"

namespace hspmd::comm {

// The store key the id lives under.
inline constexpr const char* kGroupIdKey = "group_id";

// Member 0 calls make() and publishes its bytes; every member returns them. Throws Error prefixed
// with `what` naming the key and the store when make() returns another size than `size`, when the
// published value has another size (a different transport or version wrote it), or after `timeout`
// without one.
std::string share_group_id(Store& store, int group_rank, size_t size, const std::function<std::string()>& make,
                           Millis timeout, const std::string& what);

}  // namespace hspmd::comm
