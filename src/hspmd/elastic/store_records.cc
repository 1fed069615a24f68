#include "hspmd/elastic/store_records.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "hspmd/comm/store_values.h"
#include "hspmd/core/error.h"

namespace hspmd::elastic {

namespace {

std::string quoted(const std::string& text) {
  std::string out;
  for (char c : text.substr(0, 60)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return "'" + out + (text.size() > 60 ? "...'" : "'");
}

nlohmann::json parse_object(const std::string& text, const std::string& key) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  HSPMD_CHECK(j.is_object()) << "store key " << key << " holds " << quoted(text) << ", not a JSON object";
  return j;
}

const nlohmann::json& field(const nlohmann::json& j, const char* name, nlohmann::json::value_t type,
                            const std::string& key) {
  auto it = j.find(name);
  HSPMD_CHECK(it != j.end()) << "store key " << key << " has no field '" << name << "'";
  const bool number_ok = type == nlohmann::json::value_t::number_float && it->is_number();
  HSPMD_CHECK(it->type() == type || number_ok ||
              (type == nlohmann::json::value_t::number_integer && it->is_number_unsigned()))
      << "store key " << key << ": field '" << name << "' has the wrong type (" << it->type_name() << ")";
  return *it;
}

}  // namespace

std::string step_totals_text(const std::vector<double>& totals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g %.17g", totals.at(0), totals.at(1));
  return buf;
}

std::vector<double> parse_step_totals(const std::string& text, const std::string& key) {
  // Exactly two numbers and one space between them; a diverged run may commit inf or nan.
  auto number = [](const std::string& part, double& value) {
    if (part.empty() || part.size() > 40 || std::isspace(static_cast<unsigned char>(part[0]))) return false;
    char* end = nullptr;
    value = std::strtod(part.c_str(), &end);
    return end == part.c_str() + part.size();  // also refuses a NUL inside the part
  };
  const size_t space = text.find(' ');
  std::vector<double> out(2);
  HSPMD_CHECK(space != std::string::npos && number(text.substr(0, space), out[0]) &&
              number(text.substr(space + 1), out[1]))
      << "store key " << key << " holds " << quoted(text) << ", not two numbers";
  return out;
}

PlanRecord parse_plan_record(const std::string& text, const std::string& key) {
  using T = nlohmann::json::value_t;
  const nlohmann::json j = parse_object(text, key);
  PlanRecord record;
  const nlohmann::json& dead = field(j, "dead", T::array, key);
  std::string dead_text;
  for (const auto& r : dead) {
    HSPMD_CHECK(r.is_number_unsigned()) << "store key " << key << ": field 'dead' holds a non-rank " << r.dump();
    dead_text += (dead_text.empty() ? "" : ",") + std::to_string(r.get<uint64_t>());
  }
  if (!dead_text.empty()) record.dead = comm::parse_rank_list(dead_text, key + " (field 'dead')");
  if (j.contains("error")) {
    record.error = field(j, "error", T::string, key).get<std::string>();
    return record;
  }
  record.strategy_text = field(j, "strategy", T::string, key).get<std::string>();
  record.predicted_step_seconds = field(j, "predicted_step_seconds", T::number_float, key).get<double>();
  HSPMD_CHECK(std::isfinite(record.predicted_step_seconds) && record.predicted_step_seconds >= 0)
      << "store key " << key << ": predicted_step_seconds " << record.predicted_step_seconds << " is not a time";
  return record;
}

ProgressRecord parse_progress_record(const std::string& text, const std::string& key) {
  using T = nlohmann::json::value_t;
  const nlohmann::json j = parse_object(text, key);
  ProgressRecord record;
  const nlohmann::json& step = field(j, "step", T::number_integer, key);
  HSPMD_CHECK(step.is_number_unsigned() || step.get<int64_t>() >= 0)
      << "store key " << key << ": field 'step' is negative";
  record.step = step.get<int64_t>();
  HSPMD_CHECK(record.step >= 0) << "store key " << key << ": field 'step' is out of range";
  record.loader_json = field(j, "loader", T::string, key).get<std::string>();
  record.strategy_text = field(j, "strategy", T::string, key).get<std::string>();
  return record;
}

}  // namespace hspmd::elastic
