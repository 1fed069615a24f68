#include "hspmd/runtime/training_state.h"

#include <algorithm>

#include "hspmd/core/error.h"
#include "hspmd/graph/init.h"
#include "hspmd/kernels/slice.h"
#include "hspmd/runtime/plan_cache.h"

namespace hspmd::runtime {

using sharding::Annotation;
using sharding::Region;
using switching::StatePart;

Tensor& TensorState::part(StatePart p) {
  return const_cast<Tensor&>(static_cast<const TensorState&>(*this).part(p));
}

const Tensor& TensorState::part(StatePart p) const {
  switch (p) {
    case StatePart::kValue:
      return value;
    case StatePart::kExpAvg:
      return exp_avg;
    case StatePart::kExpAvgSq:
      return exp_avg_sq;
  }
  HSPMD_ASSERT(false) << "unknown state part";
  return value;
}

const Region& TensorState::region_of(StatePart p) const { return p == StatePart::kValue ? region : state_region; }

const Annotation& TensorState::annotation_of(StatePart p) const {
  return p == StatePart::kValue ? annotation : state_annotation;
}

namespace {

// Elements of `region` of parameter `name` (global shape `shape`), generated row by row from the
// global element index, so every strategy starts from the single-process weights (architecture §9).
Tensor init_region(const std::string& name, const Shape& shape, const Region& region, const graph::InitSpec& spec,
                   uint64_t seed, Allocator* allocator) {
  Tensor out = Tensor::empty(region.shape(), DType::kFloat32, allocator);
  const int rank = shape.rank();
  if (rank == 0 || region.numel() == 0) {
    if (region.numel() > 0) out.copy_from(graph::init_tensor(name, shape, DType::kFloat32, spec, seed));
    return out;
  }
  const int64_t row = region.extent(rank - 1);
  std::vector<int64_t> index = region.begin;  // the first element of the current row
  float* dst = out.data<float>();
  for (int64_t written = 0; written < region.numel(); written += row) {
    int64_t offset = 0;
    for (int d = 0; d < rank; ++d) offset = offset * shape[d] + index[d];
    Tensor part = graph::init_tensor(name, Shape{row}, DType::kFloat32, spec, seed, static_cast<uint64_t>(offset));
    std::copy(part.data<float>(), part.data<float>() + row, dst + written);
    for (int d = rank - 2; d >= 0; --d) {  // next row: odometer over the leading dims
      if (++index[d] < region.end[d]) break;
      index[d] = region.begin[d];
    }
  }
  return out;
}

}  // namespace

ShardedState ShardedState::laid_out(const SpecializedPlan& p, const std::vector<graph::TensorRef>& params, int rank,
                                    const graph::OptimizerOptions& optimizer) {
  ShardedState out;
  for (size_t i = 0; i < p.param_layouts.size(); ++i) {
    if (!p.exec->holds(params[i])) continue;
    const switching::ParamLayout& l = p.param_layouts[i];
    TensorState s;
    s.param = static_cast<int>(i);
    s.name = l.name;
    s.shape = l.shape;
    s.annotation = l.value;
    s.read_annotation = l.read;
    s.grad_annotation = p.grad_annotations[i];
    s.state_annotation = l.state;
    s.region = *l.value.region(rank, l.shape);
    s.state_region = *l.state.region(rank, l.shape);
    s.decay = s.shape.rank() >= 2 || optimizer.decay_vectors;
    out.tensors.push_back(std::move(s));
  }
  return out;
}

void ShardedState::initialize(const graph::Graph& graph, const std::vector<graph::TensorRef>& params, uint64_t seed,
                              Allocator* allocator) {
  for (TensorState& s : tensors) {
    const graph::TensorRef ref = params[s.param];
    // Initializers write on the host; a GPU rank's values are copied there.
    const bool on_host = allocator == nullptr || allocator->device().type == DeviceType::kCPU;
    s.value = init_region(s.name, s.shape, s.region, graph.op(ref.op).attrs.init, seed, on_host ? allocator : nullptr);
    if (!on_host) s.value = s.value.clone(allocator);
    s.exp_avg = Tensor::zeros(s.state_region.shape(), DType::kFloat32, allocator);
    s.exp_avg_sq = Tensor::zeros(s.state_region.shape(), DType::kFloat32, allocator);
  }
}

void ShardedState::zero(Allocator* allocator) {
  for (TensorState& s : tensors) {
    for (StatePart part : switching::kStateParts) {
      s.part(part) = Tensor::zeros(s.region_of(part).shape(), DType::kFloat32, allocator);
    }
  }
}

void ShardedState::read(const StateReader& read) {
  for (TensorState& s : tensors) {
    for (StatePart part : switching::kStateParts) {
      s.part(part).copy_from(read(switching::state_tensor_name(s.name, part), s.shape, s.region_of(part)));
    }
  }
}

std::vector<SavedShard> ShardedState::shards(int rank, bool with_moments) const {
  std::vector<SavedShard> out;
  for (const TensorState& s : tensors) {
    for (StatePart part : switching::kStateParts) {
      if (part != StatePart::kValue && !with_moments) continue;
      if (!counts_once(s.annotation_of(part), s.shape, rank)) continue;
      // Host tensors (a GPU rank's copied out): checkpoints and exports read them on the host.
      out.push_back({switching::state_tensor_name(s.name, part), s.shape, s.region_of(part), s.part(part).to_host()});
    }
  }
  return out;
}

std::vector<int64_t> offsets_in(const Region& outer, const Region& inner) {
  std::vector<int64_t> starts(inner.begin.size());
  for (size_t d = 0; d < starts.size(); ++d) starts[d] = inner.begin[d] - outer.begin[d];
  return starts;
}

Tensor copy_out(const Tensor& t, const Region& outer, const Region& inner, Allocator* allocator) {
  if (!t.on_host()) {  // a GPU's tensor: the box is cut on the host, then copied to `allocator`
    const Tensor cut = copy_out(t.to_host(), outer, inner, nullptr);
    return allocator == nullptr ? cut : cut.clone(allocator);
  }
  // A host tensor cut for a GPU (a CP rank's share of a fed placeholder): cut here, then copied in.
  if (allocator != nullptr && allocator->device().type != DeviceType::kCPU) {
    return copy_out(t, outer, inner, nullptr).clone(allocator);
  }
  Tensor out = Tensor::empty(inner.shape(), t.dtype(), allocator);
  kernels::copy_region(t, offsets_in(outer, inner), out, std::vector<int64_t>(inner.begin.size(), 0),
                       inner.shape().dims());
  return out;
}

bool counts_once(const Annotation& a, const Shape& shape, int device) {
  const auto where = a.locate(device);
  if (!where) return false;
  const auto [g, i] = *where;
  if (a.hdim() == sharding::kDuplicate && g != 0) return false;
  const Region part = a.group_part(g, shape);
  const Region mine = a.ds(g).region(i, part);
  for (int j = 0; j < i; ++j) {
    if (a.ds(g).region(j, part) == mine) return false;
  }
  return true;
}

}  // namespace hspmd::runtime
