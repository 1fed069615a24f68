#include "hspmd/switching/switch_plan.h"

#include <algorithm>
#include <set>

#include "hspmd/core/error.h"
#include "hspmd/specialize/exec_graph.h"

namespace hspmd::switching {

std::vector<ParamLayout> param_layouts(const sharding::AnnotationPlan& plan,
                                       const std::vector<std::pair<std::string, Shape>>& params) {
  std::vector<ParamLayout> out;
  out.reserve(params.size());
  for (const auto& [name, shape] : params) {
    const sharding::Annotation read = specialize::without_zero(plan.at(name));
    const sharding::Annotation state = specialize::without_zero(plan.optimizer_state(name));
    out.push_back({name, shape, plan.shard_parameters ? state : read, state, read});
  }
  return out;
}

std::vector<int> ranks_of(const std::vector<ParamLayout>& layouts) {
  std::set<int> ranks;
  for (const ParamLayout& p : layouts) {
    for (int d : p.value.devices()) ranks.insert(d);
    for (int d : p.state.devices()) ranks.insert(d);
  }
  return {ranks.begin(), ranks.end()};
}

size_t SwitchPlan::tensor_index(size_t param, StatePart part) const {
  HSPMD_ASSERT(optimizer_states || part == StatePart::kValue) << "switch plan without optimizer states";
  const size_t parts = optimizer_states ? kStateParts.size() : 1;
  return param * parts + static_cast<size_t>(part);
}

SwitchPlan plan_switch(const std::vector<ParamLayout>& from, const std::vector<ParamLayout>& to,
                       const SwitchOptions& options) {
  HSPMD_CHECK(from.size() == to.size()) << "switch: the plans hold " << from.size() << " and " << to.size()
                                        << " parameters";
  SwitchPlan out;
  out.optimizer_states = options.optimizer_states;
  for (size_t i = 0; i < from.size(); ++i) {
    const ParamLayout& a = from[i];
    const ParamLayout& b = to[i];
    HSPMD_CHECK(a.name == b.name && a.shape == b.shape)
        << "switch: parameter " << i << " is '" << a.name << "' " << a.shape.to_string() << " in one plan and '"
        << b.name << "' " << b.shape.to_string() << " in the other";
    for (StatePart part : kStateParts) {
      if (part != StatePart::kValue && !options.optimizer_states) continue;
      const bool value = part == StatePart::kValue;
      out.tensors.push_back(
          {state_tensor_name(a.name, part), a.shape, value ? a.value : a.state, value ? b.value : b.state,
                               value ? options.value_element_size : int64_t{4}});
      HSPMD_ASSERT(out.tensors.size() == out.tensor_index(i, part) + 1) << "switch: tensor order of '" << a.name << "'";
    }
  }
  out.bsr = resolve::plan_fused_bsr(out.tensors, options.topology,
                                    resolve::bsr_algorithm_options(options.algorithm, options.dead));

  for (const auto& [device, ops] : out.bsr.ops) {
    for (const resolve::CommOp& op : ops) {
      if (op.kind != resolve::CommKind::kLocalCopy) continue;
      for (const resolve::Piece& piece : op.pieces) {
        out.local_copy_bytes += piece.region.numel() * out.tensors[piece.tensor].element_size;
      }
    }
  }
  for (const resolve::BsrMessage& m : out.bsr.messages()) {
    const resolve::LinkTier tier =
        options.topology ? options.topology->tier(m.sender, m.receiver) : resolve::LinkTier::kIntraNode;
    out.sent_by_tier[tier] += m.bytes;
    out.sent_by[m.sender][tier] += m.bytes;
  }
  for (const auto& [device, bytes] : out.bsr.bytes_sent) {
    out.busiest_sender_bytes = std::max(out.busiest_sender_bytes, bytes);
  }
  return out;
}

}  // namespace hspmd::switching
