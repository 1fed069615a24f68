// Reading the JSON inputs users write (configs, plans, strategies, cluster specs) with errors that
// name the file and the key at fault:
//
//   nlohmann::json j = parse_json_object(read_text_file(path, "strategy file"), path);
//   int n = json_positive_int(j, "micro_batches", "s.json: pipelines[1]");
//     -> "s.json: pipelines[1].micro_batches: expected a positive integer, got -3"
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace hspmd {

// The whole file; Error "cannot open <what> <path>" when it cannot be read.
std::string read_text_file(const std::string& path, const std::string& what);
// Parses text that must be a JSON object; `source` names it in errors.
nlohmann::json parse_json_object(const std::string& text, const std::string& source);
// j[key], or Error "<where>: missing required key "<key>"" (also when j is not an object).
const nlohmann::json& json_member(const nlohmann::json& j, const std::string& key, const std::string& where);
// j[key] as an integer > 0, or Error naming where.key and the value found.
int json_positive_int(const nlohmann::json& j, const std::string& key, const std::string& where);

}  // namespace hspmd
