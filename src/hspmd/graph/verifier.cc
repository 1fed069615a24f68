#include "hspmd/graph/verifier.h"

#include <set>

#include "hspmd/core/error.h"
#include "hspmd/graph/op_registry.h"

namespace hspmd::graph {

void verify(const Graph& g) {
  std::set<std::string> names;
  for (int id = 0; id < g.num_ops(); ++id) {
    const Op& op = g.op(id);
    const OpDef& def = g.registry().get(op.kind);
    const std::string where = "verify: op %" + std::to_string(id) + " '" + op.name + "' (" + def.name + ")";
    HSPMD_CHECK(static_cast<int>(op.inputs.size()) == def.num_inputs)
        << where << ": " << op.inputs.size() << " inputs, the kind takes " << def.num_inputs;
    std::vector<TensorInfo> in_infos;
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      TensorRef in = op.inputs[i];
      HSPMD_CHECK(in.op >= 0 && in.op < id) << where << ": input " << i << " refers to op %" << in.op
                                            << ", which does not precede it";
      const Op& producer = g.op(in.op);
      HSPMD_CHECK(in.index >= 0 && in.index < static_cast<int>(producer.outputs.size()))
          << where << ": input " << i << " refers to missing output " << in.index << " of '" << producer.name << "'";
      HSPMD_CHECK(op.backward || !producer.backward)
          << where << ": a forward op consumes backward tensor '" << g.tensor_name(in) << "'";
      in_infos.push_back(producer.outputs[in.index]);
    }
    std::vector<TensorInfo> expected = def.infer(ShapeContext{op, in_infos});
    HSPMD_CHECK(expected == op.outputs) << where << ": recorded output shapes differ from its shape rule";
    if (op.kind == OpKind::kPlaceholder || op.kind == OpKind::kParameter || op.kind == OpKind::kReshard) {
      HSPMD_CHECK(names.insert(op.name).second) << where << ": name used twice";
    }
  }
}

}  // namespace hspmd::graph
