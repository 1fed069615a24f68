// Shared pieces of the deduction rules of graph/ops/*.cc (declared in op_defs.h).
#include "hspmd/core/error.h"
#include "hspmd/graph/ops/op_defs.h"
#include "hspmd/sharding/deduce.h"

namespace hspmd::graph::detail {

using sharding::Annotation;
using sharding::DistState;
using sharding::kDuplicate;

namespace {
Annotation without_zero(const Annotation& a) {
  std::vector<DistState> ds;
  for (const DistState& s : a.ds_union()) ds.push_back(s.with_zero(false));
  return a.with_ds_union(std::move(ds));
}
}  // namespace

std::string op_label(const DeduceContext& ctx) {
  return "'" + ctx.op.name + "' (" + std::string(op_kind_name(ctx.op.kind)) + ")";
}

void expect_same_placement(const DeduceContext& ctx) { sharding::check_same_placement(op_label(ctx), ctx.inputs); }

void expect_all_dup(const DeduceContext& ctx, int input) {
  const Annotation& a = ctx.inputs.at(input);
  bool dup = a.hsize() == 1 || a.hdim() == kDuplicate;
  for (const DistState& ds : a.ds_union()) {
    for (const DistState::Entry& e : ds.entries()) dup = dup && e.dim == kDuplicate;
  }
  HSPMD_CHECK(dup) << ctx.where() << ": input " << input << " is " << a.to_string()
                   << " but must be duplicated on every device; insert a Reshard before input " << input;
}

void expect_annotation(const DeduceContext& ctx, int input, const Annotation& expected) {
  const Annotation& a = ctx.inputs.at(input);
  HSPMD_CHECK(without_zero(a) == without_zero(expected))
      << ctx.where() << ": input " << input << " is " << a.to_string() << " but the op needs "
      << expected.to_string() << " given input 0 " << ctx.inputs.at(0).to_string()
      << "; insert a Reshard before input " << input;
}

Annotation map_dims(const DeduceContext& ctx, const Annotation& a, const std::string& what,
                    const std::function<int(int)>& map) {
  std::vector<DistState> states;
  for (const DistState& ds : a.ds_union()) {
    std::vector<DistState::Entry> entries;
    for (const DistState::Entry& e : ds.entries()) {
      const int dim = map(e.dim);
      // Adjacent entries on one dim merge into one digit of the mixed radix (device -> coordinate
      // map unchanged): (D:2, S1:2) mapped S1 -> D is (D:4).
      if (!entries.empty() && entries.back().dim == dim) {
        entries.back().degree *= e.degree;
      } else {
        entries.push_back({dim, e.degree});
      }
    }
    try {
      states.push_back(DistState::make(std::move(entries)));
    } catch (const Error&) {
      // Two entries mapped to one dim (e.g. two split dims both reduced to partial).
      HSPMD_THROW() << ctx.where() << ": " << what << " " << a.to_string()
                    << " would shard one dim of the result twice; insert a Reshard before it";
    }
  }
  const int hdim = a.hsize() > 1 ? map(a.hdim()) : kDuplicate;
  return Annotation::make(a.dg_union(), std::move(states), hdim);
}

Annotation transposed(const DeduceContext& ctx, const Annotation& a) {
  return map_dims(ctx, a, "transposed input", [](int d) { return d == 0 ? 1 : d == 1 ? 0 : d; });
}

Annotation planned_output(const DeduceContext& ctx, const TensorInfo& out) {
  HSPMD_CHECK(ctx.planned != nullptr && !ctx.planned->is_null())
      << ctx.where() << ": the annotation plan has no entry '" << ctx.op.name << "'";
  if (is_static(out.shape)) {
    Shape shape = evaluate(out.shape, {});
    ctx.planned->validate_for(shape, ctx.op.name);
  }
  return *ctx.planned;
}

}  // namespace hspmd::graph::detail
