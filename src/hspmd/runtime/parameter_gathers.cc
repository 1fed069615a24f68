#include "hspmd/runtime/parameter_gathers.h"

#include <utility>

#include "hspmd/core/error.h"

namespace hspmd::runtime {

ParameterGathers::ParameterGathers(const std::vector<specialize::GatherUnit>& units, const ShardedState& state,
                                   const std::vector<graph::TensorRef>& params, Gather gather)
    : units_(units), gather_(std::move(gather)) {
  if (units_.empty()) return;  // not ZeRO-3
  for (const TensorState& s : state.tensors) by_op_[params[s.param].op] = &s;
  for (const specialize::GatherUnit& u : units_) {
    for (size_t i = 0; i < u.params.size(); ++i) frees_[u.last_reads[i]].push_back(u.params[i]);
  }
}

void ParameterGathers::before(int position, std::vector<std::vector<Tensor>>& values) {
  // In unit order: a unit due later than the next one is due later than `position` too.
  for (; gathered_ < units_.size() && units_[gathered_].gather_at <= position; ++gathered_) {
    const specialize::GatherUnit& u = units_[gathered_];
    for (int op : u.params) {
      const auto it = by_op_.find(op);
      HSPMD_ASSERT(it != by_op_.end()) << "ZeRO-3: parameter op " << op << " of unit '" << u.layer
                                       << "' has no state on this rank";
      values[op] = {gather_(*it->second)};
    }
  }
}

void ParameterGathers::after(int position, std::vector<std::vector<Tensor>>& values) {
  const auto it = frees_.find(position);
  if (it == frees_.end()) return;
  for (int op : it->second) values[op] = {};
}

}  // namespace hspmd::runtime
