#include "hspmd/graph/deduction_memo.h"

namespace hspmd::graph {

using sharding::Annotation;

namespace {

bool same_planned(const Annotation& kept, const Annotation* planned) {
  return planned ? kept == *planned : kept.is_null();
}

}  // namespace

size_t DeductionMemo::hash(const Op& op, const std::vector<Annotation>& inputs, const Annotation* planned) {
  size_t h = static_cast<size_t>(op.kind) * 0x9e3779b97f4a7c15ull + op.outputs.size();
  for (const Annotation& a : inputs) h = (h * 0x100000001b3ull) ^ a.hash();
  return (h * 0x100000001b3ull) ^ (planned ? planned->hash() : 0);
}

const std::vector<Annotation>* DeductionMemo::find(const Op& op, const std::vector<TensorInfo>& infos,
                                                   const std::vector<Annotation>& inputs,
                                                   const Annotation* planned) const {
  auto it = entries_.find(hash(op, inputs, planned));
  if (it == entries_.end()) return nullptr;
  for (const Entry& e : it->second) {
    if (e.op->kind == op.kind && e.inputs == inputs && same_planned(e.planned, planned) && e.infos == infos &&
        e.op->outputs == op.outputs && e.op->attrs == op.attrs) {
      ++hits_;
      return &e.outputs;
    }
  }
  return nullptr;
}

void DeductionMemo::insert(const Op& op, const std::vector<TensorInfo>& infos, const std::vector<Annotation>& inputs,
                           const Annotation* planned, std::vector<Annotation> outputs) {
  entries_[hash(op, inputs, planned)].push_back(
      Entry{&op, infos, inputs, planned ? *planned : Annotation(), std::move(outputs)});
}

}  // namespace hspmd::graph
