#include "data/data_testlib.h"

#include <unistd.h>

#include <atomic>
#include <fstream>

#include "hspmd/core/error.h"

namespace hspmd::data::testing {

void TempDirTest::SetUp() {
  static std::atomic<int> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  dir_ = std::filesystem::temp_directory_path() /
         ("hspmd_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" + info->name());
  std::filesystem::create_directories(dir_);
}

void TempDirTest::TearDown() { std::filesystem::remove_all(dir_); }

std::string TempDirTest::write_file(const std::string& name, const std::string& text) const {
  std::string p = path(name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

std::string TempDirTest::write_dataset(const std::string& name, const std::vector<std::vector<int32_t>>& documents,
                                       uint32_t vocab_size) const {
  std::string p = path(name);
  TokenDatasetWriter writer(p, {vocab_size, "byte"});
  for (const auto& doc : documents) writer.add_document(doc);
  writer.finish();
  return p;
}

}  // namespace hspmd::data::testing
