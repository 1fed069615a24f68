// An annotation over one stage of each pipeline: a union of the stages' groups (one subgroup per
// pipeline), each group sharded by its own distributed state. Plan compilers use it for every tensor
// that lives on "the stage holding layer l" of each pipeline:
//   on_stages(last_stages, [](const StageSpec& s) { return DistState::dup(s.tp()); }, kDuplicate)
#pragma once

#include <utility>
#include <vector>

#include "hspmd/sharding/annotation.h"
#include "hspmd/sharding/strategy.h"

namespace hspmd::sharding {

// `ds(stage)` gives each stage's DistState; `hdim` how the tensor is divided across the pipelines.
template <typename DsOfStage>
Annotation on_stages(const std::vector<const StageSpec*>& stages, DsOfStage ds, int hdim) {
  std::vector<DeviceGroup> groups;
  std::vector<DistState> states;
  for (const StageSpec* s : stages) {
    groups.emplace_back(s->ranks);
    states.push_back(ds(*s));
  }
  return Annotation::make(std::move(groups), std::move(states), hdim);
}

}  // namespace hspmd::sharding
