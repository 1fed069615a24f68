// attention_fwd / attention_bwd (kernels/attention.h): flash-style blocked attention on the CPU, on
// the tiled core of cpu/attention_tiles.h (shared with context_attention).
//
// Every sequence is cut into query tiles of B_q tokens starting at its first token, so only the last
// key chunk a tile sees needs the causal mask. k and v are already in packed order. The backward's
// parallelism is limited to (sequences x kv heads), the price of sums in one fixed order (bitwise
// identical results for any thread count).
#include "hspmd/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "hspmd/kernels/cpu/attention_tiles.h"

namespace hspmd::kernels {
namespace {

struct AttentionDims {
  int64_t tokens = 0, nq = 0, nkv = 0, d = 0;
  std::vector<int64_t> cu;  // sequence boundaries, cu.front() == 0, cu.back() == tokens
  double scale = 1.0;
};

void check_same(const char* kernel, const char* name, const Tensor& t, const Tensor& like, const char* like_name) {
  HSPMD_CHECK(t.defined()) << kernel << ": " << name << " is undefined";
  HSPMD_CHECK(t.shape() == like.shape() && t.dtype() == like.dtype())
      << kernel << ": " << name << " is " << t.to_string() << ", expected " << like.to_string() << " like "
      << like_name;
}

AttentionDims check_attention(const char* kernel, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& cu_seqlens, const Tensor& out, const Tensor& lse,
                              const AttentionOptions& options) {
  HSPMD_CHECK(q.defined() && k.defined() && cu_seqlens.defined()) << kernel << ": undefined input";
  HSPMD_CHECK(q.rank() == 3 && k.rank() == 3) << kernel << ": q " << q.to_string() << " and k " << k.to_string()
                                              << " must be [T, N, D]";
  HSPMD_CHECK(q.dtype() == DType::kFloat32 || q.dtype() == DType::kFloat64)
      << kernel << ": q is " << q.to_string() << ", expected float32 or float64";
  AttentionDims a;
  a.tokens = q.dim(0);
  a.nq = q.dim(1);
  a.nkv = k.dim(1);
  a.d = q.dim(2);
  HSPMD_CHECK(k.dim(0) == a.tokens && k.dim(2) == a.d && k.dtype() == q.dtype())
      << kernel << ": k " << k.to_string() << " does not match q " << q.to_string();
  HSPMD_CHECK(a.nkv >= 1 && a.nq % a.nkv == 0)
      << kernel << ": " << a.nkv << " kv heads must divide " << a.nq << " query heads";
  HSPMD_CHECK(a.d >= 1) << kernel << ": head dim must be >= 1, q is " << q.to_string();
  check_same(kernel, "v", v, k, "k");
  check_same(kernel, "out", out, q, "q");
  HSPMD_CHECK(lse.defined() && lse.shape() == Shape({a.nq, a.tokens}) && lse.dtype() == q.dtype())
      << kernel << ": lse is " << (lse.defined() ? lse.to_string() : "undefined") << ", expected "
      << dtype_name(q.dtype()) << Shape({a.nq, a.tokens}).to_string();

  HSPMD_CHECK(cu_seqlens.rank() == 1 && cu_seqlens.dim(0) >= 1 &&
              (cu_seqlens.dtype() == DType::kInt32 || cu_seqlens.dtype() == DType::kInt64))
      << kernel << ": cu_seqlens is " << cu_seqlens.to_string() << ", expected int32/int64[nseq + 1]";
  a.cu.resize(static_cast<size_t>(cu_seqlens.numel()));
  for (size_t s = 0; s < a.cu.size(); ++s) {
    a.cu[s] = cu_seqlens.dtype() == DType::kInt32 ? cu_seqlens.data<int32_t>()[s] : cu_seqlens.data<int64_t>()[s];
    HSPMD_CHECK(s == 0 ? a.cu[s] == 0 : a.cu[s] >= a.cu[s - 1])
        << kernel << ": cu_seqlens[" << s << "] = " << a.cu[s] << " (must start at 0 and never decrease)";
  }
  HSPMD_CHECK(a.cu.back() == a.tokens) << kernel << ": cu_seqlens ends at " << a.cu.back() << " but q has "
                                       << a.tokens << " tokens";
  HSPMD_CHECK(!options.bf16_operands || q.dtype() == DType::kFloat32)
      << kernel << ": bf16 operands are rounded from float32 inputs, q is " << q.to_string();
  HSPMD_CHECK(options.window >= 0) << kernel << ": window " << options.window << " must be >= 0 (0: none)";
  a.scale = options.scale != 0.0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(a.d));
  return a;
}

// The tiles of B tokens of every sequence, from its first token.
std::vector<cpu::QueryTile> sequence_tiles(const AttentionDims& a, int64_t block) {
  std::vector<cpu::QueryTile> tiles;
  for (size_t s = 0; s + 1 < a.cu.size(); ++s) {
    for (int64_t p = a.cu[s]; p < a.cu[s + 1]; p += block) {
      tiles.push_back({.row = p, .pos = p, .len = std::min(block, a.cu[s + 1] - p), .seq_start = a.cu[s]});
    }
  }
  return tiles;
}

// The forward passes undefined dout/dq/dk/dv.
template <typename T>
void run_typed(const AttentionDims& a, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
               const AttentionOptions& options) {
  cpu::AttentionTiles<T> x{.q = q.data<T>(),
                           .k = k.data<T>(),
                           .v = v.data<T>(),
                           .out = out.data<T>(),
                           .lse = lse.data<T>(),
                           .tq = a.tokens,
                           .nq = a.nq,
                           .nkv = a.nkv,
                           .d = a.d,
                           .scale = static_cast<T>(a.scale),
                           .block = cpu::attention_blocks(q.dtype(), a.d),
                           .round_operands = options.bf16_operands,
                           .window = options.window};
  const std::vector<cpu::QueryTile> tiles = sequence_tiles(a, x.block.queries);
  if (!dout.defined()) return cpu::attention_forward(x, tiles);
  x.dout = dout.data<T>();
  x.dq = dq.data<T>();
  x.dk = dk.data<T>();
  x.dv = dv.data<T>();
  cpu::attention_backward(x, tiles);
}

}  // namespace

void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, const Tensor& out,
                   const Tensor& lse, const AttentionOptions& options) {
  const AttentionDims a = check_attention("attention_fwd", q, k, v, cu_seqlens, out, lse, options);
  if (a.tokens == 0) return;
  // bf16 operands are rounded as the tiles copy them, as the single-rank kernel does (a CP rank
  // computes what one rank computes).
  if (q.dtype() == DType::kFloat32) {
    run_typed<float>(a, q, k, v, out, lse, {}, {}, {}, {}, options);
  } else {
    run_typed<double>(a, q, k, v, out, lse, {}, {}, {}, {}, options);
  }
}

void attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, const Tensor& out,
                   const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                   const AttentionOptions& options) {
  const AttentionDims a = check_attention("attention_bwd", q, k, v, cu_seqlens, out, lse, options);
  check_same("attention_bwd", "dout", dout, q, "q");
  check_same("attention_bwd", "dq", dq, q, "q");
  check_same("attention_bwd", "dk", dk, k, "k");
  check_same("attention_bwd", "dv", dv, k, "k");
  if (a.tokens == 0) return;
  if (q.dtype() == DType::kFloat32) {
    run_typed<float>(a, q, k, v, out, lse, dout, dq, dk, dv, options);
  } else {
    run_typed<double>(a, q, k, v, out, lse, dout, dq, dk, dv, options);
  }
}

}  // namespace hspmd::kernels
