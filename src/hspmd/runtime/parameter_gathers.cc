#include "hspmd/runtime/parameter_gathers.h"

#include <utility>

#include "hspmd/core/error.h"

namespace hspmd::runtime {

ParameterGathers::ParameterGathers(const std::vector<specialize::GatherUnit>& units, const ShardedState& state,
                                   const std::vector<graph::TensorRef>& params, Gather gather, GatherQueue queue)
    : units_(units), gather_(std::move(gather)), queue_(std::move(queue)), pending_(units.size()) {
  if (units_.empty()) return;  // not ZeRO-3
  std::map<int, const TensorState*> by_op;  // parameter op id -> its state
  for (const TensorState& s : state.tensors) by_op[params[s.param].op] = &s;
  for (const specialize::GatherUnit& u : units_) {
    first_state_.push_back(states_.size());
    for (size_t i = 0; i < u.params.size(); ++i) {
      const auto it = by_op.find(u.params[i]);
      HSPMD_ASSERT(it != by_op.end()) << "ZeRO-3: parameter op " << u.params[i] << " of unit '" << u.layer
                                      << "' has no state on this rank";
      states_.push_back(it->second);
      frees_[u.last_reads[i]].push_back(u.params[i]);
    }
  }
}

void ParameterGathers::before(int position, std::vector<std::vector<Tensor>>& values) {
  // In unit order: a unit due later than the next one is due later than `position` too.
  for (; submitted_ < units_.size() && units_[submitted_].gather_at <= position; ++submitted_) {
    const size_t begin = first_state_[submitted_], count = units_[submitted_].params.size();
    std::vector<const TensorState*> states(states_.begin() + begin, states_.begin() + begin + count);
    auto gathered = std::make_shared<std::vector<Tensor>>();
    pending_[submitted_] = {queue_.submit([gather = gather_, states = std::move(states), gathered] {
                              for (const TensorState* s : states) gathered->push_back(gather(*s));
                            }),
                            gathered};
  }
  for (; received_ < submitted_ && units_[received_].first <= position; ++received_) {
    const specialize::GatherUnit& u = units_[received_];
    Pending& p = pending_[received_];
    queue_.wait(p.ticket);  // the compute thread's only wait: the layer it reads now
    HSPMD_ASSERT(p.gathered->size() == u.params.size())
        << "ZeRO-3: the gather of unit '" << u.layer << "' did not run (an earlier communication failed)";
    for (size_t i = 0; i < u.params.size(); ++i) values[u.params[i]] = {std::move((*p.gathered)[i])};
    p = Pending();
  }
}

void ParameterGathers::after(int position, std::vector<std::vector<Tensor>>& values) {
  const auto it = frees_.find(position);
  if (it == frees_.end()) return;
  for (int op : it->second) values[op] = {};
}

}  // namespace hspmd::runtime
