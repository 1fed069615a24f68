#include "hspmd/sharding/strategy.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <nlohmann/json.hpp>

#include "hspmd/core/error.h"
#include "hspmd/core/json_file.h"
#include "hspmd/core/nearest_name.h"
#include "hspmd/sharding/device_group.h"

namespace hspmd::sharding {

namespace {

using Json = nlohmann::json;

std::string stage_key(size_t p, size_t s) {
  return "pipelines[" + std::to_string(p) + "].stages[" + std::to_string(s) + "]";
}

// The keys each level of a strategy file may have. Anything else is refused rather than ignored: a
// misspelled "zero1" or "tp" would otherwise train another strategy than the one written.
const std::vector<std::string>& strategy_keys() {
  static const std::vector<std::string> keys = {"name", "comment", "zero", "zero1", "recompute", "pipelines"};
  return keys;
}
const std::vector<std::string>& pipeline_keys() {
  static const std::vector<std::string> keys = {"micro_batch_size", "num_micro_batches", "stages", "comment"};
  return keys;
}
const std::vector<std::string>& stage_keys() {
  static const std::vector<std::string> keys = {"ranks", "layers", "tp", "cp", "sequence_parallel", "comment"};
  return keys;
}

void check_known_keys(const Json& j, const std::vector<std::string>& known, const std::string& where) {
  HSPMD_CHECK(j.is_object()) << where << ": expected a JSON object, got " << j.dump();
  for (const auto& [key, value] : j.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const std::string near = nearest_name(key, known);
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    HSPMD_THROW() << where << ": unknown key \"" << key << "\""
                  << (near.empty() ? "" : " (did you mean \"" + near + "\"?)") << "; the keys here are " << list;
  }
}

bool optional_bool(const Json& j, const std::string& key, const std::string& where) {
  if (!j.contains(key)) return false;
  HSPMD_CHECK(j[key].is_boolean()) << where << ": \"" << key << "\" must be true or false";
  return j[key].get<bool>();
}

// "zero": 0|1|2|3, or the older "zero1": true|false (1|0); both present must name the same stage.
int parse_zero_stage(const Json& j, const std::string& where) {
  int stage = 0;
  if (j.contains("zero")) {
    const Json& v = j["zero"];
    HSPMD_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= 3)
        << where << ": \"zero\" must be 0, 1, 2 or 3 (the ZeRO stage), got " << v.dump();
    stage = v.get<int>();
  }
  if (j.contains("zero1")) {
    const int old = optional_bool(j, "zero1", where) ? 1 : 0;
    HSPMD_CHECK(!j.contains("zero") || old == stage)
        << where << ": \"zero1\": " << (old ? "true" : "false") << " and \"zero\": " << stage
        << " disagree; give only \"zero\" (\"zero1\": true is \"zero\": 1, false is \"zero\": 0)";
    stage = old;
  }
  return stage;
}

std::vector<int> parse_ranks(const Json& v, const std::string& where) {
  try {
    if (v.is_string()) {
      std::string text = v.get<std::string>();
      text.insert(text.begin(), '[');
      text.push_back(']');
      return DeviceGroup::parse(text).devices();
    }
    HSPMD_CHECK(v.is_array()) << "expected a string like \"0-3\" or an array of ints, got " << v.dump();
    std::vector<int> ranks;
    for (const Json& r : v) {
      HSPMD_CHECK(r.is_number_integer()) << "expected an int rank, got " << r.dump();
      ranks.push_back(r.get<int>());
    }
    return DeviceGroup(ranks).devices();
  } catch (const Error& e) {
    HSPMD_THROW() << where << ": " << e.what();
  }
}

void parse_layers(const Json& v, const std::string& where, StageSpec& stage) {
  if (v.is_number_integer()) {
    stage.first_layer = stage.last_layer = v.get<int>();
  } else {
    HSPMD_CHECK(v.is_string()) << where << ": expected \"a-b\" or a layer index, got " << v.dump();
    const std::string s = v.get<std::string>();
    size_t dash = s.find('-', 1);
    try {
      size_t used = 0;
      stage.first_layer = std::stoi(s.substr(0, dash), &used);
      HSPMD_CHECK(used == (dash == std::string::npos ? s.size() : dash)) << "trailing text";
      stage.last_layer = stage.first_layer;
      if (dash != std::string::npos) {
        stage.last_layer = std::stoi(s.substr(dash + 1), &used);
        HSPMD_CHECK(used == s.size() - dash - 1) << "trailing text";
      }
    } catch (const std::exception&) {
      HSPMD_THROW() << where << ": cannot parse layer range \"" << s << "\" (expected \"a-b\")";
    }
  }
  HSPMD_CHECK(stage.first_layer >= 0 && stage.first_layer <= stage.last_layer)
      << where << ": layer range " << stage.first_layer << "-" << stage.last_layer
      << " must be ascending and non-negative";
}

// "tp" and "cp" of a stage: both optional; their product must be the stage's rank count.
void parse_parallel_degrees(const Json& j, const std::string& where, StageSpec& stage) {
  const int n = static_cast<int>(stage.ranks.size());
  const int cp = j.contains("cp") ? json_positive_int(j, "cp", where) : 1;
  HSPMD_CHECK(n % cp == 0) << where << ".cp: " << cp << " does not divide the stage's " << n << " ranks "
                           << DeviceGroup(stage.ranks).to_string() << "; a stage has tp x cp ranks";
  if (j.contains("tp")) {
    const int tp = json_positive_int(j, "tp", where);
    HSPMD_CHECK(tp * cp == n) << where << ": tp " << tp << " x cp " << cp << " = " << tp * cp
                              << " ranks, but the stage lists " << n << " " << DeviceGroup(stage.ranks).to_string();
  }
  stage.cp = cp;
}

std::string range_text(const std::vector<int>& ranks) {
  std::string g = DeviceGroup(ranks).to_string();
  return g.substr(1, g.size() - 2);
}

}  // namespace

int PipelineSpec::token_order_degree() const {
  int out = 1;
  for (const StageSpec& s : stages) out = std::lcm(out, s.cp);
  return out;
}

int PipelineSpec::common_cp() const {
  int out = 0;
  for (const StageSpec& s : stages) out = std::gcd(out, s.cp);
  return std::max(out, 1);
}

int Strategy::sequence_parallel_multiple() const {
  int out = 1;
  for (const PipelineSpec& p : pipelines) {
    for (const StageSpec& s : p.stages) {
      if (s.sequence_parallel) out = std::lcm(out, s.tp() * s.cp);
    }
  }
  return out;
}

std::vector<int> Strategy::ranks() const {
  std::vector<int> out;
  for (const PipelineSpec& p : pipelines) {
    for (const StageSpec& s : p.stages) out.insert(out.end(), s.ranks.begin(), s.ranks.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

int Strategy::stage_of_layer(int p, int l) const {
  const auto& stages = pipelines.at(p).stages;
  for (size_t s = 0; s < stages.size(); ++s) {
    if (stages[s].has_layer(l)) return static_cast<int>(s);
  }
  HSPMD_THROW() << "strategy " << name << ": pipelines[" << p << "] has no stage holding layer " << l;
}

void Strategy::validate(int num_layers) const {
  HSPMD_CHECK(!pipelines.empty()) << "strategy " << name << " has no pipelines";
  for (size_t p = 0; p < pipelines.size(); ++p) {
    const auto& stages = pipelines[p].stages;
    HSPMD_CHECK(!stages.empty()) << "pipelines[" << p << "] has no stages";
    std::vector<int> owner(num_layers, -1);
    for (size_t s = 0; s < stages.size(); ++s) {
      const StageSpec& st = stages[s];
      HSPMD_CHECK(st.cp >= 1 && st.ranks.size() % st.cp == 0)
          << stage_key(p, s) << ": cp " << st.cp << " does not divide its " << st.ranks.size() << " ranks";
      HSPMD_CHECK(st.last_layer < num_layers)
          << stage_key(p, s) << ".layers: " << st.first_layer << "-" << st.last_layer << " exceeds the model's "
          << num_layers << " layers (0-" << num_layers - 1 << ")";
      for (int l = st.first_layer; l <= st.last_layer; ++l) {
        HSPMD_CHECK(owner[l] < 0) << stage_key(p, s) << ".layers: layer " << l << " is also in stages["
                                  << owner[l] << "]; each layer must be covered exactly once per pipeline";
        owner[l] = static_cast<int>(s);
      }
    }
    for (int l = 0; l < num_layers; ++l) {
      HSPMD_CHECK(owner[l] >= 0) << "pipelines[" << p << "]: layer " << l
                                 << " is not covered by any stage; each layer must be covered exactly once";
    }
  }
  if (shards_parameters()) check_equal_micro_batch_counts();
}

void Strategy::check_equal_micro_batch_counts() const {
  // Every holder of a parameter all-gathers it once per pass it runs, in lockstep with the others
  // (runtime/parameter_gathers.h): the pipelines must run as many passes. Their stages, layers and
  // TP and CP degrees may differ.
  const PipelineSpec& first = pipelines.front();
  for (size_t p = 1; p < pipelines.size(); ++p) {
    HSPMD_CHECK(pipelines[p].num_micro_batches == first.num_micro_batches)
        << "strategy " << name << ": \"zero\": 3 needs every pipeline to run as many micro-batches; pipelines[" << p
        << "].num_micro_batches is " << pipelines[p].num_micro_batches << ", pipelines[0]'s "
        << first.num_micro_batches << "; use \"zero\": 2 across pipelines of different micro-batch counts";
  }
}

std::string Strategy::to_json_text() const {
  nlohmann::ordered_json j;
  j["name"] = name;
  j["zero"] = zero;
  j["recompute"] = recompute;
  j["pipelines"] = nlohmann::ordered_json::array();
  for (const PipelineSpec& p : pipelines) {
    nlohmann::ordered_json pj;
    pj["micro_batch_size"] = p.micro_batch_size;
    pj["num_micro_batches"] = p.num_micro_batches;
    pj["stages"] = nlohmann::ordered_json::array();
    for (const StageSpec& s : p.stages) {
      nlohmann::ordered_json sj = {{"ranks", range_text(s.ranks)},
                                   {"layers", std::to_string(s.first_layer) + "-" + std::to_string(s.last_layer)}};
      if (s.cp > 1) {
        sj["tp"] = s.tp();
        sj["cp"] = s.cp;
      }
      if (s.sequence_parallel) sj["sequence_parallel"] = true;
      pj["stages"].push_back(sj);
    }
    j["pipelines"].push_back(pj);
  }
  return j.dump(2);
}

Strategy Strategy::from_json_text(const std::string& text, const std::string& source) {
  Json j = parse_json_object(text, source);
  check_known_keys(j, strategy_keys(), source);
  Strategy st;
  if (j.contains("name")) {
    HSPMD_CHECK(j["name"].is_string()) << source << ": \"name\" must be a string";
    st.name = j["name"].get<std::string>();
  } else {
    st.name = source;
  }
  st.zero = parse_zero_stage(j, source);
  st.recompute = optional_bool(j, "recompute", source);
  const Json& pipes = json_member(j, "pipelines", source);
  HSPMD_CHECK(pipes.is_array() && !pipes.empty()) << source << ": \"pipelines\" must be a non-empty array";
  std::map<int, std::string> placed;  // rank -> where it was first seen
  for (size_t p = 0; p < pipes.size(); ++p) {
    const std::string pw = source + ": pipelines[" + std::to_string(p) + "]";
    check_known_keys(pipes[p], pipeline_keys(), pw);
    PipelineSpec pipe;
    pipe.micro_batch_size = json_positive_int(pipes[p], "micro_batch_size", pw);
    pipe.num_micro_batches = json_positive_int(pipes[p], "num_micro_batches", pw);
    const Json& stages = json_member(pipes[p], "stages", pw);
    HSPMD_CHECK(stages.is_array() && !stages.empty()) << pw << ".stages: must be a non-empty array";
    for (size_t s = 0; s < stages.size(); ++s) {
      const std::string sw = source + ": " + stage_key(p, s);
      check_known_keys(stages[s], stage_keys(), sw);
      StageSpec stage;
      stage.ranks = parse_ranks(json_member(stages[s], "ranks", sw), sw + ".ranks");
      HSPMD_CHECK(!stage.ranks.empty()) << sw << ".ranks: a stage needs at least one rank";
      for (int r : stage.ranks) {
        auto [it, fresh] = placed.emplace(r, stage_key(p, s));
        HSPMD_CHECK(fresh) << sw << ".ranks: rank " << r << " is also in " << it->second
                           << "; a rank may appear in one place only";
      }
      parse_layers(json_member(stages[s], "layers", sw), sw + ".layers", stage);
      parse_parallel_degrees(stages[s], sw, stage);
      stage.sequence_parallel = optional_bool(stages[s], "sequence_parallel", sw);
      if (s > 0) {
        const StageSpec& prev = pipe.stages.back();
        HSPMD_CHECK(stage.first_layer > prev.last_layer)
            << sw << ".layers: stages must follow the layer order; layer " << stage.first_layer
            << " comes at or before the previous stage's last layer " << prev.last_layer;
      }
      pipe.stages.push_back(std::move(stage));
    }
    st.pipelines.push_back(std::move(pipe));
  }
  return st;
}

Strategy Strategy::from_file(const std::string& path) {
  return from_json_text(read_text_file(path, "strategy file"), path);
}

}  // namespace hspmd::sharding
