// The tiled causal attention core (cpu/attention_tiles.h).
#include "hspmd/kernels/cpu/attention_tiles.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>
#include <type_traits>

#include "hspmd/kernels/cpu/blas.h"
#include "hspmd/kernels/cpu/simd/row_ops.h"
#include "hspmd/kernels/cpu/vec_math.h"

namespace hspmd::kernels::cpu {

AttentionBlocks attention_blocks(DType dtype, int64_t d) {
  // oneDNN runs each GEMM on the calling thread inside our OpenMP threads, so only the tiles'
  // efficiency counts. Query tiles of 64 waste less on the causal diagonal than 128 (a tile computes
  // its whole diagonal block); key chunks of 256 make longer products than 128 and keep a chunk's
  // keys, values and their gradients in L2 (the sizes measured: docs/cpu-kernels.md, "Attention").
  if (dtype == DType::kFloat32 && float32_gemm() == Float32Gemm::kOneDnn) return {64, 256};
  // OpenBLAS: the largest power-of-two tile (<= 64) whose GEMMs (B x B x D) it keeps single-threaded.
  int64_t b = 64;
  while (b > 8 && b * b * d > kSingleThreadedGemmWork) b /= 2;
  return {b, b};
}

namespace {

// Per-thread scratch of one forward or backward call. Products read and write contiguous copies of
// their operands: the rows of one head in [T, N, D] are N * D apart, often a power of two, and rows
// that far apart share a few cache sets (docs/cpu-kernels.md, "Attention").
template <typename T>
struct TileScratch {
  std::vector<T> s, p;    // B_q x B_k: S then P, and dP then dS (backward)
  std::vector<T> m, l;    // B_q: the forward's running row max and sum
  std::vector<T> q, o;    // B_q x D: a query tile's Q, and its O (forward) or dO (backward)
  std::vector<T> k, v;    // keys and values: of one key chunk (backward), or of a document (forward)
  std::vector<T> dk, dv;  // B_k x D: a key chunk's gradients (backward)
  // Forward: k, v hold the packed positions [kv_start, kv_start + kv_rows) of kv head kv_head of the
  // document starting at kv_doc.
  int64_t kv_doc = -1, kv_start = -1, kv_head = -1, kv_rows = 0;
  TileScratch(AttentionBlocks b, int64_t d)
      : s(b.queries * b.keys), p(b.queries * b.keys), m(b.queries), l(b.queries), q(b.queries * d),
        o(b.queries * d), k(b.keys * d), v(b.keys * d), dk(b.keys * d), dv(b.keys * d) {}
};

// Below this many flops a call runs on the calling thread: waking the OpenMP team costs more
// than it saves (and much more on a loaded machine, where a sleeping worker waits for a time slice).
constexpr int64_t kMinParallelFlops = int64_t{1} << 21;

// Runs body(task, next, scratch) for the tasks in `order`, handed out in that order to the kernels'
// OpenMP threads; flops is their total. A thread claims its next task (-1: none) before it runs the
// current one, so that the body can prefetch the next one's rows while it computes. The result of
// a task never depends on the thread that runs it.
template <typename T, typename Body>
void run_tasks(AttentionBlocks block, int64_t d, const std::vector<int64_t>& order, int64_t flops, Body&& body) {
  const int64_t n = static_cast<int64_t>(order.size());
  std::atomic<int64_t> claimed{0};
#pragma omp parallel if (n > 1 && flops >= kMinParallelFlops)
  {
    TileScratch<T> scratch(block, d);
    for (int64_t t = claimed.fetch_add(1); t < n;) {
      const int64_t next = claimed.fetch_add(1);
      body(order[t], next < n ? order[next] : -1, scratch);
      t = next;
    }
  }
}

// 0..n-1 sorted by key(i), ascending; ties keep their order.
template <typename Key>
std::vector<int64_t> sorted_tasks(int64_t n, Key&& key) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key(a) < key(b); });
  return order;
}

// dst[r, :cols] = src[r, :cols] for r < rows.
template <typename T>
void copy_rows(const T* src, int64_t ld_src, int64_t rows, int64_t cols, T* dst, int64_t ld_dst) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * ld_dst, src + r * ld_src, sizeof(T) * cols);
}

// copy_rows of the operands the products read, of D columns into rows D apart: rounded to bf16
// values on the way when x asks for bf16 operands.
template <typename T>
void copy_operand_rows(const AttentionTiles<T>& x, const T* src, int64_t ld_src, int64_t rows, T* dst) {
  if constexpr (std::is_same_v<T, float>) {
    if (x.round_operands) {
      const RowOps& ops = row_ops();
      for (int64_t r = 0; r < rows; ++r) ops.round_to_bfloat16(src + r * ld_src, dst + r * x.d, x.d);
      return;
    }
  }
  copy_rows(src, ld_src, rows, x.d, dst, x.d);
}

// Operands in [T, N, D] are read a head at a time, a few hundred bytes of each row: hardware
// prefetchers hardly follow that, and the first touch of a tile waits on memory. So the loops over a
// tile's rows also prefetch what the next tile or task reads, a few rows per iteration, which
// overlaps those misses with the products.
template <typename T>
void prefetch_row(const T* p, int64_t d) {
  for (int64_t c = 0; c < d; c += 64 / static_cast<int64_t>(sizeof(T))) __builtin_prefetch(p + c);
  __builtin_prefetch(p + d - 1);
}

// Share i of count of the rows [0, rows) at base, ld apart.
template <typename T>
void prefetch_share(const T* base, int64_t ld, int64_t rows, int64_t d, int64_t i, int64_t count) {
  for (int64_t r = rows * i / count; r < rows * (i + 1) / count; ++r) prefetch_row(base + r * ld, d);
}

// The SIMD row loops take about 40 ns for a row's last partial vector (1 ns an element otherwise),
// and most rows of a masked chunk end in one. So a masked row is extended to a multiple of every
// level's lanes (as far as the chunk allows) with scores of -inf: their exponentials are ~1e-38
// (exp_approx clamps its input), nothing next to a row's total of >= 1, and are zeroed after.
constexpr int64_t kRowPad = 16;

template <typename T>
int64_t padded_columns(T* row, int64_t cols, int64_t nk) {
  const int64_t padded = std::min(nk, (cols + kRowPad - 1) / kRowPad * kRowPad);
  std::fill(row + cols, row + padded, -std::numeric_limits<T>::infinity());
  return padded;
}

// sum of a[i] * b[i], accumulated in double (products of floats are exact there) over eight partial
// sums: independent chains that the compiler keeps in vector registers.
template <typename T>
double dot_f64(const T* a, const T* b, int64_t n) {
  double s[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) s[j] += static_cast<double>(a[i + j]) * b[i + j];
  }
  for (; i < n; ++i) s[0] += static_cast<double>(a[i]) * b[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// Packs the keys and values of the tile's document for kv head g into w.k, w.v, from the tile's first
// key (its document's first token without a window) through its last query. What a thread packed
// stays for its next tasks: those of one (document, kv head) come in a row, the longest first, so a
// thread packs each row at most once (without a window; with one, once per run of later tiles).
template <typename T>
void pack_document_keys(const AttentionTiles<T>& x, const QueryTile& tile, int64_t g, TileScratch<T>& w) {
  const int64_t first = x.first_key(tile);
  if (w.kv_doc != tile.seq_start || w.kv_head != g || first < w.kv_start) {
    w.kv_doc = tile.seq_start;
    w.kv_start = first;
    w.kv_head = g;
    w.kv_rows = 0;
  }
  const int64_t rows = tile.last() + 1 - w.kv_start, done = w.kv_rows, d = x.d, ldk = x.ldk();
  if (rows <= done) return;
  if (static_cast<int64_t>(w.k.size()) < rows * d) {
    w.k.resize(rows * d);
    w.v.resize(rows * d);
  }
  const int64_t from = (w.kv_start + done) * ldk + g * d;
  copy_operand_rows(x, x.k + from, ldk, rows - done, w.k.data() + done * d);
  copy_operand_rows(x, x.v + from, ldk, rows - done, w.v.data() + done * d);
  w.kv_rows = rows;
}

// One (query tile, head); next / next_h: the task this thread runs next (next is null if none).
template <typename T>
void forward_tile(const AttentionTiles<T>& x, const QueryTile& tile, int64_t h, const QueryTile* next,
                  int64_t next_h, TileScratch<T>& w) {
  const int64_t b = x.block.keys, d = x.d, g = h / x.group(), n = tile.len, last = tile.last(), ldq = x.ldq();
  const int64_t first = x.first_key(tile);  // of the tile's key chunks
  T *q = w.q.data(), *o = w.o.data(), *s = w.s.data(), *m = w.m.data(), *l = w.l.data();
  copy_operand_rows(x, x.q + tile.row * ldq + h * d, ldq, n, q);
  pack_document_keys(x, tile, g, w);
  for (int64_t r = 0; r < n; ++r) {
    m[r] = -std::numeric_limits<T>::infinity();
    l[r] = 0;
  }
  // Rows of the next task to prefetch: its queries, and its keys and values unless they are packed.
  const T* next_q = next != nullptr ? x.q + next->row * ldq + next_h * d : nullptr;
  const bool next_keys = next != nullptr && (next->seq_start != tile.seq_start || next_h / x.group() != g);
  const int64_t next_kv = next_keys ? x.first_key(*next) * x.ldk() + next_h / x.group() * d : 0;
  const int64_t iterations = n * ((last - first) / b + 1);  // of the row loop, over all chunks
  for (int64_t k0 = first; k0 <= last; k0 += b) {
    const int64_t nk = std::min(b, last + 1 - k0);
    const T* k = w.k.data() + (k0 - w.kv_start) * d;
    const T* v = w.v.data() + (k0 - w.kv_start) * d;
    gemm(false, true, n, nk, d, x.scale, q, d, k, d, T(0), s, b);
    for (int64_t r = 0; r < n; ++r) {
      if (next_q != nullptr && k0 == first && r < next->len) prefetch_row(next_q + r * ldq, d);
      if (next_keys) {
        const int64_t i = (k0 - first) / b * n + r;
        prefetch_share(x.k + next_kv, x.ldk(), x.span(*next), d, i, iterations);
        prefetch_share(x.v + next_kv, x.ldk(), x.span(*next), d, i, iterations);
      }
      T* row = s + r * b;
      const auto [begin, end] = x.kept_columns(tile, r, k0, nk);
      if (begin == end) {  // every key here is later than this query or outside its window
        std::fill(row, row + nk, T(0));
        continue;
      }
      const bool first_kept = l[r] == T(0);
      T* kept = row + begin;
      const int64_t padded = padded_columns(kept, end - begin, nk - begin);
      const T m_new = first_kept ? row_max(kept, padded) : std::max(m[r], row_max(kept, padded));
      const T sum = exp_shift_sum(kept, padded, m_new);
      std::fill(row, kept, T(0));
      std::fill(row + end, row + nk, T(0));
      if (first_kept) {
        l[r] = sum;
      } else {
        const T correction = std::exp(m[r] - m_new);
        l[r] = l[r] * correction + sum;
        if (correction != T(1)) {
          for (int64_t c = 0; c < d; ++c) o[r * d + c] *= correction;
        }
      }
      m[r] = m_new;
    }
    // The first key chunk overwrites O (with zeros in the rows that keep none of it).
    gemm(false, false, n, d, nk, T(1), s, b, v, d, k0 == first ? T(0) : T(1), o, d);
  }
  for (int64_t r = 0; r < n; ++r) {
    const T inv = T(1) / l[r];
    T* out = x.out + (tile.row + r) * ldq + h * d;
    for (int64_t c = 0; c < d; ++c) out[c] = o[r * d + c] * inv;
    x.lse[h * x.tq + tile.row + r] = m[r] + std::log(l[r]);
  }
}

// Packed position of the last query of a document's tiles.
int64_t last_query(const std::vector<const QueryTile*>& tiles) {
  int64_t last = 0;
  for (const QueryTile* t : tiles) last = std::max(last, t->last());
  return last;
}

// Every key chunk of one document against its query tiles, for kv head g; delta: [Nq, Tq] scratch.
// next / next_g: the task this thread runs next (next is null if none).
template <typename T>
void backward_document(const AttentionTiles<T>& x, const std::vector<const QueryTile*>& tiles, int64_t g,
                       const std::vector<const QueryTile*>* next, int64_t next_g, T* delta, TileScratch<T>& w) {
  const int64_t b = x.block.keys, d = x.d, ldq = x.ldq(), ldk = x.ldk(), first = tiles.front()->seq_start;
  const int64_t last = last_query(tiles);
  T *p = w.s.data(), *dp = w.p.data(), *q = w.q.data(), *dout = w.o.data();
  T *k = w.k.data(), *v = w.v.data(), *dk = w.dk.data(), *dv = w.dv.data();
  std::vector<std::pair<int64_t, const QueryTile*>> work;  // (head, tile) of one chunk, in order
  for (int64_t k0 = first; k0 <= last; k0 += b) {
    const int64_t chunk = std::min(b, last + 1 - k0);
    std::fill(dk, dk + chunk * d, T(0));
    std::fill(dv, dv + chunk * d, T(0));
    work.clear();
    for (int64_t h = g * x.group(); h < (g + 1) * x.group(); ++h) {
      for (const QueryTile* t : tiles) {
        // The others' queries all precede these keys, or their windows all start after them.
        if (t->last() >= k0 && x.first_key(*t) < k0 + chunk) work.emplace_back(h, t);
      }
    }
    if (!work.empty()) {
      copy_operand_rows(x, x.k + k0 * ldk + g * d, ldk, chunk, k);
      copy_operand_rows(x, x.v + k0 * ldk + g * d, ldk, chunk, v);
    }
    // What comes after this chunk, to prefetch: the next chunk, or the next task's first one and tile.
    const bool last_chunk = k0 + b > last;
    int64_t after_k0 = k0 + b, after_g = g, after_rows = last + 1 - after_k0;
    std::pair<int64_t, const QueryTile*> after_tile{0, nullptr};
    if (last_chunk && next != nullptr) {
      after_k0 = next->front()->seq_start;
      after_g = next_g;
      after_rows = last_query(*next) + 1 - after_k0;
      after_tile = {next_g * x.group(), next->front()};
    }
    after_rows = std::clamp<int64_t>(after_rows, 0, b);
    for (size_t j = 0; j < work.size(); ++j) {
      const auto [h, t] = work[j];
      // The tile's keys in this chunk: [k0 + skip, k0 + skip + nk); before its window or after its
      // last query, none of its rows keeps a key.
      const int64_t skip = std::max<int64_t>(x.first_key(*t) - k0, 0);
      const int64_t n = t->len, nk = std::min(chunk, t->last() + 1 - k0) - skip;
      const bool first_visit = x.first_key(*t) >= k0;  // the first chunk the tile sees
      copy_operand_rows(x, x.q + t->row * ldq + h * d, ldq, n, q);
      copy_operand_rows(x, x.dout + t->row * ldq + h * d, ldq, n, dout);
      T* dq = x.dq + t->row * ldq + h * d;
      const T* lse = x.lse + h * x.tq + t->row;
      T* dl = delta + h * x.tq + t->row;
      if (first_visit) {  // Delta = rowsum(dO * O), accumulated in double
        const T* o = x.out + t->row * ldq + h * d;
        for (int64_t r = 0; r < n; ++r) dl[r] = static_cast<T>(dot_f64(o + r * ldq, dout + r * d, d));
      }
      const T *kt = k + skip * d, *vt = v + skip * d;
      T *dkt = dk + skip * d, *dvt = dv + skip * d;
      gemm(false, true, n, nk, d, x.scale, q, d, kt, d, T(0), p, b);
      // The next (head, tile), and whether it is in its first chunk (where Delta reads its O rows).
      const bool within = j + 1 < work.size();
      const auto [nh, nt] = within ? work[j + 1] : after_tile;
      const bool next_reads_out = within ? x.first_key(*nt) >= k0 : true;
      for (int64_t r = 0; r < n; ++r) {
        if (nt != nullptr && r < nt->len) {  // the next tile's rows
          const int64_t at = (nt->row + r) * ldq + nh * d;
          prefetch_row(x.q + at, d);
          prefetch_row(x.dout + at, d);
          if (next_reads_out) prefetch_row(x.out + at, d);
        }
        if (after_rows > 0) {  // a share of the next chunk's keys and values
          const int64_t i = static_cast<int64_t>(j) * n + r, count = static_cast<int64_t>(work.size()) * n;
          prefetch_share(x.k + after_k0 * ldk + after_g * d, ldk, after_rows, d, i, count);
          prefetch_share(x.v + after_k0 * ldk + after_g * d, ldk, after_rows, d, i, count);
        }
        T* row = p + r * b;
        const auto [begin, end] = x.kept_columns(*t, r, k0 + skip, nk);
        exp_shift_sum(row + begin, padded_columns(row + begin, end - begin, nk - begin), lse[r]);
        std::fill(row, row + begin, T(0));
        std::fill(row + end, row + nk, T(0));
      }
      gemm(true, false, nk, d, n, T(1), p, b, dout, d, T(1), dvt, d);
      gemm(false, true, n, nk, d, T(1), dout, d, vt, d, T(0), dp, b);
      for (int64_t r = 0; r < n; ++r) softmax_grad_row(dp + r * b, p + r * b, nk, dl[r]);
      // The tile's first chunk overwrites dQ, later ones add to it.
      gemm(false, false, n, d, nk, x.scale, dp, b, kt, d, first_visit ? T(0) : T(1), dq, ldq);
      gemm(true, false, nk, d, n, x.scale, dp, b, q, d, T(1), dkt, d);
    }
    copy_rows(dk, d, chunk, d, x.dk + k0 * ldk + g * d, ldk);
    copy_rows(dv, d, chunk, d, x.dv + k0 * ldk + g * d, ldk);
  }
}

}  // namespace

template <typename T>
void attention_forward(const AttentionTiles<T>& x, const std::vector<QueryTile>& tiles) {
  // Task i: tile i / nq, head i % nq; S = Q K^T and P V, 2 * len * span * D flops each.
  const int64_t n = static_cast<int64_t>(tiles.size()) * x.nq;
  auto cost = [&](int64_t i) { return 4 * tiles[i / x.nq].len * x.span(tiles[i / x.nq]) * x.d; };
  int64_t flops = 0;
  for (int64_t i = 0; i < n; ++i) flops += cost(i);
  // The tasks of one (document, kv head) in a row, the most costly first: they share keys and values.
  const std::vector<int64_t> order = sorted_tasks(n, [&](int64_t i) {
    return std::make_tuple(tiles[i / x.nq].seq_start, i % x.nq / x.group(), -cost(i), i % x.nq);
  });
  run_tasks<T>(x.block, x.d, order, flops, [&](int64_t i, int64_t next, TileScratch<T>& w) {
    forward_tile(x, tiles[i / x.nq], i % x.nq, next >= 0 ? &tiles[next / x.nq] : nullptr, next % x.nq, w);
  });
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
    doc_costs[it->second] += 10 * t.len * x.span(t) * x.d * x.group();
  }
  // Task i: document i / nkv, kv head i % nkv; the most costly first.
  const int64_t n = static_cast<int64_t>(docs.size()) * x.nkv;
  const std::vector<int64_t> order = sorted_tasks(n, [&](int64_t i) { return -doc_costs[i / x.nkv]; });
  const int64_t flops = std::accumulate(doc_costs.begin(), doc_costs.end(), int64_t{0}) * x.nkv;
  std::vector<T> delta(static_cast<size_t>(x.nq * x.tq));
  run_tasks<T>(x.block, x.d, order, flops, [&](int64_t i, int64_t next, TileScratch<T>& w) {
    backward_document(x, docs[i / x.nkv], i % x.nkv, next >= 0 ? &docs[next / x.nkv] : nullptr, next % x.nkv,
                      delta.data(), w);
  });
}

template void attention_forward(const AttentionTiles<float>&, const std::vector<QueryTile>&);
template void attention_forward(const AttentionTiles<double>&, const std::vector<QueryTile>&);
template void attention_backward(const AttentionTiles<float>&, const std::vector<QueryTile>&);
template void attention_backward(const AttentionTiles<double>&, const std::vector<QueryTile>&);

}  // namespace hspmd::kernels::cpu
