// context_attention_fwd / _bwd (kernels/context_attention.h) on the CPU: the blocked online softmax
// of cpu/attention.cc, with queries addressed by their packed position instead of their row.
//
// The k/v rows are first put back in packed order (one copy, O(Tk * Nkv * D): small next to the
// attention). The rank's query rows are cut into tiles of at most B rows that are consecutive in the
// packed batch and inside one document; a zigzag CP split gives 2 runs per packed row, so tiles are
// full but for the ends of runs and documents. A tile at packed positions [p0, p0 + n) of a document
// starting at s sees key tiles starting at s, s + B, ... up to p0 + n - 1; a row r of it keeps the
// columns at packed positions <= p0 + r (the causal mask; a row may keep none of a late key tile).
//
// Forward: one task per (query tile, query head). Backward: one task per (document, kv head): it
// owns dK/dV of the document's keys for that head and dQ of the document's query rows for the heads
// sharing it, so no two tasks write the same memory and every sum has one fixed order (results do
// not depend on the thread count). The gradients of the keys are then scattered back to the rows'
// order (kv_index).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "hspmd/kernels/context_attention.h"

#include "hspmd/kernels/bf16_rounding.h"
#include "hspmd/kernels/cpu/blas.h"
#include "hspmd/kernels/cpu/vec_math.h"

namespace hspmd::kernels {
namespace {

struct QueryTile {
  int64_t row = 0;        // first local query row
  int64_t pos = 0;        // its packed position
  int64_t len = 0;        // rows (consecutive in the packed batch)
  int64_t seq = 0;        // document index
  int64_t seq_start = 0;  // packed position of the document's first token
};

struct ContextDims {
  int64_t tq = 0, tk = 0, nq = 0, nkv = 0, d = 0, group = 1, block = 64;
  double scale = 1.0;
  std::vector<int64_t> cu;
  std::vector<int64_t> q_pos, kv_pos;
  bool identity = false;  // q_index = kv_index = 0..T-1: plain attention
  std::vector<QueryTile> tiles;
};

int64_t block_size(int64_t d) {  // as cpu/attention.cc: GEMM tiles OpenBLAS keeps single-threaded
  int64_t b = 64;
  while (b > 8 && b * b * d > cpu::kSingleThreadedGemmWork) b /= 2;
  return b;
}

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
  a.group = a.nq / a.nkv;
  a.scale = options.scale != 0.0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(a.d));
  a.block = block_size(a.d);

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
    const int64_t s = std::upper_bound(a.cu.begin(), a.cu.end(), p) - a.cu.begin() - 1;
    QueryTile* last = a.tiles.empty() ? nullptr : &a.tiles.back();
    if (last != nullptr && last->seq == s && last->pos + last->len == p && last->len < a.block) {
      ++last->len;
    } else {
      a.tiles.push_back({r, p, 1, s, a.cu[s]});
    }
  }
  return a;
}

template <typename T>
struct ContextData {
  const T *q, *k, *v, *out, *dout;  // k, v in packed order
  T *o, *lse, *dq, *dk, *dv;        // dk, dv in packed order
  const T* delta;                   // [Nq, Tq] rowsum(dO * O), backward only
  int64_t ldq, ldk;
};

template <typename T>
struct TileScratch {
  std::vector<T> s, p, m, l;
  explicit TileScratch(int64_t b) : s(b * b), p(b * b), m(b), l(b) {}
};

// Columns of row r (packed position pos + r) that the causal mask keeps in the key tile at k0.
int64_t kept_columns(int64_t pos, int64_t r, int64_t k0, int64_t nk) {
  return std::clamp<int64_t>(pos + r - k0 + 1, 0, nk);
}

template <typename T>
void forward_tile(const ContextDims& a, const ContextData<T>& x, const QueryTile& tile, int64_t h,
                  TileScratch<T>& w) {
  const int64_t b = a.block, d = a.d, g = h / a.group, n = tile.len, last = tile.pos + n - 1;
  const T* q = x.q + tile.row * x.ldq + h * d;
  T* o = x.o + tile.row * x.ldq + h * d;
  T *s = w.s.data(), *m = w.m.data(), *l = w.l.data();
  for (int64_t r = 0; r < n; ++r) {
    std::memset(o + r * x.ldq, 0, sizeof(T) * d);
    m[r] = -std::numeric_limits<T>::infinity();
    l[r] = 0;
  }
  for (int64_t k0 = tile.seq_start; k0 <= last; k0 += b) {
    const int64_t nk = std::min(b, last + 1 - k0);
    const T* k = x.k + k0 * x.ldk + g * d;
    const T* v = x.v + k0 * x.ldk + g * d;
    cpu::gemm(false, true, n, nk, d, static_cast<T>(a.scale), q, x.ldq, k, x.ldk, T(0), s, b);
    for (int64_t r = 0; r < n; ++r) {
      T* row = s + r * b;
      const int64_t cols = kept_columns(tile.pos, r, k0, nk);
      if (cols == 0) {  // a later key than this query: nothing to add
        std::fill(row, row + nk, T(0));
        continue;
      }
      const bool first = l[r] == T(0);
      const T m_new = first ? cpu::row_max(row, cols) : std::max(m[r], cpu::row_max(row, cols));
      const T sum = cpu::exp_shift_sum(row, cols, m_new);
      std::fill(row + cols, row + nk, T(0));
      if (first) {
        l[r] = sum;
      } else {
        const T correction = std::exp(m[r] - m_new);
        l[r] = l[r] * correction + sum;
        if (correction != T(1)) {
          T* orow = o + r * x.ldq;
          for (int64_t c = 0; c < d; ++c) orow[c] *= correction;
        }
      }
      m[r] = m_new;
    }
    cpu::gemm(false, false, n, d, nk, T(1), s, b, v, x.ldk, T(1), o, x.ldq);
  }
  for (int64_t r = 0; r < n; ++r) {
    const T inv = T(1) / l[r];
    T* orow = o + r * x.ldq;
    for (int64_t c = 0; c < d; ++c) orow[c] *= inv;
    x.lse[h * a.tq + tile.row + r] = m[r] + std::log(l[r]);
  }
}

// One (document, kv head): every key tile of the document against every query tile of it there.
template <typename T>
void backward_document(const ContextDims& a, const ContextData<T>& x, const std::vector<const QueryTile*>& tiles,
                       int64_t g, TileScratch<T>& w) {
  const int64_t b = a.block, d = a.d;
  const T scale = static_cast<T>(a.scale);
  int64_t last = 0;
  for (const QueryTile* t : tiles) last = std::max(last, t->pos + t->len - 1);
  T *p = w.s.data(), *dp = w.p.data();
  for (int64_t k0 = tiles.front()->seq_start; k0 <= last; k0 += b) {
    const int64_t nk = std::min(b, last + 1 - k0);
    const T* k = x.k + k0 * x.ldk + g * d;
    const T* v = x.v + k0 * x.ldk + g * d;
    T* dk = x.dk + k0 * x.ldk + g * d;
    T* dv = x.dv + k0 * x.ldk + g * d;
    for (int64_t hh = 0; hh < a.group; ++hh) {
      const int64_t h = g * a.group + hh;
      for (const QueryTile* t : tiles) {
        const int64_t n = t->len;
        if (t->pos + n - 1 < k0) continue;  // every query of the tile precedes these keys
        const T* q = x.q + t->row * x.ldq + h * d;
        const T* dout = x.dout + t->row * x.ldq + h * d;
        T* dq = x.dq + t->row * x.ldq + h * d;
        const T* lse = x.lse + h * a.tq + t->row;
        const T* delta = x.delta + h * a.tq + t->row;
        cpu::gemm(false, true, n, nk, d, scale, q, x.ldq, k, x.ldk, T(0), p, b);
        for (int64_t r = 0; r < n; ++r) {
          const int64_t cols = kept_columns(t->pos, r, k0, nk);
          cpu::exp_shift_sum(p + r * b, cols, lse[r]);
          std::fill(p + r * b + cols, p + r * b + nk, T(0));
        }
        cpu::gemm(true, false, nk, d, n, T(1), p, b, dout, x.ldq, T(1), dv, x.ldk);
        cpu::gemm(false, true, n, nk, d, T(1), dout, x.ldq, v, x.ldk, T(0), dp, b);
        for (int64_t r = 0; r < n; ++r) cpu::softmax_grad_row(dp + r * b, p + r * b, nk, delta[r]);
        cpu::gemm(false, false, n, d, nk, scale, dp, b, k, x.ldk, T(1), dq, x.ldq);
        cpu::gemm(true, false, nk, d, n, scale, dp, b, q, x.ldq, T(1), dk, x.ldk);
      }
    }
  }
}

// Below this many flops a call stays on the calling thread (as cpu/attention.cc).
constexpr int64_t kMinParallelFlops = int64_t{1} << 21;

// Rows of `t` [rows, ...] in packed order: out[pos[i]] = t[i].
template <typename T>
std::vector<T> to_packed(const Tensor& t, const std::vector<int64_t>& pos) {
  const int64_t row = t.numel() / std::max<int64_t>(t.dim(0), 1);
  std::vector<T> out(static_cast<size_t>(t.numel()));
  const T* src = t.data<T>();
  for (size_t i = 0; i < pos.size(); ++i) std::copy(src + i * row, src + (i + 1) * row, out.data() + pos[i] * row);
  return out;
}

template <typename T>
void forward_typed(const ContextDims& a, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse) {
  const std::vector<T> kp = to_packed<T>(k, a.kv_pos), vp = to_packed<T>(v, a.kv_pos);
  ContextData<T> x{q.data<T>(), kp.data(), vp.data(), nullptr, nullptr, out.data<T>(), lse.data<T>(),
                   nullptr,     nullptr,   nullptr,   nullptr, a.nq * a.d, a.nkv * a.d};
  const int64_t ntiles = static_cast<int64_t>(a.tiles.size()), tasks = ntiles * a.nq;
  int64_t flops = 0;
  for (const QueryTile& t : a.tiles) flops += 4 * t.len * (t.pos + t.len - t.seq_start) * a.d * a.nq;
#pragma omp parallel if (tasks > 1 && flops >= kMinParallelFlops)
  {
    TileScratch<T> w(a.block);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < tasks; ++i) forward_tile(a, x, a.tiles[i / a.nq], i % a.nq, w);
  }
}

template <typename T>
void backward_typed(const ContextDims& a, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                    const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const std::vector<T> kp = to_packed<T>(k, a.kv_pos), vp = to_packed<T>(v, a.kv_pos);
  std::vector<T> dkp(kp.size(), T(0)), dvp(vp.size(), T(0));
  // Delta[h, r] = rowsum(dO * O), the softmax-backward correction of each query row.
  std::vector<T> delta(static_cast<size_t>(a.nq * a.tq));
  const T *o = out.data<T>(), *dO = dout.data<T>();
  for (int64_t r = 0; r < a.tq; ++r) {
    for (int64_t h = 0; h < a.nq; ++h) {
      const T* orow = o + (r * a.nq + h) * a.d;
      const T* drow = dO + (r * a.nq + h) * a.d;
      double acc = 0;
      for (int64_t c = 0; c < a.d; ++c) acc += static_cast<double>(orow[c]) * drow[c];
      delta[h * a.tq + r] = static_cast<T>(acc);
    }
  }
  std::memset(dq.raw_data(), 0, dq.nbytes());
  ContextData<T> x{q.data<T>(), kp.data(), vp.data(), o, dO, nullptr, lse.data<T>(), dq.data<T>(), dkp.data(),
                   dvp.data(),  delta.data(), a.nq * a.d, a.nkv * a.d};
  // The query tiles of each document (tiles of one document need not be adjacent in row order).
  std::vector<std::vector<const QueryTile*>> docs;
  std::vector<int64_t> doc_of(a.cu.size(), -1);
  for (const QueryTile& t : a.tiles) {
    if (doc_of[t.seq] < 0) {
      doc_of[t.seq] = static_cast<int64_t>(docs.size());
      docs.emplace_back();
    }
    docs[doc_of[t.seq]].push_back(&t);
  }
  const int64_t tasks = static_cast<int64_t>(docs.size()) * a.nkv;
  int64_t flops = 0;
  for (const QueryTile& t : a.tiles) flops += 10 * t.len * (t.pos + t.len - t.seq_start) * a.d * a.nq;
#pragma omp parallel if (tasks > 1 && flops >= kMinParallelFlops)
  {
    TileScratch<T> w(a.block);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < tasks; ++i) backward_document(a, x, docs[i / a.nkv], i % a.nkv, w);
  }
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

// x itself, or its copy rounded to bfloat16 when the options ask for bf16 operands (as the
// single-rank kernel does, so a CP rank computes what one rank computes).
Tensor operand(const Tensor& x, const AttentionOptions& options) {
  if (!options.bf16_operands) return x;
  Tensor r = Tensor::empty(x.shape(), DType::kFloat32);
  round_to_bfloat16(x, r);
  return r;
}

}  // namespace

void context_attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens,
                           const Tensor& q_index, const Tensor& kv_index, const Tensor& out, const Tensor& lse,
                           const AttentionOptions& options) {
  const ContextDims a =
      check_context("context_attention_fwd", q, k, v, cu_seqlens, q_index, kv_index, out, lse, options);
  if (a.identity) return attention_fwd(q, k, v, cu_seqlens, out, lse, options);
  if (a.tq == 0) return;
  if (q.dtype() == DType::kFloat32) {
    forward_typed<float>(a, operand(q, options), operand(k, options), operand(v, options), out, lse);
  } else {
    forward_typed<double>(a, q, k, v, out, lse);
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
    backward_typed<float>(a, operand(q, options), operand(k, options), operand(v, options), out, lse,
                          operand(dout, options), dq, dk, dv);
  } else {
    backward_typed<double>(a, q, k, v, out, lse, dout, dq, dk, dv);
  }
}

}  // namespace hspmd::kernels
