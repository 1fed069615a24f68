// Reading a Hugging Face config.json key by key, as every model family's parser does
// (models/decoder_families.h): each key is read, known not to change the model, or refused with an
// error naming the file, the key and the value, so that a config hspmd would compute differently
// from transformers never loads.
//
//   ConfigReader r(parse_json_object(text, "hf/config.json"), "hf/config.json");
//   r.expect("hidden_act", "silu", "the MLP is silu(gate) * up");   // absent, null or "silu"
//   r.require("hidden_size", c.hidden_size);                         // present, an integer in range
//   r.read("rms_norm_eps", c.rms_norm_eps);                          // optional
//   r.refuse_unknown({"hidden_size", "hidden_act", ...});            // plus keys_without_effect()
#pragma once

#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "hspmd/core/error.h"

namespace hspmd::models {

// Keys a Hugging Face config may carry that do not change what a model computes in training or
// evaluation: token ids, generation settings, bookkeeping. Accepted and not used by every family.
const std::set<std::string>& keys_without_effect();

class ConfigReader {
 public:
  ConfigReader(nlohmann::json config, std::string source) : j_(std::move(config)), source_(std::move(source)) {}

  const nlohmann::json& json() const { return j_; }
  const std::string& source() const { return source_; }
  // Present and not null.
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  // j[key] into `out` when present and not null; Error naming the key when it has the wrong type
  // (an integer key takes integers in its type's range only).
  template <typename T>
  void read(const std::string& key, T& out) const;
  // The same, and Error when the key is absent or null.
  template <typename T>
  void require(const std::string& key, T& out) const {
    HSPMD_CHECK(has(key)) << source_ << ": missing required key \"" << key << "\"";
    read(key, out);
  }
  // Error unless `key` is absent, null or `expected` (the value under which hspmd computes the
  // model); `why` says what another value would mean.
  void expect(const std::string& key, const nlohmann::json& expected, const std::string& why) const;
  // Error listing every key neither in `read` nor in keys_without_effect().
  void refuse_unknown(const std::set<std::string>& read) const;
  // The dtype "torch_dtype" (transformers < 5) or "dtype" says the weights are stored in, "float32"
  // when neither says (or "auto"); Error when they disagree or name float16.
  std::string weights_dtype() const;

 private:
  nlohmann::json j_;
  std::string source_;
};

template <typename T>
void ConfigReader::read(const std::string& key, T& out) const {
  if (!has(key)) return;
  const nlohmann::json& v = j_.at(key);
  // nlohmann converts a float to an integer type without a range check (undefined behaviour for
  // 2.7e102, found by fuzz/llama_config_fuzz.cc), and 1.5 would silently become 1: integer keys
  // take integers in the type's range only.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const bool in_range = !v.is_number()          ? true  // the wrong type: said below
                          : v.is_number_unsigned() ? std::in_range<T>(v.template get<uint64_t>())
                          : v.is_number_integer()  ? std::in_range<T>(v.template get<int64_t>())
                                                   : false;
    HSPMD_CHECK(in_range) << source_ << ": key \"" << key << "\" must be an integer from "
                          << +std::numeric_limits<T>::min() << " to " << +std::numeric_limits<T>::max() << ", got "
                          << v.dump();
  }
  try {
    out = v.get<T>();
  } catch (const nlohmann::json::exception&) {
    HSPMD_THROW() << source_ << ": key \"" << key << "\" has the wrong type (" << v.type_name() << ")";
  }
}

}  // namespace hspmd::models
