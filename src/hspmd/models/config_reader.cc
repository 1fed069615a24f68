#include "hspmd/models/config_reader.h"

#include <vector>

namespace hspmd::models {

const std::set<std::string>& keys_without_effect() {
  static const std::set<std::string> keys{
      // bookkeeping
      "_name_or_path", "transformers_version", "_attn_implementation_autoset", "attn_implementation",
      "output_attentions", "output_hidden_states", "return_dict", "torchscript", "use_cache",
      "tokenizer_class", "prefix", "task_specific_params", "finetuning_task", "id2label", "label2id",
      "num_labels", "problem_type", "chunk_size_feed_forward", "tf_legacy_loss", "use_bfloat16",
      // token ids (pad_token_id too: the families read it, models/decoder_config_keys.cc, and accept
      // it here so that configs of models that do not are still read)
      "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
      // generation settings (inference only)
      "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
      "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
      "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
      "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
      "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
      "suppress_tokens", "begin_suppress_tokens",
      // initialization of a model trained from scratch (hspmd has its own --init-std); weights
      // loaded from a checkpoint are unaffected
      "initializer_range"};
  return keys;
}

void ConfigReader::expect(const std::string& key, const nlohmann::json& expected, const std::string& why) const {
  if (!has(key)) return;
  const nlohmann::json& v = j_.at(key);
  const bool same = v.is_number() && expected.is_number() ? v.get<double>() == expected.get<double>() : v == expected;
  HSPMD_CHECK(same) << source_ << ": \"" << key << "\" is " << v.dump() << ", which hspmd does not compute (" << why
                    << "; supported: " << expected.dump() << ")";
}

void ConfigReader::refuse_unknown(const std::set<std::string>& read) const {
  std::vector<std::string> unknown;
  for (const auto& [key, value] : j_.items()) {
    if (!read.count(key) && !keys_without_effect().count(key)) unknown.push_back("\"" + key + "\"");
  }
  if (unknown.empty()) return;
  std::string list;
  for (const std::string& k : unknown) list += (list.empty() ? "" : ", ") + k;
  HSPMD_THROW() << source_ << ": unknown key" << (unknown.size() > 1 ? "s " : " ") << list
                << ": hspmd cannot tell whether " << (unknown.size() > 1 ? "they change" : "it changes")
                << " the model, so it refuses the config (docs/model-config.md lists the keys it reads)";
}

std::string ConfigReader::weights_dtype() const {
  // transformers >= 5 writes "dtype", older versions "torch_dtype"; "auto" leaves the file's dtype.
  std::string torch_dtype, dtype;
  read("torch_dtype", torch_dtype);
  read("dtype", dtype);
  HSPMD_CHECK(torch_dtype.empty() || dtype.empty() || torch_dtype == dtype)
      << source_ << ": \"torch_dtype\" is \"" << torch_dtype << "\" but \"dtype\" is \"" << dtype
      << "\"; they must agree";
  const std::string& stored = dtype.empty() ? torch_dtype : dtype;
  HSPMD_CHECK(stored != "float16") << source_ << ": \"" << (dtype.empty() ? "torch_dtype" : "dtype")
                                   << "\" is \"float16\": hspmd does not read float16 weights (supported: "
                                      "float32, bfloat16, float64)";
  return stored.empty() || stored == "auto" ? "float32" : stored;
}

}  // namespace hspmd::models
