// Builders for forward ops: each appends one op of the registry to a Graph and returns its
// output(s). Dimension letters: T tokens, H hidden, V vocab, F MLP, Nq/Nkv heads, D head dim,
// N sequences in a packed batch.
//
//   TensorRef h = ops::rms_norm(g, x, w_norm, 1e-5, "model.layers.0.input_layernorm");
//   TensorRef q = ops::matmul(g, h, w_q, {.trans_b = true}, "model.layers.0.q_proj");  // x W^T
//   q = ops::reshape(g, q, {T, 4, 8}, "model.layers.0.q_heads");
//   q = ops::rope(g, q, positions, 10000.0, "model.layers.0.q_rope");
//   TensorRef loss = ops::cross_entropy(g, logits, targets, loss_scale, -100, "loss");
#pragma once

#include <string>
#include <vector>

#include "hspmd/graph/graph.h"

namespace hspmd::graph::ops {

struct MatmulAttrs {
  bool trans_a = false;
  bool trans_b = false;
  bool bf16_operands = false;  // bf16 mixed precision (OpAttrs::bf16_operands)
};

// table [V, H], ids [T] int32/int64 -> [T, H]; the row of padding_id (>= 0) gets no gradient
// (PyTorch's padding_idx).
TensorRef embedding(Graph& g, TensorRef table, TensorRef ids, const std::string& name, int64_t padding_id = -1);
// x [..., H], weight [H] -> x * rstd * (weight_offset + weight)  [..., H]  (the op's second output,
// rstd [...], is for the backward); Gemma's norms scale by (1 + weight): weight_offset = 1.
TensorRef rms_norm(Graph& g, TensorRef x, TensorRef weight, double eps, const std::string& name,
                   double weight_offset = 0.0);
// op(a) [M, K] @ op(b) [K, N] -> [M, N]  (2-D operands)
TensorRef matmul(Graph& g, TensorRef a, TensorRef b, MatmulAttrs attrs, const std::string& name);
// x [T, N, D], positions [T] -> [T, N, D]: Hugging Face rotate-half RoPE with D/2 inverse
// frequencies (a scaled RoPE's, models/rope_parameters.h), or the unscaled theta^(-2i/D).
TensorRef rope(Graph& g, TensorRef x, TensorRef positions, std::vector<double> inv_freq, const std::string& name);
TensorRef rope(Graph& g, TensorRef x, TensorRef positions, double theta, const std::string& name);
// q [T, Nq, D], k, v [T, Nkv, D], cu_seqlens [N + 1] -> [T, Nq, D]: causal within each sequence
// (bf16_operands: OpAttrs::bf16_operands); window > 0: sliding-window attention, the query at
// position i of its sequence keeps the keys i - window < j <= i (transformers' sliding_window).
TensorRef attention(Graph& g, TensorRef q, TensorRef k, TensorRef v, TensorRef cu_seqlens, const std::string& name,
                    double scale = 0.0, bool bf16_operands = false, int64_t window = 0);
// The same with the tokens' packed positions, so the query rows may be any subset of the batch in any
// order (context parallelism, graph/ops/context_attention.cc): q [Tq, Nq, D], k, v [Tk, Nkv, D],
// cu_seqlens [N + 1] over the Tk packed tokens, q_index [Tq], kv_index [Tk] -> [Tq, Nq, D].
TensorRef context_attention(Graph& g, TensorRef q, TensorRef k, TensorRef v, TensorRef cu_seqlens, TensorRef q_index,
                            TensorRef kv_index, const std::string& name, double scale = 0.0,
                            bool bf16_operands = false, int64_t window = 0);
// silu(gate) * up, same shapes
TensorRef swiglu(Graph& g, TensorRef gate, TensorRef up, const std::string& name);
// gelu_tanh(gate) * up, same shapes (Gemma's MLP, transformers' gelu_pytorch_tanh)
TensorRef geglu_tanh(Graph& g, TensorRef gate, TensorRef up, const std::string& name);
// factor * x (Gemma's embedding scale)
TensorRef scale(Graph& g, TensorRef x, double factor, const std::string& name);
TensorRef add(Graph& g, TensorRef a, TensorRef b, const std::string& name);
// x [..., N] + bias [N] (broadcast over the leading dims): a linear layer's bias
TensorRef bias_add(Graph& g, TensorRef x, TensorRef bias, const std::string& name);
// Same elements, new (symbolic) shape; numel must agree (checked at build when static, per run
// otherwise). Use SymExpr::exact_div in `shape` to split a symbolic dim.
TensorRef reshape(Graph& g, TensorRef x, const SymShape& shape, const std::string& name);
// A named point where a plan may change the tensor's annotation. Identity on one device.
TensorRef reshard(Graph& g, TensorRef x, const std::string& name);
// logits [T, V], targets [T] (ignore_index where no label), loss_scale [] -> loss []:
// loss_scale * sum of token losses. Feeding loss_scale = 1 / global token count normalizes by the
// GLOBAL batch (architecture §9), however the tokens are split across micro-batches and pipelines.
// softcap > 0: the logits are first replaced by softcap * tanh(logits / softcap) (Gemma).
TensorRef cross_entropy(Graph& g, TensorRef logits, TensorRef targets, TensorRef loss_scale, int64_t ignore_index,
                        const std::string& name, double softcap = 0.0);
// x [T, H], w [V, H], targets [T], loss_scale [] -> loss []: cross_entropy(matmul(x, w^T), ...) in
// one op that never holds the logits [T, V] (graph/ops/lm_head_loss.cc); bf16_operands as matmul's.
// softcap as cross_entropy's.
TensorRef lm_head_loss(Graph& g, TensorRef x, TensorRef w, TensorRef targets, TensorRef loss_scale,
                       int64_t ignore_index, bool bf16_operands, const std::string& name, double softcap = 0.0);
// A constant tensor.
TensorRef full(Graph& g, const SymShape& shape, DType dtype, double value, const std::string& name);

}  // namespace hspmd::graph::ops
