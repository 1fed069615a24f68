#include "hspmd/switching/bf16_switch_plan.h"

namespace hspmd::switching {

namespace {

// The layouts with each value taking its optimizer-state layout: a gradient is synced into (and
// stepped in) that layout, so it is what the gradients move between.
std::vector<ParamLayout> gradient_layouts(std::vector<ParamLayout> layouts) {
  for (ParamLayout& l : layouts) l.value = l.state;
  return layouts;
}

}  // namespace

Bf16SwitchPlan plan_bf16_switch(const std::vector<ParamLayout>& base, const std::vector<ParamLayout>& compute,
                                const resolve::Topology* topology) {
  SwitchOptions params{.optimizer_states = false, .topology = topology, .value_element_size = 2};
  SwitchOptions grads{.optimizer_states = false, .topology = topology, .value_element_size = 4};
  return {plan_switch(base, compute, params), plan_switch(gradient_layouts(compute), gradient_layouts(base), grads)};
}

}  // namespace hspmd::switching
