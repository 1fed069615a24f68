// Hierarchical communication resolution (§5, Figure 7): a Reshard src -> dst of one tensor
// becomes per-device comm ops. Classification, in this order:
//
//   same hsize and hdim            -> bottom tier: each subgroup on its own (bottom_tier.h:
//                                     Identity, SR, AR, RS, AG, Slice, else a BSR of the subgroup)
//   same hsize and dg_union, hdim differs
//     same ds_union                -> top tier (top_tier.h: SplitAR, SplitRS, SplitAG, SplitSlice)
//     ds_union differs             -> bottom tier to dst's ds_union, then top tier (§5.2 II)
//   otherwise, or when no rule of the chosen tier applies
//                                  -> one BSR of the whole tensor (bsr_table.h, bsr_scheme.h)
// Partial never goes to one BSR of the whole tensor: a Reshard that would need it is an error naming
// the tensor. A bottom-tier BSR moves summands as they are: each subgroup's own under a partial top
// tier (a tied embedding's gradient going back to its pipeline's first stage), and each summand on
// its own when a subgroup's source and destination hold as many (the same gradient under CP,
// partial over the CP ranks of both stages); a source of one summand going to several puts it in
// summand 0 and zeros in the others (ZeroFill). A partial source whose subgroup must also be sliced
// is sliced locally first, then reduced ((P:2,D:2) -> (D:2,S0:2): Slice, then AR); a DS union whose
// members differ is aligned that way inside each subgroup before the top tier runs. A partial source
// whose subgroup holds another number of summands than the destination's (a tied head's gradient
// from a last stage of CP 2 to a first stage without CP, or of CP 4) is reduced by a collective
// inside each subgroup first, then moved by a BSR of each subgroup ("bottom[AR]+bottom[BSR]").
//
//   Resolution r = resolve(src, dst, Shape{8, 4}, "W", {});
//   r.classification()  // "bottom[RS,BSR]", "top[SplitAG]", "bottom[RS]+top[SplitAG]" or "BSR"
//   r.ops_of(3)         // device 3's ops, steps concatenated
// Resolution never touches the network and is deterministic: every rank computes the same result.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "hspmd/core/shape.h"
#include "hspmd/resolve/bsr_scheme.h"
#include "hspmd/resolve/comm_op.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/sharding/annotation.h"

namespace hspmd::resolve {

enum class Tier { kBottom, kTop, kBottomThenTop, kBsr };
std::string_view tier_name(Tier tier);

// One step of a resolution: every device turns its `from` shard into its `to` shard.
struct ResolveStep {
  sharding::Annotation from;
  sharding::Annotation to;
  bool top_tier = false;
  std::vector<ReshardKind> kinds;  // bottom tier: one per subgroup; otherwise one
  DeviceOps ops;
};

struct Resolution {
  Tier tier = Tier::kBottom;
  std::vector<ResolveStep> steps;  // one; two for kBottomThenTop or a partial kBottom that slices first; three
                                   // for kBottomThenTop whose bottom tier slices first

  std::string classification() const;
  std::vector<CommOp> ops_of(int device) const;
  int64_t bytes_sent(int device) const;
  std::vector<int> devices() const;  // every device with an op, ascending
};

struct ResolveOptions {
  int64_t element_size = 4;                      // bytes per element
  const Topology* topology = nullptr;            // BSR link choice; nullptr: all links equal
  BsrPolicy bsr_policy = BsrPolicy::kHeuristic;  // kLowestOwner for --no-heuristics
};

// Throws Error naming `tensor` when an annotation does not fit `shape` or Partial would need BSR.
Resolution resolve(const sharding::Annotation& src, const sharding::Annotation& dst, const Shape& shape,
                   const std::string& tensor, const ResolveOptions& options = {});

// Memoizes resolve() for repeated (src, dst, shape) triples (a 60-layer model has 60 copies of
// each layer's Reshards); the options are fixed per cache.
class ResolveCache {
 public:
  explicit ResolveCache(ResolveOptions options = {}) : options_(options) {}
  // Thread-safe (the gradient sync's communication thread resolves while the main thread does);
  // a returned Resolution stays valid, unchanged, as long as the cache.
  const Resolution& resolve(const sharding::Annotation& src, const sharding::Annotation& dst, const Shape& shape,
                            const std::string& tensor);
  size_t size() const;

 private:
  struct Key {
    sharding::Annotation src, dst;
    std::vector<int64_t> dims;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  ResolveOptions options_;
  mutable std::mutex mutex_;
  std::unordered_map<Key, Resolution, KeyHash> cache_;  // nodes never move: references stay valid
};

}  // namespace hspmd::resolve
