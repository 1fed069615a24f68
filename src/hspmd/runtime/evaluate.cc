#include "hspmd/runtime/evaluate.h"

#include <chrono>
#include <cmath>

#include "hspmd/core/elapsed.h"
#include "hspmd/core/error.h"
#include "hspmd/data/loader.h"
#include "hspmd/graph/executor.h"
#include "hspmd/models/llama.h"
#include "hspmd/runtime/trainer.h"

namespace hspmd::runtime {

EvalResult evaluate(const models::LlamaConfig& config, const graph::TensorMap& weights,
                    const data::TokenDataset& dataset, const EvalOptions& options) {
  HSPMD_CHECK(options.seq_len >= 2 && options.seq_len <= config.max_position_embeddings)
      << "eval seq_len " << options.seq_len << " must be in [2, max_position_embeddings = "
      << config.max_position_embeddings << "]";
  HSPMD_CHECK(options.batch_tokens >= options.seq_len)
      << "eval batch_tokens " << options.batch_tokens << " must be >= seq_len " << options.seq_len;
  check_dataset_fits(dataset, config);
  auto start = std::chrono::steady_clock::now();
  models::LlamaModel model = models::build_llama(config, {.with_backward = false});
  graph::Executor executor(model.graph, {model.loss});
  data::Loader loader(dataset, {.seq_len = options.seq_len, .global_batch_tokens = options.batch_tokens,
                                .shuffle = false});

  // One pass in dataset order: the loader would wrap into a second epoch, so count segments.
  EvalResult r;
  double loss_sum = 0.0;
  uint64_t segments_left = loader.segments_per_epoch();
  while (segments_left > 0 && (options.max_tokens <= 0 || r.tokens < options.max_tokens)) {
    std::vector<data::Segment> segments = loader.next();
    if (segments.size() > segments_left) segments.resize(segments_left);
    segments_left -= segments.size();
    data::Batch batch = data::pack(segments, {.seq_len = options.seq_len});
    const int64_t labels = batch.num_label_tokens();
    // loss_scale = 1 / labels gives this batch's mean; weighting it by labels sums token losses.
    Tensor loss = executor.run(llama_feeds(batch, labels), weights)[0];
    loss_sum += loss.element_as_double(0) * static_cast<double>(labels);
    r.tokens += batch.num_tokens();
    r.label_tokens += labels;
  }
  HSPMD_CHECK(r.label_tokens > 0) << "dataset " << dataset.dir() << " has no labelled tokens to evaluate";
  r.mean_loss = loss_sum / static_cast<double>(r.label_tokens);
  r.perplexity = std::exp(r.mean_loss);
  r.seconds = seconds_since(start);
  return r;
}

}  // namespace hspmd::runtime
