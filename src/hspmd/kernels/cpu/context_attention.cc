// context_attention_fwd / _bwd (kernels/context_attention.h) on the CPU: the tiled core of
// cpu/attention_tiles.h (shared with attention_fwd/_bwd), with queries addressed by their packed
// position instead of their row.
//
// The k/v rows are first put back in packed order (one copy, O(Tk * Nkv * D): small next to the
// attention). The rank's query rows are cut into tiles of at most B_q rows that are consecutive in the
// packed batch and inside one document; a zigzag CP split gives 2 runs per packed row, so tiles are
// full but for the ends of runs and documents. The gradients of the keys are computed in packed
// order and then scattered back to the rows' order (kv_index).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "hspmd/kernels/context_attention.h"

#include "hspmd/kernels/cpu/attention_tiles.h"

namespace hspmd::kernels {
namespace {

struct ContextDims {
  int64_t tq = 0, tk = 0, nq = 0, nkv = 0, d = 0;
  cpu::AttentionBlocks block;
  double scale = 1.0;
  std::vector<int64_t> cu;
  std::vector<int64_t> q_pos, kv_pos;
  bool identity = false;  // q_index = kv_index = 0..T-1: plain attention
  std::vector<cpu::QueryTile> tiles;
};

std::vector<int64_t> int_values(const char* kernel, const char* name, const Tensor& t, int64_t expected_len) {
  HSPMD_CHECK(t.defined() && t.rank() == 1 && (t.dtype() == DType::kInt32 || t.dtype() == DType::kInt64))
      << kernel << ": " << name << " is " << (t.defined() ? t.to_string() : "undefined") << ", expected int64["
      << expected_len << "]";
  HSPMD_CHECK(expected_len < 0 || t.dim(0) == expected_len)
      << kernel << ": " << name << " is " << t.to_string() << ", expected " << expected_len << " entries";
  std::vector<int64_t> out(static_cast<size_t>(t.dim(0)));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = t.dtype() == DType::kInt32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
  }
  return out;
}

ContextDims check_context(const char* kernel, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& cu_seqlens, const Tensor& q_index, const Tensor& kv_index, const Tensor& out,
                          const Tensor& lse, const AttentionOptions& options) {
  HSPMD_CHECK(q.defined() && k.defined() && v.defined()) << kernel << ": undefined q, k or v";
  HSPMD_CHECK(q.rank() == 3 && k.rank() == 3) << kernel << ": q " << q.to_string() << " and k " << k.to_string()
                                              << " must be [T, N, D]";
  HSPMD_CHECK(q.dtype() == DType::kFloat32 || q.dtype() == DType::kFloat64)
      << kernel << ": q is " << q.to_string() << ", expected float32 or float64";
  ContextDims a;
  a.tq = q.dim(0);
  a.tk = k.dim(0);
  a.nq = q.dim(1);
  a.nkv = k.dim(1);
  a.d = q.dim(2);
  HSPMD_CHECK(k.dim(2) == a.d && k.dtype() == q.dtype()) << kernel << ": k " << k.to_string()
                                                         << " does not match q " << q.to_string();
  HSPMD_CHECK(v.shape() == k.shape() && v.dtype() == k.dtype())
      << kernel << ": v is " << v.to_string() << ", expected " << k.to_string() << " like k";
  HSPMD_CHECK(a.nkv >= 1 && a.nq % a.nkv == 0)
      << kernel << ": " << a.nkv << " kv heads must divide " << a.nq << " query heads";
  HSPMD_CHECK(out.defined() && out.shape() == q.shape() && out.dtype() == q.dtype())
      << kernel << ": out is " << (out.defined() ? out.to_string() : "undefined") << ", expected " << q.to_string();
  HSPMD_CHECK(lse.defined() && lse.shape() == Shape({a.nq, a.tq}) && lse.dtype() == q.dtype())
      << kernel << ": lse is " << (lse.defined() ? lse.to_string() : "undefined") << ", expected "
      << dtype_name(q.dtype()) << Shape({a.nq, a.tq}).to_string();
  HSPMD_CHECK(options.window >= 0) << kernel << ": window " << options.window << " must be >= 0 (0: none)";
  a.scale = options.scale != 0.0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(a.d));
  a.block = cpu::attention_blocks(q.dtype(), a.d);

  a.cu = int_values(kernel, "cu_seqlens", cu_seqlens, -1);
  HSPMD_CHECK(!a.cu.empty() && a.cu.front() == 0 && a.cu.back() == a.tk)
      << kernel << ": cu_seqlens must run from 0 to the " << a.tk << " key rows, got " << cu_seqlens.to_string();
  for (size_t s = 1; s < a.cu.size(); ++s) {
    HSPMD_CHECK(a.cu[s] >= a.cu[s - 1]) << kernel << ": cu_seqlens[" << s << "] = " << a.cu[s] << " decreases";
  }
  a.kv_pos = int_values(kernel, "kv_index", kv_index, a.tk);
  a.q_pos = int_values(kernel, "q_index", q_index, a.tq);
  std::vector<char> seen(static_cast<size_t>(a.tk), 0);
  for (int64_t i = 0; i < a.tk; ++i) {
    const int64_t p = a.kv_pos[i];
    HSPMD_CHECK(p >= 0 && p < a.tk && !seen[p])
        << kernel << ": kv_index[" << i << "] = " << p << " is " << (p >= 0 && p < a.tk ? "repeated" : "out of range")
        << "; kv_index must be a permutation of 0.." << a.tk - 1;
    seen[p] = 1;
  }
  std::fill(seen.begin(), seen.end(), 0);
  for (int64_t i = 0; i < a.tq; ++i) {
    const int64_t p = a.q_pos[i];
    HSPMD_CHECK(p >= 0 && p < a.tk && !seen[p])
        << kernel << ": q_index[" << i << "] = " << p << " is " << (p >= 0 && p < a.tk ? "repeated" : "out of range")
        << " (the batch has " << a.tk << " tokens)";
    seen[p] = 1;
  }
  a.identity = a.tq == a.tk;
  for (int64_t i = 0; a.identity && i < a.tq; ++i) a.identity = a.q_pos[i] == i && a.kv_pos[i] == i;

  for (int64_t r = 0; r < a.tq; ++r) {
    const int64_t p = a.q_pos[r];
    const int64_t seq_start = *(std::upper_bound(a.cu.begin(), a.cu.end(), p) - 1);
    cpu::QueryTile* last = a.tiles.empty() ? nullptr : &a.tiles.back();
    if (last != nullptr && last->seq_start == seq_start && last->pos + last->len == p && last->len < a.block.queries) {
      ++last->len;
    } else {
      a.tiles.push_back({.row = r, .pos = p, .len = 1, .seq_start = seq_start});
    }
  }
  return a;
}

// Rows of `t` [rows, ...] in packed order: out[pos[i]] = t[i].
template <typename T>
std::vector<T> to_packed(const Tensor& t, const std::vector<int64_t>& pos) {
  const int64_t row = t.numel() / std::max<int64_t>(t.dim(0), 1);
  std::vector<T> out(static_cast<size_t>(t.numel()));
  const T* src = t.data<T>();
  for (size_t i = 0; i < pos.size(); ++i) std::copy(src + i * row, src + (i + 1) * row, out.data() + pos[i] * row);
  return out;
}

// The forward passes undefined dout/dq/dk/dv.
template <typename T>
void run_typed(const ContextDims& a, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
               const AttentionOptions& options) {
  const std::vector<T> kp = to_packed<T>(k, a.kv_pos), vp = to_packed<T>(v, a.kv_pos);
  cpu::AttentionTiles<T> x{.q = q.data<T>(),
                           .k = kp.data(),
                           .v = vp.data(),
                           .out = out.data<T>(),
                           .lse = lse.data<T>(),
                           .tq = a.tq,
                           .nq = a.nq,
                           .nkv = a.nkv,
                           .d = a.d,
                           .scale = static_cast<T>(a.scale),
                           .block = a.block,
                           .round_operands = options.bf16_operands,
                           .window = options.window};
  if (!dout.defined()) return cpu::attention_forward(x, a.tiles);
  // Keys after their document's last query here get no gradient: zero, as the backward leaves them.
  std::vector<T> dkp(kp.size(), T(0)), dvp(vp.size(), T(0));
  x.dout = dout.data<T>();
  x.dq = dq.data<T>();
  x.dk = dkp.data();
  x.dv = dvp.data();
  cpu::attention_backward(x, a.tiles);
  // Back to the rows' order.
  const int64_t row = a.nkv * a.d;
  T *dkr = dk.data<T>(), *dvr = dv.data<T>();
  for (int64_t i = 0; i < a.tk; ++i) {
    std::copy(dkp.data() + a.kv_pos[i] * row, dkp.data() + (a.kv_pos[i] + 1) * row, dkr + i * row);
    std::copy(dvp.data() + a.kv_pos[i] * row, dvp.data() + (a.kv_pos[i] + 1) * row, dvr + i * row);
  }
}

// A gradient output must be shaped like the input it belongs to.
void check_grad(const char* name, const Tensor& t, const Tensor& like) {
  HSPMD_CHECK(t.defined() && t.shape() == like.shape() && t.dtype() == like.dtype())
      << "context_attention_bwd: " << name << " is " << (t.defined() ? t.to_string() : "undefined")
      << ", expected " << like.to_string();
}

}  // namespace

void context_attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens,
                           const Tensor& q_index, const Tensor& kv_index, const Tensor& out, const Tensor& lse,
                           const AttentionOptions& options) {
  const ContextDims a =
      check_context("context_attention_fwd", q, k, v, cu_seqlens, q_index, kv_index, out, lse, options);
  if (a.identity) return attention_fwd(q, k, v, cu_seqlens, out, lse, options);
  if (a.tq == 0) return;
  // bf16 operands are rounded as the tiles copy them, as the single-rank kernel does (a CP rank
  // computes what one rank computes).
  if (q.dtype() == DType::kFloat32) {
    run_typed<float>(a, q, k, v, out, lse, {}, {}, {}, {}, options);
  } else {
    run_typed<double>(a, q, k, v, out, lse, {}, {}, {}, {}, options);
  }
}

void context_attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens,
                           const Tensor& q_index, const Tensor& kv_index, const Tensor& out, const Tensor& lse,
                           const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                           const AttentionOptions& options) {
  const ContextDims a =
      check_context("context_attention_bwd", q, k, v, cu_seqlens, q_index, kv_index, out, lse, options);
  check_grad("dout", dout, q);
  check_grad("dq", dq, q);
  check_grad("dk", dk, k);
  check_grad("dv", dv, v);
  if (a.identity) return attention_bwd(q, k, v, cu_seqlens, out, lse, dout, dq, dk, dv, options);
  if (a.tq == 0) {  // no query here: no contribution to any key
    std::memset(dk.raw_data(), 0, dk.nbytes());
    std::memset(dv.raw_data(), 0, dv.nbytes());
    return;
  }
  if (q.dtype() == DType::kFloat32) {
    run_typed<float>(a, q, k, v, out, lse, dout, dq, dk, dv, options);
  } else {
    run_typed<double>(a, q, k, v, out, lse, dout, dq, dk, dv, options);
  }
}

}  // namespace hspmd::kernels
