#include "runtime/runtime_testlib.h"

#include <unistd.h>

#include <mutex>

#include "hspmd/core/error.h"
#include "hspmd/data/prepare.h"
#include "hspmd/data/tokenizer.h"

namespace hspmd::runtime::testing {

namespace fs = std::filesystem;

namespace {
fs::path temp_root() {
  return fs::temp_directory_path() / ("hspmd_runtime_test." + std::to_string(::getpid()));
}
}  // namespace

void TempDirTest::SetUp() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  dir_ = temp_root() / (std::string(info->test_suite_name()) + "." + info->name());
  fs::remove_all(dir_);
  fs::create_directories(dir_);
}

void TempDirTest::TearDown() { fs::remove_all(dir_); }

fs::path source_dir() {
  // This file is tests/runtime/runtime_testlib.cc; CMake compiles it by absolute path.
  return fs::path(__FILE__).parent_path().parent_path().parent_path();
}

std::string corpus_file() { return (source_dir() / "data/corpus/kjv-genesis-2kings.txt").string(); }

std::string corpus_dataset() {
  static std::once_flag once;
  static std::string dir;
  std::call_once(once, [] {
    dir = (temp_root() / "kjv").string();
    data::PrepareOptions o;
    o.inputs = {corpus_file()};
    o.output_dir = dir;
    o.append_eos = true;
    data::prepare_dataset(data::ByteTokenizer(), o);
    // Removed with the process's other temp files when the process exits.
    std::atexit([] { fs::remove_all(temp_root()); });
  });
  return dir;
}

models::LlamaConfig tiny_config() {
  models::LlamaConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.vocab_size = 260;
  c.max_position_embeddings = 128;
  return c;
}

TrainerOptions tiny_options(int64_t steps) {
  TrainerOptions o;
  o.steps = steps;
  o.seq_len = 64;
  o.global_batch_tokens = 512;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  o.warmup = 5;
  o.seed = 3;
  o.threads = 1;  // tiny matrices: threads only add overhead (and the test machine is shared)
  return o;
}

}  // namespace hspmd::runtime::testing
