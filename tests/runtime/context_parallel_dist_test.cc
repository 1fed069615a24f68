// Context parallelism against the single-process oracle (docs/context-parallelism.md): stages whose
// tokens are split over CP ranks (zigzag chunks of every packed row of documents of different
// lengths, K/V all-gathered per layer, their gradients reduce-scattered, weight gradients summed over
// CP) train like one process: every step's loss and gradient norm and the final weights agree
// (relative 1e-5, float32). Ranks run as threads of this process over Gloo (dist_run_testlib.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "hspmd/data/loader.h"
#include "hspmd/data/packing.h"
#include "hspmd/data/prepare.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/data/tokenizer.h"
#include "runtime/dist_run_testlib.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using testing::expect_matches_single_process;
using testing::run;
using testing::strategy;

constexpr int64_t kSteps = 3;

// Weights after 3 steps on the mixed-length data: every tensor within 1e-5 of one process but
// model.layers.1.mlp.down_proj.weight under CP 2 x TP 2: 1.1e-5 with oneDNN's AVX2 GEMM kernels,
// 2.4e-5 with its AVX-512 ones (2.7e-6 under plain DP 2 on the same data). AdamW's first steps
// move an element by about lr whatever the size of its gradient, so the sign of a near-zero
// gradient sum, which depends on the summation order (of the GEMM kernel too), shows in the
// weights. Losses and gradient norms stay within 1e-5.
constexpr double kMixedLengthWeights = 4e-5;

// Short documents of many lengths (1 to ~80 bytes; rows of seq_len 64 pack several of them, the
// longer ones are cut into chunks): verses of the bundled corpus cut after a varying word count.
std::string mixed_length_dataset() {
  static const std::string dir = [] {
    const std::filesystem::path root = std::filesystem::temp_directory_path() /
                                       ("hspmd_cp_test." + std::to_string(::getpid()));
    std::filesystem::create_directories(root);
    std::ifstream in(testing::corpus_file());
    std::ofstream text(root / "docs.txt");
    std::string line;
    for (int k = 0; k < 3000 && std::getline(in, line);) {
      std::istringstream words(line);
      std::string word, doc;
      for (int n = 0; n < 1 + (k * 7) % 15 && words >> word; ++n) doc += (n ? " " : "") + word;
      if (doc.empty()) continue;
      text << doc << "\n\n";
      ++k;
    }
    text.close();
    data::PrepareOptions o;
    o.inputs = {(root / "docs.txt").string()};
    o.output_dir = (root / "data").string();
    o.append_eos = true;
    data::prepare_dataset(data::ByteTokenizer(), o);
    static const std::string to_remove = root.string();
    std::atexit([] { std::filesystem::remove_all(to_remove); });
    return o.output_dir;
  }();
  return dir;
}

TEST(ContextParallel, Cp2) {
  sharding::Strategy st = strategy(R"({"name": "cp2", "pipelines": [
    {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3", "cp": 2}]}]})");
  expect_matches_single_process(run(st, testing::dist_options(kSteps)), kSteps);
  expect_matches_single_process(run(st, testing::dist_options(kSteps), {.dataset = mixed_length_dataset()}), kSteps,
                                1, false, mixed_length_dataset(), kMixedLengthWeights);
}

TEST(ContextParallel, Cp2Tp2) {
  sharding::Strategy st = strategy(R"({"name": "cp2-tp2", "pipelines": [
    {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0-3", "layers": "0-3", "tp": 2, "cp": 2}]}]})");
  expect_matches_single_process(run(st, testing::dist_options(kSteps)), kSteps);
  expect_matches_single_process(run(st, testing::dist_options(kSteps), {.dataset = mixed_length_dataset()}), kSteps,
                                1, false, mixed_length_dataset(), kMixedLengthWeights);
}

// The fused head (lm_head_loss) splits its tokens over CP and its vocabulary over TP: each CP rank's
// loss is its tokens' partial sum, normalized across the TP ranks that share the rows.
TEST(ContextParallel, Cp2Tp2FusedHead) {
  sharding::Strategy st = strategy(R"({"name": "cp2-tp2", "pipelines": [
    {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0-3", "layers": "0-3", "tp": 2, "cp": 2}]}]})");
  const auto fused = [](int, DistOptions& o) { o.fused_head_loss = true; };
  expect_matches_single_process(run(st, testing::dist_options(kSteps), {.configure = fused}), kSteps);
}

// The mixed-length batches really hold several documents per row, of different lengths.
TEST(ContextParallel, MixedLengthDatasetPacksDocumentsOfDifferentLengths) {
  const data::TokenDataset ds = data::TokenDataset::open(mixed_length_dataset());
  data::Loader loader(ds, {.seq_len = 64, .global_batch_tokens = 512, .seed = 3});
  const data::Batch b = data::pack(loader.next(), {.seq_len = 64});
  std::set<int64_t> lengths;
  for (size_t s = 0; s + 1 < b.cu_seqlens.size(); ++s) lengths.insert(b.cu_seqlens[s + 1] - b.cu_seqlens[s]);
  EXPECT_GT(b.num_sequences(), 2 * b.num_rows());
  EXPECT_GT(lengths.size(), 5u);
}

// Tied embeddings: the head's gradient (partial over CP) adds to the lookup's on the same stage.
TEST(ContextParallel, Cp2TiedEmbeddings) {
  sharding::Strategy st = strategy(R"({"name": "cp2-tp2-tied", "pipelines": [
    {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0-3", "layers": "0-3", "tp": 2, "cp": 2}]}]})");
  expect_matches_single_process(run(st, testing::dist_options(kSteps), {.tied = true}), kSteps, 1, /*tied=*/true);
}

// CP in a pipeline of two stages next to a plain data-parallel replica: the hand-over between CP
// stages carries each CP rank's own tokens, and the gradients meet across both pipelines.
TEST(ContextParallel, Cp2PipelineBesideAPlainReplica) {
  sharding::Strategy st = strategy(R"({"name": "cp2-pp2+dp", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2,
     "stages": [{"ranks": "0-1", "layers": "0-1", "cp": 2}, {"ranks": "2-3", "layers": "2-3", "cp": 2}]},
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "4", "layers": "0-3"}]}]})");
  expect_matches_single_process(run(st, testing::dist_options(kSteps)), kSteps);
}

// A DS union whose members differ: a CP 2 x TP 2 stage next to a one-rank pipeline. The embedding
// gradient, partial{[0-3](P:2,D:2);[4]()} -> dup{[0-3](D:2,S0:2);[4]()}, is reduced inside the
// CP x TP subgroup first (slice, then all-reduce over CP), then across the two pipelines.
TEST(ContextParallel, Cp2Tp2BesideAOneRankPipeline) {
  const sharding::Strategy st = sharding::Strategy::from_file(
      (testing::source_dir() / "examples/strategies/local-cp2-tp2-beside-one.json").string());
  expect_matches_single_process(run(st, testing::dist_options(kSteps)), kSteps);
  expect_matches_single_process(run(st, testing::dist_options(kSteps), {.tied = true}), kSteps, 1, /*tied=*/true);
}

// Tied embeddings with CP over two stages: the head's gradient, partial over the last stage's CP
// ranks, goes summand by summand to the first stage's CP ranks and adds to the lookup's gradient.
TEST(ContextParallel, Cp2TiedEmbeddingsOverTwoStages) {
  sharding::Strategy st = strategy(R"({"name": "cp2-pp2-tied+dp", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2,
     "stages": [{"ranks": "0-1", "layers": "0-1", "cp": 2}, {"ranks": "2-5", "layers": "2-3", "tp": 2, "cp": 2}]},
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "6", "layers": "0-3"}]}]})");
  expect_matches_single_process(run(st, testing::dist_options(kSteps), {.tied = true}), kSteps, 1, /*tied=*/true);
}

// Stages of different CP degrees in one pipeline: the pipeline is fed in the zigzag order of the
// least common multiple of its stages' degrees, each stage splits it evenly over its CP ranks, and
// the hand-over between degrees is a BSR of the tokens (its gradient one back). Two steps each.
constexpr int64_t kMixedCpSteps = 2;

// CP 2, then one rank; on documents of many lengths packed several to a row; untied, and tied (the
// head's gradient, one summand, becomes the first stage's CP rank 0's; CP rank 1 adds zeros).
TEST(ContextParallel, Cp2StageThenOneRankStage) {
  sharding::Strategy st = strategy(R"({"name": "cp2-then-1", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2,
     "stages": [{"ranks": "0-1", "layers": "0-1", "cp": 2}, {"ranks": "2", "layers": "2-3"}]}]})");
  for (const bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const testing::DistRun r =
        run(st, testing::dist_options(kMixedCpSteps), {.tied = tied, .dataset = mixed_length_dataset()});
    expect_matches_single_process(r, kMixedCpSteps, 1, tied, mixed_length_dataset(), kMixedLengthWeights);
  }
}

// One rank, then CP 2 x TP 2, tied: the head's gradient, partial over the last stage's CP ranks,
// is all-reduced there and sent to the first stage, where the lookup's gradient is whole.
TEST(ContextParallel, OneRankStageThenCp2Tp2StageTied) {
  sharding::Strategy st = strategy(R"({"name": "1-then-cp2-tp2-tied", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2,
     "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1-4", "layers": "2-3", "tp": 2, "cp": 2}]}]})");
  expect_matches_single_process(run(st, testing::dist_options(kMixedCpSteps), {.tied = true}), kMixedCpSteps, 1,
                                /*tied=*/true);
}

// CP 2, then CP 3: fed in the order of CP 6, which neither stage has.
TEST(ContextParallel, Cp2StageThenCp3Stage) {
  sharding::Strategy st = strategy(R"({"name": "cp2-then-cp3", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2,
     "stages": [{"ranks": "0-1", "layers": "0-2", "cp": 2}, {"ranks": "2-4", "layers": "3", "cp": 3}]}]})");
  expect_matches_single_process(run(st, testing::dist_options(kMixedCpSteps)), kMixedCpSteps);
}

// Graph switching into and out of CP: weights and Adam moments move like any other layout change.
TEST(ContextParallel, SwitchesFromTensorParallelToCpAndBack) {
  sharding::Strategy tp = strategy(R"({"name": "tp2", "pipelines": [
    {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})");
  sharding::Strategy cp = strategy(R"({"name": "cp2-tp2", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0-3", "layers": "0-3", "tp": 2, "cp": 2}]}]})");
  expect_matches_single_process(testing::run_phases({{1, tp}, {2, cp}, {4, tp}}, testing::dist_options(4)), 4);
}

}  // namespace
}  // namespace hspmd::runtime
