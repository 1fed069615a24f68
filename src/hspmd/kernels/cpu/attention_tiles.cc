// The tiled causal attention core (cpu/attention_tiles.h).
#include "hspmd/kernels/cpu/attention_tiles.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>

#include "hspmd/kernels/bf16_rounding.h"
#include "hspmd/kernels/cpu/blas.h"
#include "hspmd/kernels/cpu/vec_math.h"

namespace hspmd::kernels::cpu {

int64_t attention_block_size(DType dtype, int64_t d) {
  // oneDNN runs each GEMM on the calling thread inside our OpenMP threads, so only the tiles'
  // efficiency counts. Against 64, 128 measured about 1.2x the fwd+bwd rate and 256 less than 128
  // (diagonal tiles mask more work): bench_kernels --threads=1, 4 x 512 tokens, 8 heads, D = 64.
  if (dtype == DType::kFloat32 && float32_gemm() == Float32Gemm::kOneDnn) return 128;
  // OpenBLAS: the largest power-of-two tile (<= 64) whose GEMMs (B x B x D) it keeps single-threaded.
  int64_t b = 64;
  while (b > 8 && b * b * d > kSingleThreadedGemmWork) b /= 2;
  return b;
}

namespace {

template <typename T>
struct TileScratch {
  std::vector<T> s, p, m, l;
  explicit TileScratch(int64_t b) : s(b * b), p(b * b), m(b), l(b) {}
};

// Below this many flops a call runs on the calling thread: waking the OpenMP team costs more
// than it saves (and much more on a loaded machine, where a sleeping worker waits for a time slice).
constexpr int64_t kMinParallelFlops = int64_t{1} << 21;

// Runs body(task, scratch) for task 0..costs.size()-1, the most costly first, on the kernels' OpenMP
// threads; costs are in flops. The result of a task never depends on the thread that runs it.
template <typename T, typename Body>
void run_tasks(int64_t block, const std::vector<int64_t>& costs, Body&& body) {
  std::vector<int64_t> order(costs.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return costs[x] > costs[y]; });
  const int64_t n = static_cast<int64_t>(order.size());
  const int64_t flops = std::accumulate(costs.begin(), costs.end(), int64_t{0});
#pragma omp parallel if (n > 1 && flops >= kMinParallelFlops)
  {
    TileScratch<T> scratch(block);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < n; ++t) body(order[t], scratch);
  }
}

template <typename T>
void forward_tile(const AttentionTiles<T>& x, const QueryTile& tile, int64_t h, TileScratch<T>& w) {
  const int64_t b = x.block, d = x.d, g = h / x.group(), n = tile.len, last = tile.last();
  const int64_t ldq = x.ldq(), ldk = x.ldk();
  const T* q = x.q + tile.row * ldq + h * d;
  T* o = x.out + tile.row * ldq + h * d;
  T *s = w.s.data(), *m = w.m.data(), *l = w.l.data();
  for (int64_t r = 0; r < n; ++r) {
    std::memset(o + r * ldq, 0, sizeof(T) * d);
    m[r] = -std::numeric_limits<T>::infinity();
    l[r] = 0;
  }
  for (int64_t k0 = tile.seq_start; k0 <= last; k0 += b) {
    const int64_t nk = std::min(b, last + 1 - k0);
    const T* k = x.k + k0 * ldk + g * d;
    const T* v = x.v + k0 * ldk + g * d;
    gemm(false, true, n, nk, d, x.scale, q, ldq, k, ldk, T(0), s, b);
    for (int64_t r = 0; r < n; ++r) {
      T* row = s + r * b;
      const int64_t cols = tile.kept_columns(r, k0, nk);
      if (cols == 0) {  // a later key than this query: nothing to add
        std::fill(row, row + nk, T(0));
        continue;
      }
      const bool first = l[r] == T(0);
      const T m_new = first ? row_max(row, cols) : std::max(m[r], row_max(row, cols));
      const T sum = exp_shift_sum(row, cols, m_new);
      std::fill(row + cols, row + nk, T(0));
      if (first) {
        l[r] = sum;
      } else {
        const T correction = std::exp(m[r] - m_new);
        l[r] = l[r] * correction + sum;
        if (correction != T(1)) {
          T* orow = o + r * ldq;
          for (int64_t c = 0; c < d; ++c) orow[c] *= correction;
        }
      }
      m[r] = m_new;
    }
    gemm(false, false, n, d, nk, T(1), s, b, v, ldk, T(1), o, ldq);
  }
  for (int64_t r = 0; r < n; ++r) {
    const T inv = T(1) / l[r];
    T* orow = o + r * ldq;
    for (int64_t c = 0; c < d; ++c) orow[c] *= inv;
    x.lse[h * x.tq + tile.row + r] = m[r] + std::log(l[r]);
  }
}

// Every key tile of one document against its query tiles, for kv head g.
template <typename T>
void backward_document(const AttentionTiles<T>& x, const std::vector<const QueryTile*>& tiles, int64_t g,
                       TileScratch<T>& w) {
  const int64_t b = x.block, d = x.d, ldq = x.ldq(), ldk = x.ldk();
  int64_t last = 0;
  for (const QueryTile* t : tiles) last = std::max(last, t->last());
  T *p = w.s.data(), *dp = w.p.data();
  for (int64_t k0 = tiles.front()->seq_start; k0 <= last; k0 += b) {
    const int64_t nk = std::min(b, last + 1 - k0);
    const T* k = x.k + k0 * ldk + g * d;
    const T* v = x.v + k0 * ldk + g * d;
    T* dk = x.dk + k0 * ldk + g * d;
    T* dv = x.dv + k0 * ldk + g * d;
    for (int64_t hh = 0; hh < x.group(); ++hh) {
      const int64_t h = g * x.group() + hh;
      for (const QueryTile* t : tiles) {
        const int64_t n = t->len;
        if (t->last() < k0) continue;  // every query of the tile precedes these keys
        const T* q = x.q + t->row * ldq + h * d;
        const T* dout = x.dout + t->row * ldq + h * d;
        T* dq = x.dq + t->row * ldq + h * d;
        const T* lse = x.lse + h * x.tq + t->row;
        const T* delta = x.delta + h * x.tq + t->row;
        gemm(false, true, n, nk, d, x.scale, q, ldq, k, ldk, T(0), p, b);
        for (int64_t r = 0; r < n; ++r) {
          const int64_t cols = t->kept_columns(r, k0, nk);
          exp_shift_sum(p + r * b, cols, lse[r]);
          std::fill(p + r * b + cols, p + r * b + nk, T(0));
        }
        gemm(true, false, nk, d, n, T(1), p, b, dout, ldq, T(1), dv, ldk);
        gemm(false, true, n, nk, d, T(1), dout, ldq, v, ldk, T(0), dp, b);
        for (int64_t r = 0; r < n; ++r) softmax_grad_row(dp + r * b, p + r * b, nk, delta[r]);
        gemm(false, false, n, d, nk, x.scale, dp, b, k, ldk, T(1), dq, ldq);
        gemm(true, false, nk, d, n, x.scale, dp, b, q, ldq, T(1), dk, ldk);
      }
    }
  }
}

}  // namespace

template <typename T>
void attention_forward(const AttentionTiles<T>& x, const std::vector<QueryTile>& tiles) {
  std::vector<int64_t> costs;  // per (tile, head): S = Q K^T and P V, 2 * len * span * D flops each
  for (const QueryTile& t : tiles) costs.insert(costs.end(), x.nq, 4 * t.len * t.span() * x.d);
  run_tasks<T>(x.block, costs, [&](int64_t i, TileScratch<T>& w) { forward_tile(x, tiles[i / x.nq], i % x.nq, w); });
}

template <typename T>
void attention_backward(const AttentionTiles<T>& x, const std::vector<QueryTile>& tiles) {
  std::vector<std::vector<const QueryTile*>> docs;  // the query tiles of each document
  std::vector<int64_t> doc_costs;                   // 5 GEMMs of 2 * len * span * D flops per tile and head
  std::map<int64_t, size_t> doc_of;                 // seq_start -> index in docs
  for (const QueryTile& t : tiles) {
    const auto [it, added] = doc_of.emplace(t.seq_start, docs.size());
    if (added) {
      docs.emplace_back();
      doc_costs.push_back(0);
    }
    docs[it->second].push_back(&t);
    doc_costs[it->second] += 10 * t.len * t.span() * x.d * x.group();
  }
  std::vector<int64_t> costs;  // per (document, kv head)
  for (int64_t c : doc_costs) costs.insert(costs.end(), x.nkv, c);
  run_tasks<T>(x.block, costs,
               [&](int64_t i, TileScratch<T>& w) { backward_document(x, docs[i / x.nkv], i % x.nkv, w); });
}

template <typename T>
std::vector<T> softmax_delta(const T* out, const T* dout, int64_t tq, int64_t nq, int64_t d) {
  std::vector<T> delta(static_cast<size_t>(nq * tq));
  for (int64_t r = 0; r < tq; ++r) {
    for (int64_t h = 0; h < nq; ++h) {
      const T* orow = out + (r * nq + h) * d;
      const T* drow = dout + (r * nq + h) * d;
      double acc = 0;
      for (int64_t c = 0; c < d; ++c) acc += static_cast<double>(orow[c]) * drow[c];
      delta[h * tq + r] = static_cast<T>(acc);
    }
  }
  return delta;
}

Tensor attention_operand(const Tensor& x, const AttentionOptions& options) {
  if (!options.bf16_operands) return x;
  Tensor r = Tensor::empty(x.shape(), DType::kFloat32);
  round_to_bfloat16(x, r);
  return r;
}

template void attention_forward(const AttentionTiles<float>&, const std::vector<QueryTile>&);
template void attention_forward(const AttentionTiles<double>&, const std::vector<QueryTile>&);
template void attention_backward(const AttentionTiles<float>&, const std::vector<QueryTile>&);
template void attention_backward(const AttentionTiles<double>&, const std::vector<QueryTile>&);
template std::vector<float> softmax_delta(const float*, const float*, int64_t, int64_t, int64_t);
template std::vector<double> softmax_delta(const double*, const double*, int64_t, int64_t, int64_t);

}  // namespace hspmd::kernels::cpu
