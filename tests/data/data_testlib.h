// Helpers shared by the data tests: a temp directory per test, file writing, error capture.
#pragma once

#include "error_of.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "hspmd/data/token_dataset.h"

namespace hspmd::data::testing {

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Writes text to dir/name and returns the path.
  std::string write_file(const std::string& name, const std::string& text) const;
  // Writes a dataset of the given documents (vocab 260, tokenizer "byte") to dir/name.
  std::string write_dataset(const std::string& name, const std::vector<std::vector<int32_t>>& documents,
                            uint32_t vocab_size = 260) const;

  std::filesystem::path dir_;
};

using hspmd::testing::error_of;

}  // namespace hspmd::data::testing
