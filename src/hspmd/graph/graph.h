// The defined graph (paper §3, §6): a single-device view of the model, built once and shared by
// every strategy. Ops are appended in topological order (an op only consumes tensors that exist),
// so op ids are a valid execution order. Shapes are symbolic (core/sym_expr.h): one graph serves
// every batch shape; Graph::bind resolves the symbols of one run.
//
//   Graph g;
//   SymExpr T = SymExpr::symbol("T");
//   TensorRef x = g.placeholder("x", {T, 16}, DType::kFloat64);           // x [T, H]
//   TensorRef w = g.parameter("w", Shape{32, 16}, DType::kFloat64, InitSpec::normal(0.02));
//   TensorRef y = ops::matmul(g, x, w, {.trans_b = true}, "proj");         // y [T, 32]
//   g.info(y).shape  ==  SymShape{T, 32}
//
// Ops carry a layer tag (decoder layer index, -1 outside layers) and a backward flag; the
// executor uses them for per-layer recomputation, later passes for pipeline stages. Placeholders,
// parameters and Reshards have unique names: plans and checkpoints refer to them by name.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hspmd/core/dtype.h"
#include "hspmd/core/sym_expr.h"
#include "hspmd/core/tensor.h"
#include "hspmd/graph/init.h"
#include "hspmd/graph/op_kind.h"

namespace hspmd::graph {

class OpRegistry;

// Output `index` of op `op`. A plain value; meaningful only with its Graph.
struct TensorRef {
  int op = -1;
  int index = 0;
  bool valid() const { return op >= 0; }
  friend bool operator==(const TensorRef&, const TensorRef&) = default;
  friend auto operator<=>(const TensorRef&, const TensorRef&) = default;
};

struct TensorInfo {
  SymShape shape;
  DType dtype = DType::kFloat32;
  friend bool operator==(const TensorInfo&, const TensorInfo&) = default;
};

// Attributes of an op. Each op kind documents (in its graph/ops/*.cc file) which fields it
// reads; the others keep these defaults.
struct OpAttrs {
  bool trans_a = false;         // matmul: use a^T
  bool trans_b = false;         // matmul: use b^T
  double eps = 0.0;             // rms_norm
  double weight_offset = 0.0;   // rms_norm: y = x * rstd * (weight_offset + weight); Gemma's norms use 1
  std::vector<double> inv_freq;  // rope: inverse frequency of each rotate-half pair (D/2 values)
  double scale = 0.0;           // attention softmax scale, 0 = 1/sqrt(D); scale: the factor
  // attention, context_attention (and their backward ops): the sliding window, a query at position i
  // of its document keeps the keys i - window < j <= i; 0: every earlier key (plain causal).
  int64_t window = 0;
  // cross_entropy, lm_head_loss (and their backward ops): the logits are soft-capped first,
  // softcap * tanh(logits / softcap) (Gemma's final_logit_softcapping); 0: not capped.
  double softcap = 0.0;
  int64_t ignore_index = -100;  // cross_entropy
  int64_t vocab_start = 0;      // embedding, cross_entropy: first vocabulary entry this rank holds
  int64_t vocab_size = 0;       // cross_entropy: whole vocabulary when a rank holds a shard (0: no shard)
  bool outside_ids_are_zero = false;  // embedding: ids outside the table give zero rows
  // embedding (and its backward): the id whose row the lookup gives no gradient, as PyTorch's
  // nn.Embedding(padding_idx) does (transformers' decoders pass pad_token_id); -1: none.
  int64_t padding_id = -1;
  // matmul, attention (and their backward ops): float32 operands rounded to bfloat16 before the
  // products, float32 accumulation and outputs: bf16 mixed precision (docs/mixed-precision.md).
  bool bf16_operands = false;
  double value = 0.0;           // full
  SymShape shape;               // placeholder / parameter / full / reshape target / embedding_bwd table
  DType dtype = DType::kFloat32;  // placeholder / parameter / full
  InitSpec init;                // parameter
  friend bool operator==(const OpAttrs&, const OpAttrs&) = default;
};

struct Op {
  OpKind kind = OpKind::kPlaceholder;
  std::string name;
  std::vector<TensorRef> inputs;
  std::vector<TensorInfo> outputs;
  OpAttrs attrs;
  int layer = -1;         // decoder layer the op belongs to (-1: none)
  bool backward = false;  // built by autograd
};

using TensorMap = std::map<std::string, Tensor>;

class Graph {
 public:
  Graph();  // uses OpRegistry::standard()
  explicit Graph(const OpRegistry& registry);

  TensorRef placeholder(const std::string& name, const SymShape& shape, DType dtype);
  TensorRef parameter(const std::string& name, const Shape& shape, DType dtype, InitSpec init);
  // Appends an op: checks arity, runs the kind's shape rule (errors name `name` and the kind) and
  // records the divisibility constraints of the new shapes. Returns its outputs.
  std::vector<TensorRef> add_op(OpKind kind, const std::string& name, const std::vector<TensorRef>& inputs,
                                const OpAttrs& attrs = {});
  TensorRef add_op1(OpKind kind, const std::string& name, const std::vector<TensorRef>& inputs,
                    const OpAttrs& attrs = {});

  // Layer tag and backward flag given to ops added from now on.
  void set_layer(int layer) { layer_ = layer; }
  int layer() const { return layer_; }
  void set_backward(bool backward) { backward_ = backward; }
  bool backward() const { return backward_; }

  int num_ops() const { return static_cast<int>(ops_.size()); }
  const Op& op(int id) const;
  const TensorInfo& info(TensorRef t) const;
  // "proj" for single-output ops, "attn:1" for output 1 of a multi-output op.
  std::string tensor_name(TensorRef t) const;
  const OpRegistry& registry() const { return *registry_; }

  // Placeholder, parameter or reshard by name; nullopt when absent.
  std::optional<TensorRef> find(const std::string& name) const;
  std::vector<TensorRef> placeholders() const;
  std::vector<TensorRef> parameters() const;

  // Symbols of one run from the fed placeholders (by name; missing ones are skipped), plus
  // `extra`. Checks dtypes and ranks, solves dims like N + 1, checks every dim against the fed
  // size, then checks the divisibility constraints of all ops: errors name the placeholder or
  // the op, the expression and the symbol values.
  SymBinding bind(const TensorMap& feeds, const SymBinding& extra = {}) const;
  void check_constraints(const SymBinding& binding) const;

  // One line per op: "%12 = matmul(%10, %3) [T, 32] float32  'model.layers.0.q_proj' L0".
  std::string to_string() const;

 private:
  struct Constraint {
    SymExpr expr;
    int op;
  };
  const OpRegistry* registry_;
  std::vector<Op> ops_;
  std::map<std::string, int> named_;  // placeholders, parameters, reshards
  std::vector<Constraint> constraints_;
  int layer_ = -1;
  bool backward_ = false;
};

// Initial values of every parameter of g, by name, from each one's InitSpec and `seed`
// (graph/init.h: the same values under every strategy).
TensorMap init_parameters(const Graph& g, uint64_t seed, Allocator* allocator = nullptr);

}  // namespace hspmd::graph
