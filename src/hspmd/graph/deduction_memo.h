// Deduction by an op's structure (graph/deduction.h): two ops of the same kind, attributes, input
// and output shapes and dtypes, input annotations and planned annotation get the same output
// annotations, because a rule (OpDef::deduce) reads nothing else; the op's name appears only in
// its errors. A decoder repeats one set of ops per layer and its layers share their stage's
// annotations, so a 70B model of 80 layers on 4 stages deduces each forward and backward op about
// 20 times over, each time over every pipeline's subgroup (explaining 4,096 ranks spent a quarter
// of its time there).
//
//   DeductionMemo memo;
//   if (const auto* outs = memo.find(op, infos, inputs, planned)) return *outs;  // an earlier op's
//   std::vector<Annotation> outs = def.deduce(ctx);  // may throw, naming this op: nothing is kept
//   memo.insert(op, infos, inputs, planned, outs);
//
// Only a successful deduction is kept, so an op whose rule fails is never skipped: the first op
// of a structure that fails is deduced and named in the error, as without the memo.
#pragma once

#include <cstddef>
#include <unordered_map>
#include <vector>

#include "hspmd/graph/graph.h"
#include "hspmd/sharding/annotation.h"

namespace hspmd::graph {

class DeductionMemo {
 public:
  // The outputs kept for an op of the same structure, or nullptr. `op` and the entries kept must
  // belong to one graph that outlives the memo (entries point at their first op).
  const std::vector<sharding::Annotation>* find(const Op& op, const std::vector<TensorInfo>& infos,
                                                const std::vector<sharding::Annotation>& inputs,
                                                const sharding::Annotation* planned) const;
  void insert(const Op& op, const std::vector<TensorInfo>& infos, const std::vector<sharding::Annotation>& inputs,
              const sharding::Annotation* planned, std::vector<sharding::Annotation> outputs);
  // Lookups answered from the memo (for tests).
  size_t hits() const { return hits_; }

 private:
  struct Entry {
    const Op* op;  // the first op of this structure: kind, attributes and output shapes
    std::vector<TensorInfo> infos;
    std::vector<sharding::Annotation> inputs;
    sharding::Annotation planned;  // null when the plan named none
    std::vector<sharding::Annotation> outputs;
  };
  static size_t hash(const Op& op, const std::vector<sharding::Annotation>& inputs,
                     const sharding::Annotation* planned);

  // By hash of the kind and the annotations (hashed once per annotation body); the few entries
  // that share a hash (ops of one kind on the same annotations, e.g. q, k and v projections) are
  // told apart by comparing everything.
  std::unordered_map<size_t, std::vector<Entry>> entries_;
  mutable size_t hits_ = 0;
};

}  // namespace hspmd::graph
