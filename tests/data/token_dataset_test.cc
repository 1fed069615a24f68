#include "hspmd/data/token_dataset.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/data_testlib.h"
#include "hspmd/core/error.h"

namespace hspmd::data {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

class TokenDatasetTest : public testing::TempDirTest {};

TEST_F(TokenDatasetTest, RoundTripsDocumentsAndHeaderWithUint16Tokens) {
  std::vector<std::vector<int32_t>> docs = {{1, 2, 3}, {}, {259, 0}, {42}};
  std::string dir = write_dataset("ds", docs);
  TokenDataset ds = TokenDataset::open(dir);
  EXPECT_EQ(ds.num_documents(), 4u);
  EXPECT_EQ(ds.num_tokens(), 6u);
  EXPECT_EQ(ds.vocab_size(), 260u);
  EXPECT_EQ(ds.tokenizer_id(), "byte");
  EXPECT_EQ(ds.header().token_bytes, 2u);
  for (size_t d = 0; d < docs.size(); ++d) EXPECT_EQ(ds.document(d), docs[d]) << d;
  std::vector<int32_t> part;
  ds.read(0, 1, 2, part);
  EXPECT_EQ(part, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(fs::file_size(fs::path(dir) / kTokensFile), 16u + 6 * 2);
  EXPECT_NE(error_of([&] { ds.read(0, 2, 2, part); }).find("out of range for document 0"), std::string::npos);
  EXPECT_NE(error_of([&] { ds.document(4); }).find("document 4 out of range"), std::string::npos);
  TokenDataset moved = std::move(ds);
  EXPECT_EQ(moved.document(2), docs[2]);
}

TEST_F(TokenDatasetTest, LargeVocabulariesUseUint32Tokens) {
  std::string dir = write_dataset("big", {{128255, 70000, 1}}, 128256);
  TokenDataset ds = TokenDataset::open(dir);
  EXPECT_EQ(ds.header().token_bytes, 4u);
  EXPECT_EQ(ds.document(0), (std::vector<int32_t>{128255, 70000, 1}));
}

TEST_F(TokenDatasetTest, WriterRejectsOutOfVocabularyIdsAndLeavesNoFiles) {
  std::string dir = path("bad");
  std::string error = error_of([&] {
    TokenDatasetWriter writer(dir, {260, "byte"});
    writer.add_document(std::vector<int32_t>{1, 2});
    writer.add_document(std::vector<int32_t>{5, 260});
    writer.finish();
  });
  EXPECT_NE(error.find("document 1, token 1: id 260 is outside the vocabulary [0, 260)"), std::string::npos) << error;
  EXPECT_TRUE(fs::is_empty(dir));  // the temp file was removed, nothing was renamed into place
  EXPECT_NE(error_of([&] { TokenDatasetWriter(path("x"), {260, std::string(40, 'a')}); }).find("tokenizer id"),
            std::string::npos);
}

TEST_F(TokenDatasetTest, OpenRejectsMissingTruncatedAndMismatchedFiles) {
  EXPECT_NE(error_of([&] { TokenDataset::open(path("nothing")); }).find("cannot open"), std::string::npos);

  std::string a = write_dataset("a", {{1, 2, 3}, {4, 5}});
  std::string b = write_dataset("b", {{1, 2, 3, 4}, {4, 5}});
  // tokens.bin of another dataset: sizes disagree with the index.
  fs::copy_file(fs::path(b) / kTokensFile, fs::path(a) / kTokensFile, fs::copy_options::overwrite_existing);
  std::string error = error_of([&] { TokenDataset::open(a); });
  EXPECT_NE(error.find("tokens.bin"), std::string::npos) << error;
  EXPECT_NE(error.find("truncated or from another dataset"), std::string::npos) << error;

  fs::resize_file(fs::path(b) / kIndexFile, fs::file_size(fs::path(b) / kIndexFile) - 8);
  error = error_of([&] { TokenDataset::open(b); });
  EXPECT_NE(error.find("index.bin"), std::string::npos) << error;

  std::string c = write_dataset("c", {{1}});
  std::ofstream(fs::path(c) / kIndexFile, std::ios::binary) << "NOTANIDX" << std::string(100, '\0');
  EXPECT_NE(error_of([&] { TokenDataset::open(c); }).find("bad magic"), std::string::npos);
}

// Found while writing the dataset fuzz target: num_tokens = 2^63 + 1 makes num_tokens x 2 bytes wrap
// around to 2, so a 2-byte tokens.bin matched the index and reading the document ran past it.
TEST_F(TokenDatasetTest, TokenCountWhoseByteSizeWrapsAroundIsRefused) {
  const uint64_t huge = (1ull << 63) + 1;
  std::filesystem::create_directories(path("wrap"));
  {
    std::ofstream index(path("wrap/index.bin"), std::ios::binary);
    const uint32_t fields[] = {1, 2, 260, 0};  // version, token width, vocab size, reserved
    const uint64_t counts[] = {1, huge};      // documents, tokens
    char tokenizer[32] = "byte";
    const uint64_t offsets[] = {0, huge};
    index.write("HSPMDIDX", 8);
    index.write(reinterpret_cast<const char*>(fields), sizeof fields);
    index.write(reinterpret_cast<const char*>(counts), sizeof counts);
    index.write(tokenizer, sizeof tokenizer);
    index.write(reinterpret_cast<const char*>(offsets), sizeof offsets);
  }
  {
    std::ofstream tokens(path("wrap/tokens.bin"), std::ios::binary);
    const uint32_t fields[] = {1, 2};  // version, token width
    tokens.write("HSPMDTOK", 8);
    tokens.write(reinterpret_cast<const char*>(fields), sizeof fields);
    tokens.write("\x01\x00", 2);  // 16 + 2 bytes: what 2 x (2^63 + 1) wraps around to
  }
  EXPECT_NE(error_of([&] { TokenDataset::open(path("wrap")); }).find("tokens.bin"), std::string::npos);
}

TEST_F(TokenDatasetTest, CorruptedTokenIdsAreReportedOnRead) {
  std::string dir = write_dataset("d", {{1, 2}, {3, 4}});
  {
    std::fstream f(fs::path(dir) / kTokensFile, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(16 + 3 * 2);
    uint16_t bad = 60000;
    f.write(reinterpret_cast<char*>(&bad), 2);
  }
  TokenDataset ds = TokenDataset::open(dir);
  EXPECT_EQ(ds.document(0), (std::vector<int32_t>{1, 2}));
  EXPECT_NE(error_of([&] { ds.document(1); }).find("document 1 holds token id 60000 >= vocab_size 260"),
            std::string::npos);
}

}  // namespace
}  // namespace hspmd::data
