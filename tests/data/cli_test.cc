// Runs the built `hspmd data ...` (found through HSPMD_BINARY_DIR, which ctest sets) on temp files.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/data_testlib.h"
#include "hspmd/data/token_dataset.h"

namespace hspmd::data {
namespace {

namespace fs = std::filesystem;

struct Result {
  int exit_code;
  std::string out, err;
};

class CliTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    const char* dir = std::getenv("HSPMD_BINARY_DIR");
    if (dir == nullptr) GTEST_SKIP() << "HSPMD_BINARY_DIR is not set (run through ctest)";
    binary_ = (fs::path(dir) / "hspmd").string();
    ASSERT_TRUE(fs::exists(binary_)) << binary_ << " not built (ninja hspmd)";
  }

  Result run(const std::string& args) {
    std::string out = path("stdout"), err = path("stderr");
    int status = std::system((binary_ + " " + args + " >" + out + " 2>" + err).c_str());
    auto slurp = [](const std::string& p) {
      std::stringstream s;
      s << std::ifstream(p).rdbuf();
      return s.str();
    };
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
  }

  std::string binary_;
};

TEST_F(CliTest, PrepareThenInfo) {
  std::string input = write_file("in.txt", "first doc\nline 2\n\nsecond doc\n");
  Result r = run("data prepare --input " + input + " --output " + path("ds") + " --append-eos");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("2 documents, 28 tokens (vocab 260, tokenizer byte)"), std::string::npos) << r.out;
  TokenDataset ds = TokenDataset::open(path("ds"));
  EXPECT_EQ(ds.document(1).back(), 257);  // <eos>

  r = run("data info " + path("ds"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("documents   2 (0 empty)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens      28"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("min 11, median 11, mean 14.0, p90 11, max 17"), std::string::npos) << r.out;
  // The length histogram: documents of 11 and 17 tokens; at --seq-len 8 segments 8+3 and 8+8+1 (skipped).
  EXPECT_NE(r.out.find("[16, 32)"), std::string::npos) << r.out;
  r = run("data info " + path("ds") + " --seq-len 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("segment lengths at --seq-len 8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[8, 16)                    3           24"), std::string::npos) << r.out;
}

TEST_F(CliTest, PrepareWithAHuggingFaceTokenizer) {
  std::string tokenizer = write_file("tokenizer.json", R"({"model": {"type": "BPE",
      "vocab": {"h": 0, "i": 1, "hi": 2, "\u0120": 3}, "merges": ["h i"]},
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
      "added_tokens": [{"id": 4, "content": "<|endoftext|>", "special": true}]})");
  std::string input = write_file("docs.jsonl", "{\"text\": \"hi hi\"}\n{\"text\": \"ih\"}\n");
  Result r = run("data prepare --input " + input + " --output " + path("ds") + " --tokenizer " + tokenizer +
                 " --append-eos");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  TokenDataset ds = TokenDataset::open(path("ds"));
  EXPECT_EQ(ds.vocab_size(), 5u);
  EXPECT_EQ(ds.tokenizer_id().substr(0, 4), "bpe:");
  EXPECT_EQ(ds.document(0), (std::vector<int32_t>{2, 3, 2, 4}));  // "hi" "Ġ" "hi" <|endoftext|>
  EXPECT_EQ(ds.document(1), (std::vector<int32_t>{1, 0, 4}));
}

TEST_F(CliTest, BadInputGivesOneErrorLineAndNonZeroExit) {
  std::string input = write_file("x.jsonl", "{\"text\": \"a\"}\n{\"txt\": \"b\"}\n");
  Result r = run("data prepare --input " + input + " --output " + path("ds"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("x.jsonl:2: key \"text\" missing"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(path("ds/index.bin")));

  r = run("data prepare --input " + input + " --output " + path("ds") + " --format csv");
  EXPECT_NE(r.exit_code, 0);
  r = run("data info " + path("nothing"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;
  r = run("data prepare --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--append-eos"), std::string::npos);
}

TEST_F(CliTest, PrepareIdsOfAnotherTokenizerWithAValidationSplit) {
  std::string ids;
  for (int d = 0; d < 20; ++d) ids += "{\"input_ids\": [" + std::to_string(1000 + d) + ", 50000]}\n";
  std::string input = write_file("ids.jsonl", ids);
  Result r = run("data prepare --input " + input + " --output " + path("ds") + " --vocab-size 50257 --val-fraction 0.1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("18 documents, 36 tokens (vocab 50257, tokenizer ids); validation split " + path("ds") +
                       "/val: 2 documents, 4 tokens"),
            std::string::npos)
      << r.out;
  r = run("data info " + path("ds"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("validation  2 documents, 4 tokens"), std::string::npos) << r.out;

  r = run("data prepare --input " + input + " --output " + path("small") + " --vocab-size 50000");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "hspmd: error: " + input + ":1: input_ids[1] = 50000 is outside the vocabulary [0, 50000) "
                   "given by --vocab-size\n");
  r = run("data prepare --input " + input + " --output " + path("x") + " --vocab-size 9 --tokenizer " + input);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("excludes"), std::string::npos) << r.err;
}

TEST_F(CliTest, PreparesTheBundledCorpus) {
  // tests/data/cli_test.cc -> the repository root.
  fs::path corpus = fs::path(__FILE__).parent_path().parent_path().parent_path() / "data/corpus/kjv-genesis-2kings.txt";
  ASSERT_TRUE(fs::exists(corpus)) << corpus;
  Result r = run("data prepare --input " + corpus.string() + " --output " + path("kjv") + " --append-eos");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  TokenDataset ds = TokenDataset::open(path("kjv"));
  EXPECT_EQ(ds.num_documents(), 338u);  // one per chapter, Genesis 1 .. 2 Kings 25
  EXPECT_EQ(ds.num_tokens(), fs::file_size(corpus) - 2 * 337 - 1 + 338);  // minus separators, plus eos
}

}  // namespace
}  // namespace hspmd::data
