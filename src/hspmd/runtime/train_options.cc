#include "hspmd/runtime/train_options.h"

#include <algorithm>
#include <numeric>

#include "hspmd/core/error.h"

namespace hspmd::runtime {
namespace {

// Reads j[key] into field when present; errors name the key.
template <typename T>
void read_field(const nlohmann::json& j, const char* key, T& field) {
  if (!j.contains(key)) return;
  try {
    field = j.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    HSPMD_THROW() << "trainer option \"" << key << "\": " << e.what();
  }
}

}  // namespace

void validate_options(const TrainerOptions& o, const models::Model& model) {
  HSPMD_CHECK(o.steps >= 1) << "steps must be >= 1, got " << o.steps;
  HSPMD_CHECK(o.seq_len >= 2) << "seq_len must be >= 2, got " << o.seq_len;
  HSPMD_CHECK(o.seq_len <= model.max_sequence_length())
      << "seq_len " << o.seq_len << " exceeds the model's max_position_embeddings " << model.max_sequence_length();
  HSPMD_CHECK(o.global_batch_tokens >= o.seq_len)
      << "global_batch_tokens " << o.global_batch_tokens << " must be >= seq_len " << o.seq_len;
  HSPMD_CHECK(o.lr > 0 && o.min_lr >= 0 && o.min_lr <= o.lr)
      << "learning rates must satisfy 0 <= min_lr <= lr and lr > 0, got lr " << o.lr << ", min_lr " << o.min_lr;
  HSPMD_CHECK(o.warmup >= 0) << "warmup must be >= 0, got " << o.warmup;
  HSPMD_CHECK(o.decay_steps >= 0) << "decay_steps must be >= 0, got " << o.decay_steps;
  HSPMD_CHECK(o.weight_decay >= 0) << "weight_decay must be >= 0, got " << o.weight_decay;
  HSPMD_CHECK(o.max_grad_norm >= 0) << "max_grad_norm (clip) must be >= 0, got " << o.max_grad_norm;
  HSPMD_CHECK(o.threads >= 0) << "threads must be >= 0, got " << o.threads;
  HSPMD_CHECK(o.precision == DType::kFloat32 || o.precision == DType::kBFloat16)
      << "precision must be float32 (fp32) or bfloat16 (bf16), got " << dtype_name(o.precision);
}

void check_dataset_fits(const data::TokenDataset& dataset, const models::Model& model) {
  const auto vocab = static_cast<uint32_t>(model.vocab_size());
  if (dataset.vocab_size() <= vocab) return;
  const auto bad = dataset.first_token_at_least(vocab);
  HSPMD_CHECK(!bad) << "dataset " << dataset.dir() << ": token id " << bad->id << " (document " << bad->doc
                    << ", position " << bad->position << ") is outside the model's vocabulary [0, " << vocab
                    << "); the dataset was prepared for vocab_size " << dataset.vocab_size() << " (tokenizer '"
                    << dataset.tokenizer_id() << "')";
}

graph::OptimizerOptions optimizer_options(const TrainerOptions& o) {
  int64_t total = o.decay_steps > 0 ? o.decay_steps : o.steps;
  graph::OptimizerOptions opt;
  opt.adamw = {.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay};
  opt.max_grad_norm = o.max_grad_norm;
  opt.schedule = graph::LrSchedule::warmup_cosine(
      {.peak_lr = o.lr, .min_lr = o.min_lr, .warmup_steps = std::min(o.warmup, total), .total_steps = total});
  return opt;
}

nlohmann::json TrainerOptions::to_json() const {
  return {{"steps", steps},   {"seq_len", seq_len},         {"global_batch_tokens", global_batch_tokens},
          {"lr", lr},         {"warmup", warmup},           {"min_lr", min_lr},
          {"decay_steps", decay_steps}, {"weight_decay", weight_decay}, {"beta1", beta1},
          {"beta2", beta2},   {"eps", eps},                 {"max_grad_norm", max_grad_norm},
          {"seed", seed},     {"recompute", recompute},     {"threads", threads},
          {"precision", std::string(dtype_name(precision))}};
}

TrainerOptions TrainerOptions::from_json(const nlohmann::json& j) { return from_json(j, TrainerOptions{}); }

TrainerOptions TrainerOptions::from_json(const nlohmann::json& j, const TrainerOptions& defaults) {
  HSPMD_CHECK(j.is_object()) << "trainer options must be a JSON object, got " << j.dump();
  TrainerOptions o = defaults;
  read_field(j, "steps", o.steps);
  read_field(j, "seq_len", o.seq_len);
  read_field(j, "global_batch_tokens", o.global_batch_tokens);
  read_field(j, "lr", o.lr);
  read_field(j, "warmup", o.warmup);
  read_field(j, "min_lr", o.min_lr);
  read_field(j, "decay_steps", o.decay_steps);
  read_field(j, "weight_decay", o.weight_decay);
  read_field(j, "beta1", o.beta1);
  read_field(j, "beta2", o.beta2);
  read_field(j, "eps", o.eps);
  read_field(j, "max_grad_norm", o.max_grad_norm);
  read_field(j, "seed", o.seed);
  read_field(j, "recompute", o.recompute);
  read_field(j, "threads", o.threads);
  if (j.contains("precision")) {
    std::string name;
    read_field(j, "precision", name);
    try {
      o.precision = parse_dtype(name);
    } catch (const Error& e) {
      HSPMD_THROW() << "trainer option \"precision\": " << e.what();
    }
  }
  return o;
}

nlohmann::json StepMetrics::to_json() const {
  nlohmann::json out = {{"step", step},
          {"loss", loss},
          {"lr", lr},
          {"grad_norm", grad_norm},
          {"tokens", tokens},
          {"label_tokens", label_tokens},
          {"step_seconds", step_seconds},
          {"tokens_per_second", tokens_per_second},
          {"peak_bytes", peak_bytes}};
  if (bf16_switch) out["bf16_switch"] = bf16_switch->to_json();
  return out;
}

}  // namespace hspmd::runtime
