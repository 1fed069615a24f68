// PrefixStore: a view of another Store whose keys all start with a prefix. Every rendezvous is
// namespaced this way: by run id ("run42/"), then by generation and group
// ("gen1/group/0,2,3/"), so runs, generations and groups never read each other's keys.
//
//   auto run = std::make_shared<PrefixStore>(open_store(url), "run42/");
//   PrefixStore group(run, "gen1/group/0,2,3/");
//   group.set("0", addr);   // key "run42/gen1/group/0,2,3/0" in the underlying store
#pragma once

#include <memory>
#include <string>

#include "hspmd/comm/store.h"

namespace hspmd::comm {

class PrefixStore : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix);

  void set(const std::string& key, const std::string& value) override { base_->set(prefix_ + key, value); }
  std::optional<std::string> try_get(const std::string& key) override { return base_->try_get(prefix_ + key); }
  int64_t add(const std::string& key, int64_t delta) override { return base_->add(prefix_ + key, delta); }
  void erase(const std::string& key) override { base_->erase(prefix_ + key); }
  std::string describe() const override { return base_->describe() + " (prefix '" + prefix_ + "')"; }

  const std::string& prefix() const { return prefix_; }

 private:
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

}  // namespace hspmd::comm
