#include "hspmd/sharding/plan.h"

#include <numeric>

#include <nlohmann/json.hpp>

#include "hspmd/core/atomic_file.h"
#include "hspmd/core/error.h"
#include "hspmd/core/json_file.h"

namespace hspmd::sharding {

int64_t PipelineSchedule::row_multiple() const {
  const int64_t chunks = token_order_degree > 1 ? 2 * static_cast<int64_t>(token_order_degree) : 1;
  return std::lcm(chunks, static_cast<int64_t>(sequence_parallel_multiple));
}

int64_t PipelineSchedule::row_tokens(int64_t seq_len) const {
  const int64_t m = row_multiple();
  return (seq_len + m - 1) / m * m;
}

void AnnotationPlan::set(const std::string& name, Annotation annotation) {
  HSPMD_CHECK(!annotation.is_null()) << "plan entry " << name << " has no annotation";
  tensors_[name] = std::move(annotation);
}

void AnnotationPlan::set_optimizer_state(const std::string& name, Annotation annotation) {
  HSPMD_CHECK(contains(name)) << "optimizer state for " << name << " set before the tensor itself";
  optimizer_states_[name] = std::move(annotation);
}

const Annotation& AnnotationPlan::at(const std::string& name) const {
  auto it = tensors_.find(name);
  HSPMD_CHECK(it != tensors_.end()) << "tensor " << name << " is not in the annotation plan";
  return it->second;
}

const Annotation& AnnotationPlan::optimizer_state(const std::string& name) const {
  auto it = optimizer_states_.find(name);
  return it != optimizer_states_.end() ? it->second : at(name);
}

std::string AnnotationPlan::to_json_text() const {
  nlohmann::ordered_json j;
  j["format"] = "hspmd-plan";
  j["version"] = 1;
  j["tensors"] = nlohmann::ordered_json::object();
  for (const auto& [name, a] : tensors_) j["tensors"][name] = a.to_string();
  if (!optimizer_states_.empty()) {
    j["optimizer_states"] = nlohmann::ordered_json::object();
    for (const auto& [name, a] : optimizer_states_) j["optimizer_states"][name] = a.to_string();
  }
  if (!pipelines.empty()) {
    j["pipelines"] = nlohmann::ordered_json::array();
    for (const PipelineSchedule& p : pipelines) {
      nlohmann::ordered_json pj = {{"micro_batch_size", p.micro_batch_size},
                                   {"num_micro_batches", p.num_micro_batches}};
      if (p.token_order_degree > 1) pj["token_order_degree"] = p.token_order_degree;
      if (p.sequence_parallel_multiple > 1) pj["sequence_parallel_multiple"] = p.sequence_parallel_multiple;
      j["pipelines"].push_back(std::move(pj));
    }
  }
  j["recompute"] = recompute;
  if (shard_gradients) j["shard_gradients"] = true;
  if (shard_parameters) j["shard_parameters"] = true;
  return j.dump(2);
}

namespace {

using Json = nlohmann::json;

Annotation parse_entry(const Json& v, const std::string& where) {
  HSPMD_CHECK(v.is_string()) << where << ": expected an annotation string, got " << v.dump();
  try {
    return Annotation::parse(v.get<std::string>());
  } catch (const Error& e) {
    HSPMD_THROW() << where << ": " << e.what();
  }
}

}  // namespace

AnnotationPlan AnnotationPlan::from_json_text(const std::string& text, const std::string& source) {
  Json j = parse_json_object(text, source);
  if (j.contains("format")) {
    HSPMD_CHECK(j["format"] == "hspmd-plan") << source << ": \"format\" is " << j["format"].dump()
                                             << ", expected \"hspmd-plan\"";
  }
  if (j.contains("version")) {
    HSPMD_CHECK(j["version"] == 1) << source << ": unsupported plan version " << j["version"].dump();
  }
  AnnotationPlan plan;
  const Json& tensors = json_member(j, "tensors", source);
  HSPMD_CHECK(tensors.is_object()) << source << ": \"tensors\" must be an object of name -> annotation";
  for (const auto& [name, v] : tensors.items()) {
    plan.set(name, parse_entry(v, source + ": tensors.\"" + name + "\""));
  }
  if (j.contains("optimizer_states")) {
    const Json& states = j["optimizer_states"];
    HSPMD_CHECK(states.is_object()) << source << ": \"optimizer_states\" must be an object";
    for (const auto& [name, v] : states.items()) {
      const std::string where = source + ": optimizer_states.\"" + name + "\"";
      HSPMD_CHECK(plan.contains(name)) << where << ": no tensor of that name in \"tensors\"";
      plan.set_optimizer_state(name, parse_entry(v, where));
    }
  }
  if (j.contains("pipelines")) {
    const Json& pipes = j["pipelines"];
    HSPMD_CHECK(pipes.is_array()) << source << ": \"pipelines\" must be an array";
    for (size_t i = 0; i < pipes.size(); ++i) {
      const std::string where = source + ": pipelines[" + std::to_string(i) + "]";
      HSPMD_CHECK(pipes[i].is_object()) << where << ": expected an object";
      plan.pipelines.push_back({json_positive_int(pipes[i], "micro_batch_size", where),
                                json_positive_int(pipes[i], "num_micro_batches", where),
                                pipes[i].contains("token_order_degree")
                                    ? json_positive_int(pipes[i], "token_order_degree", where)
                                    : 1,
                                pipes[i].contains("sequence_parallel_multiple")
                                    ? json_positive_int(pipes[i], "sequence_parallel_multiple", where)
                                    : 1});
    }
  }
  if (j.contains("recompute")) {
    HSPMD_CHECK(j["recompute"].is_boolean()) << source << ": \"recompute\" must be true or false";
    plan.recompute = j["recompute"].get<bool>();
  }
  if (j.contains("shard_gradients")) {
    HSPMD_CHECK(j["shard_gradients"].is_boolean()) << source << ": \"shard_gradients\" must be true or false";
    plan.shard_gradients = j["shard_gradients"].get<bool>();
  }
  if (j.contains("shard_parameters")) {
    HSPMD_CHECK(j["shard_parameters"].is_boolean()) << source << ": \"shard_parameters\" must be true or false";
    plan.shard_parameters = j["shard_parameters"].get<bool>();
    HSPMD_CHECK(!plan.shard_parameters || plan.shard_gradients)
        << source << ": \"shard_parameters\" (ZeRO-3) needs \"shard_gradients\" (ZeRO-2) too";
  }
  return plan;
}

AnnotationPlan AnnotationPlan::from_file(const std::string& path) {
  return from_json_text(read_text_file(path, "annotation plan"), path);
}

void AnnotationPlan::save(const std::string& path) const {
  AtomicFile out(path);
  const std::string text = to_json_text() + "\n";
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace hspmd::sharding
