// The config.json keys every decoder family (models/decoder_families.h) writes alike: the sizes,
// heads, norm epsilon, position limit, embedding tying, weight dtype and the keys that must keep
// their decoder-only values. Each family's parser reads these here and its own keys itself, so a
// key means the same in every family.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hspmd/models/config_reader.h"
#include "hspmd/models/llama_config.h"

namespace hspmd::models {

// The keys read_shared_decoder_keys() reads or checks.
const std::set<std::string>& shared_decoder_keys();

// Reads the shared keys into `c`, whose fields hold the family's defaults for absent keys, and
// refuses values hspmd does not compute: "architectures" other than [architecture] (another model
// head), attention dropout, encoder-decoder settings, pruned heads. A "head_dim" equal to
// hidden_size / num_attention_heads is stored as 0 (no explicit head width).
void read_shared_decoder_keys(const ConfigReader& r, const std::string& architecture, LlamaConfig& c);

// The shared keys of `c` in transformers >= 5 form, "architectures" [architecture].
nlohmann::json shared_decoder_json(const LlamaConfig& c, const std::string& architecture);

// Error naming "hidden_act" (or `key`) unless it is silu (or swish, the same function).
void expect_silu(const ConfigReader& r, const std::string& key = "hidden_act");

// transformers' "layer_types" of a config with `layers` layers: per layer, whether it is a
// "sliding_attention" layer ("full_attention" the other value). Empty when the key is absent;
// Error naming the key for another length or another value.
std::vector<bool> read_sliding_layers(const ConfigReader& r, int64_t layers);

}  // namespace hspmd::models
