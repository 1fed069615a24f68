// The corpus the distributed benchmarks train on: the bundled KJV excerpt, byte-tokenized once into
// a temporary directory (kept between runs).
#pragma once

#include <filesystem>
#include <string>

#include "hspmd/data/prepare.h"
#include "hspmd/data/tokenizer.h"

namespace hspmd::bench {

inline std::string prepared_kjv_dataset(const std::string& root) {
  const std::string dir = (std::filesystem::temp_directory_path() / "hspmd-bench-hetero-kjv").string();
  if (!std::filesystem::exists(dir + "/index.bin")) {
    data::PrepareOptions p;
    p.inputs = {root + "/data/corpus/kjv-genesis-2kings.txt"};
    p.output_dir = dir;
    p.append_eos = true;
    data::prepare_dataset(data::ByteTokenizer(), p);
  }
  return dir;
}

}  // namespace hspmd::bench
