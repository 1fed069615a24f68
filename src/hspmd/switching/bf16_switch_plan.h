// bf16-only switching (the paper's mixed-length training, Table 5's per-batch row): the float32
// master weights and both AdamW moments stay in one base layout, and a step computed under another
// plan moves only what that step needs:
//
//   params out   every parameter's value, rounded to bf16 (2 bytes an element), from the base
//                plan's value layout to the compute plan's;
//   grads back   every gradient, float32 (4 bytes an element), reduced over the compute plan's data
//                parallelism into its optimizer-state layout, to the base plan's optimizer-state
//                layout, where AdamW steps.
//
//   Bf16SwitchPlan p = plan_bf16_switch(param_layouts(base, params), param_layouts(s, params), &topo);
//   p.params_out.bsr.total_bytes()   // on the wire before each step under s
//   p.grads_back.sent_by_tier        // after its backward, per link tier
//
// Each is one fused BSR (switching/switch_plan.h) listing one tensor per parameter, in the model's
// parameter order: SwitchPlan::tensor_index(param, StatePart::kValue) indexes both.
#pragma once

#include <vector>

#include "hspmd/resolve/topology.h"
#include "hspmd/switching/switch_plan.h"

namespace hspmd::switching {

struct Bf16SwitchPlan {
  SwitchPlan params_out;  // bf16 values: base value layout -> compute value layout
  SwitchPlan grads_back;  // float32 gradients: compute optimizer-state layout -> base optimizer-state layout

  int64_t step_bytes() const { return params_out.bsr.total_bytes() + grads_back.bsr.total_bytes(); }
};

// Error naming the parameter when the two lists differ in names or shapes.
Bf16SwitchPlan plan_bf16_switch(const std::vector<ParamLayout>& base, const std::vector<ParamLayout>& compute,
                                const resolve::Topology* topology);

}  // namespace hspmd::switching
