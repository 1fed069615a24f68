// Shared shape-rule checks (see op_defs.h).
#include "hspmd/core/error.h"
#include "hspmd/graph/ops/op_defs.h"

namespace hspmd::graph::detail {

namespace {
std::string describe(const ShapeContext& ctx, int i) {
  const TensorInfo& t = ctx.inputs.at(i);
  return "input " + std::to_string(i) + " " + std::string(dtype_name(t.dtype)) + to_string(t.shape);
}
}  // namespace

void expect_rank(const ShapeContext& ctx, int input, int rank) {
  HSPMD_CHECK(static_cast<int>(ctx.inputs.at(input).shape.size()) == rank)
      << ctx.where() << ": " << describe(ctx, input) << " must have rank " << rank;
}

void expect_floating(const ShapeContext& ctx, int input) {
  HSPMD_CHECK(is_floating(ctx.inputs.at(input).dtype))
      << ctx.where() << ": " << describe(ctx, input) << " must be floating point";
}

void expect_integer(const ShapeContext& ctx, int input) {
  DType d = ctx.inputs.at(input).dtype;
  HSPMD_CHECK(d == DType::kInt32 || d == DType::kInt64)
      << ctx.where() << ": " << describe(ctx, input) << " must be int32 or int64";
}

void expect_same_dtype(const ShapeContext& ctx, int a, int b) {
  HSPMD_CHECK(ctx.inputs.at(a).dtype == ctx.inputs.at(b).dtype)
      << ctx.where() << ": " << describe(ctx, a) << " and " << describe(ctx, b) << " must have the same dtype";
}

void expect_same_shape(const ShapeContext& ctx, int a, int b) {
  HSPMD_CHECK(ctx.inputs.at(a).shape == ctx.inputs.at(b).shape)
      << ctx.where() << ": " << describe(ctx, a) << " and " << describe(ctx, b) << " must have the same shape";
}

void expect_dim_eq(const ShapeContext& ctx, int a, int da, int b, int db) {
  const SymShape& sa = ctx.inputs.at(a).shape;
  const SymShape& sb = ctx.inputs.at(b).shape;
  HSPMD_ASSERT(da < static_cast<int>(sa.size()) && db < static_cast<int>(sb.size())) << ctx.where();
  HSPMD_CHECK(sa[da] == sb[db]) << ctx.where() << ": dim " << da << " of " << describe(ctx, a) << " must equal dim "
                                << db << " of " << describe(ctx, b);
}

}  // namespace hspmd::graph::detail
