// Internal to the CPU backend: the tiled causal attention core shared by attention_fwd/_bwd
// (cpu/attention.cc) and context_attention_fwd/_bwd (cpu/context_attention.cc).
//
// Queries come as tiles: runs of at most B_q rows that are consecutive in the packed batch and
// inside one document. Keys and values are in packed order (position p at row p). A tile at packed
// positions [pos, pos + len) of a document starting at seq_start sees the key chunks of at most B_k
// keys starting at seq_start, seq_start + B_k, ... up to pos + len - 1; its row r keeps the key
// columns at packed positions <= pos + r (the causal mask; a row may keep none of a late chunk). The
// plain kernel's tiles are the blocks of B_q tokens of each sequence, so only the last chunk a tile
// sees is masked, and it computes at most B_q x B_q / 2 masked scores.
// A sliding window W also drops the keys before pos + r - W + 1 from row r: a tile's keys start at
// first_key(tile) = pos - W + 1 (or its document's start), so the forward's chunks start there and
// the backward's chunks (fixed per document) skip the tiles whose keys they do not hold and give
// the others only the columns from first_key on. Keys outside every row's window are never
// multiplied; the band's two triangles (B_q x B_q / 2 scores each) are masked.
//
// Products are GEMMs of the project's backend (cpu/blas.h) on B_q x D, B_k x D and B_q x B_k
// operands. Each thread copies what they read into contiguous scratch (a head's rows in [T, N, D] are
// N * D apart, which caches and prefetchers serve badly): a query tile, a key chunk or a document's
// keys and values of one kv head, and two B_q x B_k score tiles; never a score matrix of a whole
// sequence.
//
// Forward, one task per (query tile, query head), online softmax over key chunks:
//   S = scale * Q K_j^T; m' = max(m, rowmax S); P = exp(S - m'); l = l * exp(m - m') + rowsum P;
//   O = O * exp(m - m') + P V_j; at the end O /= l and lse = m + log l.
// Backward, one task per (document, kv head): with Delta = rowsum(dO * O) and P recomputed from lse,
//   dV_j += P^T dO; dP = dO V_j^T; dS = P * (dP - Delta); dQ += scale dS K_j; dK_j += scale dS^T Q
//   (5 GEMMs per tile and chunk, the minimum). A task owns dK/dV of the document's keys for its kv
// head and dQ of the document's query rows for the heads sharing it, so no two tasks write the same
// memory and every sum runs in one fixed order: results are bitwise identical for any thread count.
//
//   AttentionTiles<float> x{.q = ..., .block = attention_blocks(DType::kFloat32, d)};
//   attention_forward(x, tiles);   // then, with dout, dq, dk, dv set:
//   attention_backward(x, tiles);
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "hspmd/core/dtype.h"

namespace hspmd::kernels::cpu {

// Query tile rows and key chunk columns (tokens) for operands of dtype (float32 or float64) and head
// dim d: what suits the GEMM library that runs the tiles.
struct AttentionBlocks {
  int64_t queries = 0;  // rows of a query tile (at most)
  int64_t keys = 0;     // columns of a key chunk (at most)
};
AttentionBlocks attention_blocks(DType dtype, int64_t d);

struct QueryTile {
  int64_t row = 0;        // first query row (of q, out, lse)
  int64_t pos = 0;        // its packed position
  int64_t len = 0;        // rows, consecutive in the packed batch
  int64_t seq_start = 0;  // packed position of the document's first token
  int64_t last() const { return pos + len - 1; }  // packed position of the last row
};

// Raw pointers of one call; T is float or double.
template <typename T>
struct AttentionTiles {
  const T *q, *k, *v;  // q: [Tq, Nq, D]; k, v: [Tk, Nkv, D] in packed order
  T *out, *lse;        // out like q; lse: [Nq, Tq] (written by the forward, read by the backward)
  int64_t tq, nq, nkv, d;
  T scale;
  AttentionBlocks block;
  // bf16 operands (float only): q, k, v and dout are rounded to bfloat16 values as the tiles copy
  // them into scratch, so no rounded copy of a whole tensor is made. Every product reads a copy.
  bool round_operands = false;
  // Sliding window (kernels/attention.h): the row at packed position p keeps the keys
  // p - window < j <= p of its document; 0: every key of its document up to p.
  int64_t window = 0;
  const T* dout = nullptr;                        // backward only: like q
  T *dq = nullptr, *dk = nullptr, *dv = nullptr;  // backward only: like q, k, v (dk, dv packed)
  int64_t group() const { return nq / nkv; }
  // Packed position of the first key row r of tile t keeps.
  int64_t first_key(const QueryTile& t, int64_t r = 0) const {
    return window > 0 ? std::max(t.seq_start, t.pos + r - window + 1) : t.seq_start;
  }
  // Keys some row of t keeps, the first row's first through the last row: the work of one task.
  int64_t span(const QueryTile& t) const { return t.last() + 1 - first_key(t); }
  // Columns [begin, end) that the mask keeps of row r of t among the nk keys from packed position k0.
  std::pair<int64_t, int64_t> kept_columns(const QueryTile& t, int64_t r, int64_t k0, int64_t nk) const {
    return {std::clamp<int64_t>(first_key(t, r) - k0, 0, nk), std::clamp<int64_t>(t.pos + r - k0 + 1, 0, nk)};
  }
  int64_t ldq() const { return nq * d; }
  int64_t ldk() const { return nkv * d; }
};

// Forward over query tiles: writes out and lse for every (tile, query head).
template <typename T>
void attention_forward(const AttentionTiles<T>& x, const std::vector<QueryTile>& tiles);

// Backward over query tiles (reads out and lse of the forward): writes dq of the tiles' rows, and
// dk, dv of every key up to its document's last query position; other rows of dk, dv are left as
// they are. Tiles of one document (same seq_start) must come in packed order; they need not be
// adjacent.
template <typename T>
void attention_backward(const AttentionTiles<T>& x, const std::vector<QueryTile>& tiles);

}  // namespace hspmd::kernels::cpu
