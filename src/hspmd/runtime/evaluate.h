// Held-out evaluation: the mean token cross-entropy of a model over a dataset, and its perplexity.
//
//   TensorMap w = load_checkpoint("runs/ckpt", config).model;     // or load_hf_weights(...)
//   EvalResult r = evaluate(*load_model("configs/llama-tiny.json"), w, TokenDataset::open("runs/kjv"),
//                           {.seq_len = 256});
//   r.mean_loss;  r.perplexity == exp(r.mean_loss);  r.label_tokens;
//
// The dataset is read once in order (no shuffle), cut into segments of seq_len like the trainer
// does, and packed into batches of batch_tokens; every labelled token counts once, so the mean is
// token-weighted over the whole pass. max_tokens > 0 stops after that many tokens (whole batches).
#pragma once

#include <cstdint>

#include "hspmd/data/token_dataset.h"
#include "hspmd/graph/graph.h"
#include "hspmd/models/model.h"

namespace hspmd::runtime {

struct EvalOptions {
  int64_t seq_len = 256;        // context length of a segment
  int64_t batch_tokens = 8192;  // tokens per forward pass (>= seq_len)
  int64_t max_tokens = 0;       // 0: the whole dataset
};

struct EvalResult {
  double mean_loss = 0.0;
  double perplexity = 0.0;
  int64_t tokens = 0;
  int64_t label_tokens = 0;
  double seconds = 0.0;
};

EvalResult evaluate(const models::Model& model, const graph::TensorMap& weights,
                    const data::TokenDataset& dataset, const EvalOptions& options);

}  // namespace hspmd::runtime
