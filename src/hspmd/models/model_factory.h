// The one place that maps a config.json's "model_type" to the model that reads it, so the CLI picks
// a model without naming any (models/model.h).
//
//   std::shared_ptr<const Model> m = load_model("configs/llama-tiny.json");   // "model_type": "llama"
//
// Known types: "llama" (also when the key is absent: hspmd's own configs predate it), and the
// families built as variants of Llama's decoder: "qwen2", "qwen3", "mistral", "gemma3_text"
// (models/decoder_families.h).
#pragma once

#include <memory>
#include <string>

#include "hspmd/models/model.h"

namespace hspmd::models {

// `text` is a config.json's content; `source` names it in errors. Error naming the source and the
// model_type when no model reads that type, or the key at fault in the model's own config.
std::shared_ptr<const Model> model_from_config_text(const std::string& text, const std::string& source);
// `path` is a config.json, or a directory holding one (a save_pretrained directory).
std::shared_ptr<const Model> load_model(const std::string& path);

}  // namespace hspmd::models
