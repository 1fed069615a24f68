#include "hspmd/models/model_factory.h"

#include <filesystem>

#include "hspmd/core/error.h"
#include "hspmd/core/json_file.h"
#include "hspmd/models/decoder_families.h"
#include "hspmd/models/gemma3_config.h"
#include "hspmd/models/llama_config.h"
#include "hspmd/models/llama_model.h"

namespace hspmd::models {

std::shared_ptr<const Model> model_from_config_text(const std::string& text, const std::string& source) {
  const nlohmann::json j = parse_json_object(text, source);
  const nlohmann::json type = j.value("model_type", nlohmann::json("llama"));
  HSPMD_CHECK(type.is_string()) << source << ": \"model_type\" must be a string, got " << type.dump();
  const std::string name = type.get<std::string>();
  if (name == "gemma3") refuse_gemma3_multimodal(ConfigReader(j, source));  // says what to give instead
  // Llama and the families built as variants of its decoder (models/decoder_families.h).
  if (find_decoder_family(name)) return llama(LlamaConfig::from_json_text(text, source));
  HSPMD_THROW() << source << ": \"model_type\" is \"" << name << "\", which hspmd does not build (known: "
                << known_decoder_model_types() << ")";
}

std::shared_ptr<const Model> load_model(const std::string& path) {
  const std::string file = std::filesystem::is_directory(path) ? (std::filesystem::path(path) / "config.json").string()
                                                               : path;
  return model_from_config_text(read_text_file(file, "model config"), file);
}

}  // namespace hspmd::models
