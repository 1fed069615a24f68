#include "hspmd/data/prepare.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "data/data_testlib.h"
#include "hspmd/core/error.h"

namespace hspmd::data {
namespace {

using testing::error_of;

class PrepareTest : public testing::TempDirTest {
 protected:
  PrepareStats prepare(std::vector<std::string> inputs, InputFormat format = InputFormat::kAuto, bool eos = false) {
    PrepareOptions o;
    o.inputs = std::move(inputs);
    o.output_dir = path("out");
    o.format = format;
    o.append_eos = eos;
    return prepare_dataset(tokenizer_, o);
  }
  std::vector<std::string> documents() const {
    TokenDataset ds = TokenDataset::open(path("out"));
    std::vector<std::string> out;
    for (uint64_t d = 0; d < ds.num_documents(); ++d) out.push_back(tokenizer_.decode(ds.document(d)));
    return out;
  }
  ByteTokenizer tokenizer_;
};

TEST_F(PrepareTest, TextFilesSplitOnBlankLines) {
  std::string a = write_file("a.txt", "Genesis 1\nIn the beginning\n\n\n   \nsecond doc\r\nline two\r\n\r\nthird");
  std::string b = write_file("b.txt", "no blank line: one document\n");
  PrepareStats s = prepare({a, b});
  EXPECT_EQ(s.documents, 4u);
  EXPECT_EQ(documents(), (std::vector<std::string>{"Genesis 1\nIn the beginning", "second doc\nline two", "third",
                                                   "no blank line: one document"}));
  TokenDataset ds = TokenDataset::open(path("out"));
  EXPECT_EQ(ds.tokenizer_id(), "byte");
  EXPECT_EQ(ds.vocab_size(), 260u);
  EXPECT_EQ(s.tokens, ds.num_tokens());
  EXPECT_GT(s.bytes_read, 0u);
}

TEST_F(PrepareTest, JsonlTextAndIdsWithAutoDetectionAndEos) {
  std::string text = write_file("t.jsonl", "{\"text\": \"héllo\"}\n\n{\"text\": \"x\", \"meta\": 1}\n");
  std::string ids = write_file("i.jsonl", "{\"input_ids\": [1, 2, 259]}\n{\"input_ids\": []}\n");
  prepare({text, ids}, InputFormat::kAuto, /*eos=*/true);
  TokenDataset ds = TokenDataset::open(path("out"));
  ASSERT_EQ(ds.num_documents(), 4u);
  EXPECT_EQ(tokenizer_.decode(ds.document(0)), "héllo<eos>");
  EXPECT_EQ(ds.document(2), (std::vector<int32_t>{1, 2, 259, ByteTokenizer::kEos}));
  EXPECT_EQ(ds.document(3), (std::vector<int32_t>{ByteTokenizer::kEos}));
  DatasetSummary summary = summarize(ds);
  EXPECT_EQ(summary.documents, 4u);
  EXPECT_EQ(summary.min_length, 1u);
  EXPECT_EQ(summary.max_length, 7u);  // "héllo" is 6 bytes + eos
  EXPECT_DOUBLE_EQ(summary.mean_length, (7.0 + 2 + 4 + 1) / 4);
  // A forced format overrides the extension.
  prepare({write_file("plain.jsonl", "{\"text\": 1}\n\n{}")}, InputFormat::kText);
  EXPECT_EQ(documents(), (std::vector<std::string>{"{\"text\": 1}", "{}"}));
}

TEST_F(PrepareTest, ErrorsNameFileAndLine) {
  auto error_for = [&](const std::string& name, const std::string& content, InputFormat format = InputFormat::kAuto) {
    std::string file = write_file(name, content);
    return error_of([&] { prepare({file}, format); });
  };
  EXPECT_NE(error_for("x.jsonl", "{\"text\": \"a\"}\n\n{\"txt\": \"b\"}\n").find("x.jsonl:3: key \"text\" missing"),
            std::string::npos);
  EXPECT_NE(error_for("y.jsonl", "{\"text\": \"a\"}\n{\"text\": 5}\n").find("y.jsonl:2: \"text\" is a number"),
            std::string::npos);
  EXPECT_NE(error_for("z.jsonl", "{\"text\": \"a\"\n").find("z.jsonl:1: invalid JSON"), std::string::npos);
  EXPECT_NE(error_for("ids.jsonl", "{\"input_ids\": [1]}\n{\"input_ids\": [3, 260]}\n")
                .find("ids.jsonl:2: input_ids[1] = 260 is outside the vocabulary [0, 260)"),
            std::string::npos);
  EXPECT_NE(error_for("w.jsonl", "[1, 2]\n", InputFormat::kJsonlIds).find("w.jsonl:1: expected a JSON object"),
            std::string::npos);
  EXPECT_NE(error_for("empty.txt", "\n\n  \n").find("no documents found"), std::string::npos);
  EXPECT_NE(error_of([&] { prepare({path("missing.txt")}); }).find("input " + path("missing.txt") + " does not exist"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_input_format("csv"); }).find("unknown input format \"csv\""), std::string::npos);
  // Failed runs never leave a dataset behind.
  EXPECT_FALSE(std::filesystem::exists(path("out/index.bin")));
}

// Ids from a tokenizer hspmd does not know: accepted below --vocab-size, which the dataset records.
TEST_F(PrepareTest, PretokenizedIdsWithAnExplicitVocabularySize) {
  std::string ids = write_file("ids.jsonl", "{\"input_ids\": [1, 31999, 260]}\n\n{\"input_ids\": [70000]}\n");
  PrepareOptions o;
  o.inputs = {ids};
  o.output_dir = path("out");
  o.vocab_size = 70001;
  PrepareStats s = prepare_dataset(tokenizer_, o);
  EXPECT_EQ(s.documents, 2u);
  TokenDataset ds = TokenDataset::open(path("out"));
  EXPECT_EQ(ds.vocab_size(), 70001u);
  EXPECT_EQ(ds.header().token_bytes, 4u);  // above 65536: uint32 tokens
  EXPECT_EQ(ds.tokenizer_id(), "ids");
  EXPECT_EQ(ds.document(0), (std::vector<int32_t>{1, 31999, 260}));
  EXPECT_EQ(ds.document(1), (std::vector<int32_t>{70000}));
}

TEST_F(PrepareTest, PretokenizedIdAtOrAboveVocabularySizeIsNamedWithItsLine) {
  std::string ids = write_file("ids.jsonl", "{\"input_ids\": [5, 6]}\n{\"input_ids\": [7, 32000, 40000]}\n");
  PrepareOptions o;
  o.inputs = {ids};
  o.output_dir = path("out");
  o.vocab_size = 32000;
  EXPECT_EQ(error_of([&] { prepare_dataset(tokenizer_, o); }),
            ids + ":2: input_ids[1] = 32000 is outside the vocabulary [0, 32000) given by --vocab-size");
  EXPECT_FALSE(std::filesystem::exists(path("out/index.bin")));
  // Without --vocab-size the byte tokenizer's 260 applies, and the message says how to go on.
  EXPECT_NE(error_of([&] { prepare({ids}); }).find("give --vocab-size"), std::string::npos);
  // Text is not pre-tokenized: --vocab-size refuses it rather than ignore the tokenizer.
  o.inputs = {write_file("a.txt", "text")};
  EXPECT_NE(error_of([&] { prepare_dataset(tokenizer_, o); }).find("--vocab-size is for pre-tokenized input"),
            std::string::npos);
}

// floor(n F) documents, evenly spread, go to out/val; together the splits hold every document once.
TEST_F(PrepareTest, ValidationFractionHoldsOutEvenlySpreadDocuments) {
  std::string text;
  for (int d = 0; d < 10; ++d) text += "doc " + std::to_string(d) + "\n\n";
  PrepareOptions o;
  o.inputs = {write_file("a.txt", text)};
  o.output_dir = path("out");
  o.val_fraction = 0.25;
  PrepareStats s = prepare_dataset(tokenizer_, o);
  EXPECT_EQ(s.documents, 8u);
  EXPECT_EQ(s.val_documents, 2u);  // floor(10 * 0.25)
  EXPECT_EQ(s.val_tokens, 10u);
  ASSERT_TRUE(TokenDataset::has_validation(path("out")));
  TokenDataset val = TokenDataset::open_validation(path("out"));
  // Document i is held out when floor((i+1)/4) > floor(i/4): i = 3 and 7.
  EXPECT_EQ(tokenizer_.decode(val.document(0)), "doc 3");
  EXPECT_EQ(tokenizer_.decode(val.document(1)), "doc 7");
  EXPECT_EQ(documents(), (std::vector<std::string>{"doc 0", "doc 1", "doc 2", "doc 4", "doc 5", "doc 6", "doc 8",
                                                   "doc 9"}));

  // A later prepare without a validation split removes the old one, which no longer matches.
  o.val_fraction = 0;
  prepare_dataset(tokenizer_, o);
  EXPECT_FALSE(TokenDataset::has_validation(path("out")));
  EXPECT_NE(error_of([&] { TokenDataset::open_validation(path("out")); }).find("--val-fraction"), std::string::npos);
}

TEST_F(PrepareTest, ValidationFractionThatLeavesASplitEmptyIsRefused) {
  PrepareOptions o;
  o.inputs = {write_file("a.txt", "one\n\ntwo\n")};
  o.output_dir = path("out");
  o.val_fraction = 0.4;  // floor(2 * 0.4) = 0 validation documents
  EXPECT_NE(error_of([&] { prepare_dataset(tokenizer_, o); }).find("leaves no validation documents"),
            std::string::npos);
  o.val_fraction = 1.5;
  EXPECT_NE(error_of([&] { prepare_dataset(tokenizer_, o); }).find("outside [0, 1)"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path("out/index.bin")));
}

TEST_F(PrepareTest, ReportsProgress) {
  std::ostringstream progress;
  PrepareOptions o;
  o.inputs = {write_file("p.txt", "a\n\nb\n\nc")};
  o.output_dir = path("out");
  o.progress = &progress;
  o.progress_interval_s = 0;  // every document
  prepare_dataset(tokenizer_, o);
  EXPECT_NE(progress.str().find("prepare: 3 documents, 3 tokens"), std::string::npos) << progress.str();
  EXPECT_NE(progress.str().find("documents/s"), std::string::npos);
}

}  // namespace
}  // namespace hspmd::data
