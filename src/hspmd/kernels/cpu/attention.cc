// attention_fwd / attention_bwd (kernels/attention.h): flash-style blocked attention on the CPU.
//
// Every sequence is cut into blocks of B tokens starting at its first token, so query block i
// sees key blocks 0..i and only the diagonal block i needs the causal mask. A tile is addressed in
// place inside q/k/v ([T, N, D] row-major: a head's rows are N * D apart, the BLAS leading
// dimension), and its products are library GEMMs (cpu/blas.h) on B x D and B x B operands. Per thread the only
// scratch is two B x B tiles and a few vectors of B: never a score matrix of a whole sequence.
//
// Forward, one task per (sequence, query head, query block), online softmax over key blocks:
//   S = scale * Q_i K_j^T; m' = max(m, rowmax S); P = exp(S - m'); l = l * exp(m - m') + rowsum P;
//   O = O * exp(m - m') + P V_j; at the end O /= l and lse = m + log l.
// Backward, one task per (sequence, kv head): with Delta = rowsum(dO * O) and P recomputed from lse,
//   dV_j += P^T dO_i; dP = dO_i V_j^T; dS = P * (dP - Delta); dQ_i += scale dS K_j;
//   dK_j += scale dS^T Q_i     (5 GEMMs per tile, the minimum).
// A task owns dK/dV of its kv head and dQ of the query heads that share it, so tasks never write
// the same memory and every sum runs in one fixed order: results are bitwise identical for any
// thread count. The price is parallelism limited to (sequences x kv heads) in the backward.
#include "hspmd/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "hspmd/kernels/bf16_rounding.h"
#include "hspmd/kernels/cpu/blas.h"
#include "hspmd/kernels/cpu/vec_math.h"

namespace hspmd::kernels {
namespace {

struct AttentionDims {
  int64_t tokens = 0, nq = 0, nkv = 0, d = 0;
  int64_t group = 1;             // query heads per kv head
  std::vector<int64_t> cu;       // sequence boundaries, cu.front() == 0, cu.back() == tokens
  double scale = 1.0;
  int64_t block = 64;            // tile rows (tokens); see block_size
};

// The largest power-of-two tile (<= 64) whose GEMMs (B x B x D) OpenBLAS keeps single-threaded: the
// tiles run inside our own OpenMP threads (where oneDNN runs on the calling thread by itself). Tiles
// of 128 on oneDNN measured no faster (1 thread, CPU time, interleaved).
int64_t block_size(int64_t d) {
  int64_t b = 64;
  while (b > 8 && b * b * d > cpu::kSingleThreadedGemmWork) b /= 2;
  return b;
}

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
  a.group = a.nq / a.nkv;

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
  a.scale = options.scale != 0.0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(a.d));
  a.block = block_size(a.d);
  return a;
}

// Raw pointers and row strides of one call; T is float or double.
template <typename T>
struct AttentionData {
  const T *q, *k, *v, *out, *dout;
  T *o, *lse, *dq, *dk, *dv;  // o: out, written by the forward
  int64_t ldq, ldk;  // row strides of the q-like and k-like tensors: N * D
};

struct Task {
  int64_t seq_start, seq_len, head, block;  // head: query head (forward) or kv head (backward)
  int64_t cost;                            // relative work, to start the longest tasks first
};

// Scratch of one thread: two B x B tiles, row vectors (m, l) of B, and the backward's Delta rows.
template <typename T>
struct Scratch {
  std::vector<T> s, p, m, l, delta;
  explicit Scratch(int64_t b) : s(b * b), p(b * b), m(b), l(b) {}
};

// Below this many flops a call runs on the calling thread: waking the OpenMP team costs more
// than it saves (and much more on a loaded machine, where a sleeping worker waits for a time slice).
constexpr int64_t kMinParallelFlops = int64_t{1} << 21;

// Runs body(task, scratch) over tasks, longest first, on the kernels' OpenMP threads. The result of
// a task never depends on the thread that runs it. A task of cost c does about c * tile_flops flops.
template <typename T, typename Body>
void run_tasks(int64_t block, int64_t tile_flops, std::vector<Task>& tasks, Body&& body) {
  std::stable_sort(tasks.begin(), tasks.end(), [](const Task& x, const Task& y) { return x.cost > y.cost; });
  const int64_t n = static_cast<int64_t>(tasks.size());
  int64_t flops = 0;
  for (const Task& t : tasks) flops += t.cost * tile_flops;
#pragma omp parallel if (n > 1 && flops >= kMinParallelFlops)
  {
    Scratch<T> scratch(block);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < n; ++t) body(tasks[t], scratch);
  }
}

template <typename T>
void forward_task(const AttentionDims& a, const AttentionData<T>& x, const Task& task, Scratch<T>& w) {
  const int64_t b = a.block, d = a.d, h = task.head, g = h / a.group;
  const int64_t q0 = task.seq_start + task.block * b;
  const int64_t nq = std::min(b, task.seq_start + task.seq_len - q0);
  const T* q = x.q + q0 * x.ldq + h * d;
  T* o = x.o + q0 * x.ldq + h * d;
  T *s = w.s.data(), *m = w.m.data(), *l = w.l.data();
  for (int64_t r = 0; r < nq; ++r) std::memset(o + r * x.ldq, 0, sizeof(T) * d);
  for (int64_t j = 0; j <= task.block; ++j) {
    const bool diagonal = j == task.block;
    const int64_t k0 = task.seq_start + j * b, nk = diagonal ? nq : b;
    const T* k = x.k + k0 * x.ldk + g * d;
    const T* v = x.v + k0 * x.ldk + g * d;
    cpu::gemm(false, true, nq, nk, d, static_cast<T>(a.scale), q, x.ldq, k, x.ldk, T(0), s, b);
    for (int64_t r = 0; r < nq; ++r) {
      T* row = s + r * b;
      const int64_t cols = diagonal ? r + 1 : nk;  // the causal mask
      const T m_new = j == 0 ? cpu::row_max(row, cols) : std::max(m[r], cpu::row_max(row, cols));
      const T sum = cpu::exp_shift_sum(row, cols, m_new);
      std::fill(row + cols, row + nk, T(0));
      if (j == 0) {
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
    cpu::gemm(false, false, nq, d, nk, T(1), s, b, v, x.ldk, T(1), o, x.ldq);
  }
  for (int64_t r = 0; r < nq; ++r) {
    const T inv = T(1) / l[r];
    T* orow = o + r * x.ldq;
    for (int64_t c = 0; c < d; ++c) orow[c] *= inv;
    x.lse[h * a.tokens + q0 + r] = m[r] + std::log(l[r]);
  }
}

template <typename T>
void backward_task(const AttentionDims& a, const AttentionData<T>& x, const Task& task, Scratch<T>& w) {
  const int64_t b = a.block, d = a.d, g = task.head, start = task.seq_start, len = task.seq_len;
  const int64_t end = start + len, nblocks = (len + b - 1) / b;
  const T scale = static_cast<T>(a.scale);
  // Delta[h, t] = rowsum(dO * O), the softmax-backward correction of each query row.
  std::vector<T>& delta = w.delta;
  delta.resize(static_cast<size_t>(a.group * len));
  for (int64_t hh = 0; hh < a.group; ++hh) {
    const int64_t h = g * a.group + hh;
    for (int64_t t = 0; t < len; ++t) {
      const T* orow = x.out + (start + t) * x.ldq + h * d;
      const T* drow = x.dout + (start + t) * x.ldq + h * d;
      double acc = 0;
      for (int64_t c = 0; c < d; ++c) acc += static_cast<double>(orow[c]) * drow[c];
      delta[hh * len + t] = static_cast<T>(acc);
    }
  }
  T *p = w.s.data(), *dp = w.p.data();
  for (int64_t j = 0; j < nblocks; ++j) {
    const int64_t k0 = start + j * b, nk = std::min(b, end - k0);
    const T* k = x.k + k0 * x.ldk + g * d;
    const T* v = x.v + k0 * x.ldk + g * d;
    T* dk = x.dk + k0 * x.ldk + g * d;
    T* dv = x.dv + k0 * x.ldk + g * d;
    for (int64_t hh = 0; hh < a.group; ++hh) {
      const int64_t h = g * a.group + hh;
      for (int64_t i = j; i < nblocks; ++i) {
        const int64_t q0 = start + i * b, nq = std::min(b, end - q0);
        const T* q = x.q + q0 * x.ldq + h * d;
        const T* dout = x.dout + q0 * x.ldq + h * d;
        T* dq = x.dq + q0 * x.ldq + h * d;
        const T* lse = x.lse + h * a.tokens + q0;
        const T* del = delta.data() + hh * len + (q0 - start);
        cpu::gemm(false, true, nq, nk, d, scale, q, x.ldq, k, x.ldk, T(0), p, b);
        for (int64_t r = 0; r < nq; ++r) {
          const int64_t cols = i == j ? r + 1 : nk;
          cpu::exp_shift_sum(p + r * b, cols, lse[r]);
          std::fill(p + r * b + cols, p + r * b + nk, T(0));
        }
        cpu::gemm(true, false, nk, d, nq, T(1), p, b, dout, x.ldq, T(1), dv, x.ldk);
        cpu::gemm(false, true, nq, nk, d, T(1), dout, x.ldq, v, x.ldk, T(0), dp, b);
        for (int64_t r = 0; r < nq; ++r) cpu::softmax_grad_row(dp + r * b, p + r * b, nk, del[r]);
        cpu::gemm(false, false, nq, d, nk, scale, dp, b, k, x.ldk, T(1), dq, x.ldq);
        cpu::gemm(true, false, nk, d, nq, scale, dp, b, q, x.ldq, T(1), dk, x.ldk);
      }
    }
  }
}

template <typename T>
void forward_typed(const AttentionDims& a, AttentionData<T> x) {
  std::vector<Task> tasks;
  for (size_t s = 0; s + 1 < a.cu.size(); ++s) {
    const int64_t len = a.cu[s + 1] - a.cu[s];
    for (int64_t h = 0; h < a.nq; ++h) {
      for (int64_t i = 0; i * a.block < len; ++i) tasks.push_back({a.cu[s], len, h, i, i + 1});
    }
  }
  // Per tile: S = Q K^T and P V, 2 * B * B * D flops each.
  run_tasks<T>(a.block, 4 * a.block * a.block * a.d, tasks,
               [&](const Task& task, Scratch<T>& w) { forward_task(a, x, task, w); });
}

template <typename T>
void backward_typed(const AttentionDims& a, AttentionData<T> x) {
  std::vector<Task> tasks;
  for (size_t s = 0; s + 1 < a.cu.size(); ++s) {
    const int64_t len = a.cu[s + 1] - a.cu[s], nblocks = (len + a.block - 1) / a.block;
    if (len == 0) continue;
    for (int64_t g = 0; g < a.nkv; ++g) tasks.push_back({a.cu[s], len, g, 0, a.group * nblocks * (nblocks + 1) / 2});
  }
  // Per tile: 5 GEMMs of 2 * B * B * D flops.
  run_tasks<T>(a.block, 10 * a.block * a.block * a.d, tasks,
               [&](const Task& task, Scratch<T>& w) { backward_task(a, x, task, w); });
}

template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// The forward passes undefined dout/dq/dk/dv.
template <typename T>
AttentionData<T> attention_data(const AttentionDims& a, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse, const Tensor& dout, const Tensor& dq,
                                const Tensor& dk, const Tensor& dv) {
  return {.q = q.data<T>(),
          .k = k.data<T>(),
          .v = v.data<T>(),
          .out = out.data<T>(),
          .dout = data_or_null<T>(dout),
          .o = out.data<T>(),
          .lse = lse.data<T>(),
          .dq = data_or_null<T>(dq),
          .dk = data_or_null<T>(dk),
          .dv = data_or_null<T>(dv),
          .ldq = a.nq * a.d,
          .ldk = a.nkv * a.d};
}

// x itself, or its copy rounded to bfloat16 when the options ask for bf16 operands.
Tensor operand(const Tensor& x, const AttentionOptions& options) {
  if (!options.bf16_operands) return x;
  Tensor r = Tensor::empty(x.shape(), DType::kFloat32);
  round_to_bfloat16(x, r);
  return r;
}

}  // namespace

void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, const Tensor& out,
                   const Tensor& lse, const AttentionOptions& options) {
  const AttentionDims a = check_attention("attention_fwd", q, k, v, cu_seqlens, out, lse, options);
  if (a.tokens == 0) return;
  if (q.dtype() == DType::kFloat32) {
    const Tensor rq = operand(q, options), rk = operand(k, options), rv = operand(v, options);
    forward_typed(a, attention_data<float>(a, rq, rk, rv, out, lse, {}, {}, {}, {}));
  } else {
    forward_typed(a, attention_data<double>(a, q, k, v, out, lse, {}, {}, {}, {}));
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
  // dq, dk, dv accumulate over tiles.
  std::memset(dq.raw_data(), 0, dq.nbytes());
  std::memset(dk.raw_data(), 0, dk.nbytes());
  std::memset(dv.raw_data(), 0, dv.nbytes());
  if (q.dtype() == DType::kFloat32) {
    const Tensor rq = operand(q, options), rk = operand(k, options), rv = operand(v, options);
    const Tensor rdout = operand(dout, options);
    backward_typed(a, attention_data<float>(a, rq, rk, rv, out, lse, rdout, dq, dk, dv));
  } else {
    backward_typed(a, attention_data<double>(a, q, k, v, out, lse, dout, dq, dk, dv));
  }
}

}  // namespace hspmd::kernels
