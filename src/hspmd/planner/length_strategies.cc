#include "hspmd/planner/length_strategies.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>

#include "hspmd/planner/switch_seconds.h"
#include "hspmd/switching/bf16_switch_plan.h"
#include "hspmd/switching/switch_plan.h"

namespace hspmd::planner {

LengthStrategies::LengthStrategies(const models::Model& model, const CostModel& cost_model,
                                   std::vector<LengthStrategy> set, const PipelineModelOptions& options)
    : set_(std::move(set)), topology_(&cost_model.topology()) {
  HSPMD_CHECK(!set_.empty()) << "strategies per maximum length: none given";
  const std::vector<std::pair<std::string, Shape>> params = models::parameter_shapes(model);
  for (size_t i = 0; i < set_.size(); ++i) {
    const LengthStrategy& s = set_[i];
    HSPMD_CHECK(s.max_len > 0) << "strategy " << s.strategy.name << ": maximum length " << s.max_len
                               << " must be positive";
    HSPMD_CHECK(i == 0 || s.max_len > set_[i - 1].max_len)
        << "strategies per maximum length must be given in increasing maximum length: " << set_[i - 1].max_len
        << " (" << set_[i - 1].strategy.name << ") then " << s.max_len << " (" << s.strategy.name << ")";
    for (int r : s.strategy.ranks()) {
      HSPMD_CHECK(r < cost_model.topology().num_devices())
          << "strategy " << s.strategy.name << " uses rank " << r << " but cluster " << cost_model.topology().name()
          << " has " << cost_model.topology().num_devices() << " devices";
    }
    plans_.push_back(model.compile_plan(s.strategy));
    models_.push_back(pipeline_models(cost_model, s.strategy, options));
    layouts_.push_back(switching::param_layouts(plans_.back(), params));
  }
  const size_t n = set_.size();
  switch_seconds_.assign(n, std::vector<double>(n, 0));
  switch_bytes_.assign(n, std::vector<int64_t>(n, 0));
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      if (a == b) continue;
      const switching::SwitchPlan sp =
          switching::plan_switch(layouts_[a], layouts_[b], {.topology = &cost_model.topology()});
      switch_bytes_[a][b] = sp.bsr.total_bytes();
      switch_seconds_[a][b] = bsr_seconds(sp.bsr, cost_model.topology());
    }
  }
}

void LengthStrategies::price_bf16_switches(size_t base) {
  HSPMD_CHECK(base < set_.size()) << "strategies per maximum length: no strategy " << base;
  bf16_base_ = base;
  bf16_steps_.assign(set_.size(), Bf16Step{});
  for (size_t s = 0; s < set_.size(); ++s) {
    if (s == base) continue;
    const switching::Bf16SwitchPlan p = switching::plan_bf16_switch(layouts_[base], layouts_[s], topology_);
    bf16_steps_[s] = {.params_out_bytes = p.params_out.bsr.total_bytes(),
                      .grads_back_bytes = p.grads_back.bsr.total_bytes(),
                      .seconds = bsr_seconds(p.params_out.bsr, *topology_) + bsr_seconds(p.grads_back.bsr, *topology_)};
  }
}

Choice LengthStrategies::choose(std::span<const int64_t> lengths, size_t current) const {
  HSPMD_CHECK(current == kNone || current < set_.size()) << "strategies per maximum length: no strategy " << current;
  const int64_t longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  Choice best;
  best.predicted.assign(set_.size(), -1.0);
  bool found = false;
  std::string refusals;
  for (size_t i = 0; i < set_.size(); ++i) {
    if (longest > set_[i].max_len) continue;
    if (std::optional<std::string> why = sequence_too_long(lengths, models_[i])) {
      refusals += "; strategy " + set_[i].strategy.name + ": " + *why;
      continue;
    }
    Dispatch d = dispatch(lengths, models_[i]);
    const double sw = bf16_base_                          ? bf16_steps_[i].seconds
                      : current == kNone || i == current ? 0.0
                                                         : switch_seconds_[current][i];
    best.predicted[i] = d.step_seconds + sw;
    if (!found || best.predicted[i] < best.predicted[best.strategy]) {
      found = true;
      best.strategy = i;
      best.dispatch = std::move(d);
      best.switch_seconds = sw;
    }
  }
  if (!found) {
    throw SequenceTooLong("a sequence of " + std::to_string(longest) +
                          " tokens is longer than every strategy of the run can hold: the largest maximum length is " +
                          std::to_string(set_.back().max_len) + refusals);
  }
  return best;
}

LengthStrategy parse_length_strategy(const std::string& spec) {
  const size_t colon = std::min(spec.find(':'), spec.size());
  int64_t max_len = 0;
  const auto [end, error] = std::from_chars(spec.data(), spec.data() + colon, max_len);
  HSPMD_CHECK(error == std::errc() && end == spec.data() + colon && max_len > 0 && colon + 1 < spec.size())
      << "--strategy-for-max-len " << spec << ": expected MAXLEN:STRATEGY.json with MAXLEN > 0 (tokens)";
  return {max_len, sharding::Strategy::from_file(spec.substr(colon + 1))};
}

}  // namespace hspmd::planner
