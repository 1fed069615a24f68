#include "hspmd/comm/prefix_store.h"

#include "hspmd/core/error.h"

namespace hspmd::comm {

PrefixStore::PrefixStore(std::shared_ptr<Store> base, std::string prefix)
    : base_(std::move(base)), prefix_(std::move(prefix)) {
  HSPMD_CHECK(base_ != nullptr) << "prefix store '" << prefix_ << "' over a null store";
}

}  // namespace hspmd::comm
