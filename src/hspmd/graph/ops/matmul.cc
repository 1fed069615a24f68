// matmul: inputs a, b (2-D, same floating dtype); attrs trans_a, trans_b.
//   out [M, N] = op(a) [M, K] @ op(b) [K, N]. A linear layer x W^T is matmul(x, W, trans_b).
// The gradient is two more matmuls with the operands' transposes arranged so that no explicit
// transpose is ever materialized.
// Deduction (Figure 13): op(a) and op(b) combine position by position (sharding/deduce.h);
// a split of the contracted dim K in both gives a partial result. trans_a is handled by
// transposing a's annotation, so backward matmuls (dW = x^T dy) use the same table.
#include "hspmd/core/error.h"
#include "hspmd/graph/ops.h"
#include "hspmd/graph/ops/op_defs.h"
#include "hspmd/kernels/matmul.h"
#include "hspmd/sharding/deduce.h"

namespace hspmd::graph {
namespace detail {

OpDef matmul_def() {
  OpDef d{OpKind::kMatmul, "matmul", 2, 1, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    expect_rank(ctx, 0, 2);
    expect_rank(ctx, 1, 2);
    expect_floating(ctx, 0);
    expect_same_dtype(ctx, 0, 1);
    HSPMD_CHECK(!ctx.op.attrs.bf16_operands || ctx.inputs[0].dtype == DType::kFloat32)
        << ctx.where() << ": bf16 operands are rounded from float32, input 0 is " << dtype_name(ctx.inputs[0].dtype);
    const SymShape& a = ctx.inputs[0].shape;
    const SymShape& b = ctx.inputs[1].shape;
    const OpAttrs& at = ctx.op.attrs;
    SymExpr m = at.trans_a ? a[1] : a[0], ka = at.trans_a ? a[0] : a[1];
    SymExpr kb = at.trans_b ? b[1] : b[0], n = at.trans_b ? b[0] : b[1];
    HSPMD_CHECK(ka == kb) << ctx.where() << ": inner dims differ: op(a) is [" << m.to_string() << ", "
                          << ka.to_string() << "], op(b) is [" << kb.to_string() << ", " << n.to_string() << "]";
    return std::vector<TensorInfo>{{SymShape{m, n}, ctx.inputs[0].dtype}};
  };
  d.grad = [](GradContext& c) {
    TensorRef a = c.input(0), b = c.input(1), dc = c.output_grads[0];
    bool ta = c.op.attrs.trans_a, tb = c.op.attrs.trans_b;
    // The gradient products run at the forward's precision: under bf16 they round dC and the
    // saved operand, and accumulate in float32 like the forward.
    const bool bf16 = c.op.attrs.bf16_operands;
    auto mm = [&](TensorRef x, TensorRef y, bool tx, bool ty, const std::string& suffix) {
      return ops::matmul(c.graph, x, y, {.trans_a = tx, .trans_b = ty, .bf16_operands = bf16}, c.name(suffix));
    };
    // C = op(A) op(B): dop(A) = dC op(B)^T, dop(B) = op(A)^T dC, then undo the op on each side.
    TensorRef da = ta ? mm(b, dc, tb, true, "grad_a") : mm(dc, b, false, !tb, "grad_a");
    TensorRef db = tb ? mm(dc, a, true, ta, "grad_b") : mm(a, dc, !ta, false, "grad_b");
    return std::vector<TensorRef>{da, db};
  };
  d.deduce = [](const DeduceContext& ctx) {
    expect_same_placement(ctx);
    const OpAttrs& at = ctx.op.attrs;
    sharding::Annotation a = at.trans_a ? transposed(ctx, ctx.inputs[0]) : ctx.inputs[0];
    return std::vector<sharding::Annotation>{sharding::deduce_matmul(op_label(ctx), a, ctx.inputs[1], 2, at.trans_b)};
  };
  return d;
}

void add_matmul_kernels(KernelRegistry& r) {
  r.add(OpKind::kMatmul, DeviceType::kCPU, kFloatOrBf16, [](KernelContext& k) {
    Tensor out = k.new_output(0);
    const OpAttrs& at = k.op.attrs;
    kernels::matmul(k.inputs[0], k.inputs[1], out,
                    {.trans_a = at.trans_a, .trans_b = at.trans_b, .bf16_operands = at.bf16_operands});
    k.outputs = {out};
  });
}

}  // namespace detail

TensorRef ops::matmul(Graph& g, TensorRef a, TensorRef b, MatmulAttrs attrs, const std::string& name) {
  OpAttrs a2;
  a2.trans_a = attrs.trans_a;
  a2.trans_b = attrs.trans_b;
  a2.bf16_operands = attrs.bf16_operands;
  return g.add_op1(OpKind::kMatmul, name, {a, b}, a2);
}

}  // namespace hspmd::graph
