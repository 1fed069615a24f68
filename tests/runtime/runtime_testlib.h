// Helpers shared by the runtime tests: a temp directory per test, the bundled corpus as a token
// dataset, a tiny Llama and fast trainer options.
#pragma once

#include "error_of.h"
#include "run_hspmd.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include "hspmd/models/llama_config.h"
#include "hspmd/runtime/trainer.h"

namespace hspmd::runtime::testing {

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

// The repository root (found from this file's path) and the bundled corpus file.
std::filesystem::path source_dir();
std::string corpus_file();
// Prepares (once per process, under the temp root) the bundled corpus as a byte-level dataset and
// returns its directory.
std::string corpus_dataset();

// 2 layers, hidden 32, 4 query heads over 2 kv heads (GQA), byte vocabulary (260).
models::LlamaConfig tiny_config();
// seq_len 64, 512 tokens per step, lr 1e-2 with a short warm-up: a few milliseconds per step.
TrainerOptions tiny_options(int64_t steps);

using hspmd::testing::CommandResult;
using hspmd::testing::error_of;
using hspmd::testing::hspmd_binary;
using hspmd::testing::run_hspmd;

}  // namespace hspmd::runtime::testing
