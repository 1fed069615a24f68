#include "hspmd/core/json_file.h"

#include <fstream>
#include <limits>
#include <sstream>

#include "hspmd/core/error.h"

namespace hspmd {

std::string read_text_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  HSPMD_CHECK(in.good()) << "cannot open " << what << " " << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

nlohmann::json parse_json_object(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for numbers like 1E999
    HSPMD_THROW() << source << ": not valid JSON: " << e.what();
  }
  HSPMD_CHECK(j.is_object()) << source << ": expected a JSON object";
  return j;
}

const nlohmann::json& json_member(const nlohmann::json& j, const std::string& key, const std::string& where) {
  HSPMD_CHECK(j.is_object()) << where << ": expected an object";
  auto it = j.find(key);
  HSPMD_CHECK(it != j.end()) << where << ": missing required key \"" << key << "\"";
  return *it;
}

int json_positive_int(const nlohmann::json& j, const std::string& key, const std::string& where) {
  const nlohmann::json& v = json_member(j, key, where);
  HSPMD_CHECK(v.is_number_integer() && v.get<long long>() > 0 &&
              v.get<long long>() <= std::numeric_limits<int>::max())
      << where << "." << key << ": expected a positive integer (at most " << std::numeric_limits<int>::max()
      << "), got " << v.dump();
  return v.get<int>();
}

}  // namespace hspmd
