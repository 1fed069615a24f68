// FileStore: a Store kept as one file per key in a run directory (one host, or a shared file
// system). Writes go to a temporary file renamed into place, so readers see a whole value or
// none; add() serializes through flock on a per-key lock file.
//
//   FileStore store("/tmp/hspmd-run42");   // creates the directory when missing
//   store.set("gen0/members", "0,1,2");     // file /tmp/hspmd-run42/gen0%2Fmembers
#pragma once

#include <string>

#include "hspmd/comm/store.h"

namespace hspmd::comm {

class FileStore : public Store {
 public:
  explicit FileStore(std::string directory);

  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> try_get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void erase(const std::string& key) override;
  std::string describe() const override { return "file://" + directory_; }

 private:
  // Path of key's file: bytes outside [A-Za-z0-9._-] are escaped as %XX, so any key is one flat
  // file name (no '/' or "..") and distinct keys never collide.
  std::string path_of(const std::string& key) const;

  std::string directory_;
};

}  // namespace hspmd::comm
