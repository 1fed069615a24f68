// Sum reductions, deterministic for any thread count: every output element is accumulated in one
// fixed order (threads split the outputs, never one output's terms), and whole-tensor sums add
// fixed-size blocks whose partials are combined in block order. float32 accumulates in double.
//
// sum() needs no permutation: adjacent dims that are both kept or both reduced merge into one
// "group", and size-1 dims vanish, so x[2, 3, 4, 5] summed over {1, 2} is x[2 | 12 | 5] with groups
// kept(2), reduced(12), kept(5). A trailing kept group is the contiguous "inner" row (5 here): each
// output row accumulates x's rows over the reduced indices, a loop the compiler vectorizes. When the
// last group is reduced instead, each output is a sum of contiguous runs.
#include "hspmd/kernels/reduce.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "hspmd/kernels/cpu/typed_visit.h"

namespace hspmd::kernels {
namespace {

using cpu::check_floating;
using cpu::check_same_dtype;
using cpu::kParallelThreshold;

// Elements per block of a whole-tensor sum: fixed, so the grouping of terms never depends on threads.
constexpr int64_t kBlock = 4096;
// Inner-row chunk an output task accumulates at once (a 16 KiB stack buffer of doubles). Long chunks
// matter: each reduced step reads one chunk, and short strided reads cost TLB misses
// (docs/cpu-kernels.md, "Reductions").
constexpr int64_t kRowChunk = 2048;

// Sum of term(p[i]) for i < n in double; four lanes break the dependency chain of the adds.
template <typename T, typename F>
double lanes_sum(const T* p, int64_t n, F term) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += term(p[i]);
    s1 += term(p[i + 1]);
    s2 += term(p[i + 2]);
    s3 += term(p[i + 3]);
  }
  for (; i < n; ++i) s0 += term(p[i]);
  return (s0 + s1) + (s2 + s3);
}

template <typename T, typename F>
double blocked_sum(const T* p, int64_t n, F term) {
  int64_t blocks = (n + kBlock - 1) / kBlock;
  if (blocks <= 1) return lanes_sum(p, n, term);
  std::vector<double> partial(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
  for (int64_t b = 0; b < blocks; ++b) {
    partial[b] = lanes_sum(p + b * kBlock, std::min(kBlock, n - b * kBlock), term);
  }
  double s = 0;
  for (double v : partial) s += v;
  return s;
}

// A run of merged dims: its size and its stride in elements of x.
struct Group {
  int64_t size;
  int64_t stride;
};

// Walks the multi-index of `groups` (row-major, last fastest) and tracks the element offset.
class Odometer {
 public:
  explicit Odometer(const std::vector<Group>& groups) : groups_(groups), index_(groups.size(), 0) {}
  // Positions the odometer at flat index i.
  void seek(int64_t i) {
    offset_ = 0;
    for (size_t g = groups_.size(); g-- > 0;) {
      index_[g] = i % groups_[g].size;
      i /= groups_[g].size;
      offset_ += index_[g] * groups_[g].stride;
    }
  }
  void next() {
    for (size_t g = groups_.size(); g-- > 0;) {
      offset_ += groups_[g].stride;
      if (++index_[g] < groups_[g].size) return;
      offset_ -= index_[g] * groups_[g].stride;
      index_[g] = 0;
    }
  }
  int64_t offset() const { return offset_; }

 private:
  const std::vector<Group>& groups_;
  std::vector<int64_t> index_;
  int64_t offset_ = 0;
};

// x's dims split into kept groups (in output order) and reduced groups, plus the contiguous tail:
// `inner` kept elements (rows) or `run` reduced elements (at most one of them exceeds 1).
struct ReducePlan {
  std::vector<Group> kept, reduced;
  int64_t inner = 1, run = 1;
};

ReducePlan plan_reduction(const Shape& shape, const std::vector<bool>& is_reduced) {
  struct Merged {
    int64_t size;
    bool reduced;
  };
  std::vector<Merged> merged;
  for (int d = 0; d < shape.rank(); ++d) {
    int64_t n = shape.dims()[d];
    if (n == 1) continue;
    if (!merged.empty() && merged.back().reduced == is_reduced[d]) {
      merged.back().size *= n;
    } else {
      merged.push_back({n, is_reduced[d]});
    }
  }
  ReducePlan plan;
  if (!merged.empty()) {
    (merged.back().reduced ? plan.run : plan.inner) = merged.back().size;
    merged.pop_back();
  }
  std::vector<int64_t> strides(merged.size());
  int64_t stride = plan.inner * plan.run;
  for (size_t g = merged.size(); g-- > 0;) {
    strides[g] = stride;
    stride *= merged[g].size;
  }
  for (size_t g = 0; g < merged.size(); ++g) {
    (merged[g].reduced ? plan.reduced : plan.kept).push_back(Group{merged[g].size, strides[g]});
  }
  return plan;
}

int64_t count(const std::vector<Group>& groups) {
  int64_t n = 1;
  for (const Group& g : groups) n *= g.size;
  return n;
}

template <typename T>
void sum_typed(const T* x, int64_t x_numel, const ReducePlan& plan, T* out) {
  const int64_t outer = count(plan.kept), steps = count(plan.reduced);
  const bool parallel = x_numel >= kParallelThreshold;
  if (plan.inner > 1) {
    // Each task owns one chunk of one output row and adds x's rows into it in reduced-index order.
    const int64_t chunks = (plan.inner + kRowChunk - 1) / kRowChunk;
#pragma omp parallel if (parallel)
    {
      Odometer kept(plan.kept), red(plan.reduced);
#pragma omp for schedule(static)
      for (int64_t task = 0; task < outer * chunks; ++task) {
        const int64_t p = task / chunks, j0 = (task % chunks) * kRowChunk;
        const int64_t len = std::min(kRowChunk, plan.inner - j0);
        kept.seek(p);
        red.seek(0);
        double acc[kRowChunk] = {};
        for (int64_t r = 0; r < steps; ++r, red.next()) {
          const T* row = x + kept.offset() + red.offset() + j0;
          for (int64_t j = 0; j < len; ++j) acc[j] += static_cast<double>(row[j]);
        }
        T* o = out + p * plan.inner + j0;
        for (int64_t j = 0; j < len; ++j) o[j] = static_cast<T>(acc[j]);
      }
    }
  } else {
    // Each output is a sum of contiguous runs, taken in reduced-index order.
#pragma omp parallel if (parallel)
    {
      Odometer kept(plan.kept), red(plan.reduced);
#pragma omp for schedule(static)
      for (int64_t p = 0; p < outer; ++p) {
        kept.seek(p);
        red.seek(0);
        double acc = 0;
        for (int64_t r = 0; r < steps; ++r, red.next()) {
          acc += lanes_sum(x + kept.offset() + red.offset(), plan.run, [](T v) { return static_cast<double>(v); });
        }
        out[p] = static_cast<T>(acc);
      }
    }
  }
}

std::string dims_text(const std::vector<int>& dims) {
  std::string s = "{";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "}";
}

}  // namespace

void sum(const Tensor& x, const std::vector<int>& dims, const Tensor& out) {
  check_floating("sum", "x", x);
  check_same_dtype("sum", "x", x, "out", out);
  const int rank = x.rank();
  std::vector<bool> is_reduced(static_cast<size_t>(rank), false);
  for (int d : dims) {
    HSPMD_CHECK(d >= -rank && d < rank)
        << "sum: dim " << d << " of " << dims_text(dims) << " is out of range for 'x' " << x.to_string();
    int c = d < 0 ? d + rank : d;
    HSPMD_CHECK(!is_reduced[c]) << "sum: dim " << d << " appears twice in " << dims_text(dims);
    is_reduced[c] = true;
  }
  int64_t kept_numel = 1;
  for (int d = 0; d < rank; ++d) {
    if (!is_reduced[d]) kept_numel *= x.dim(d);
  }
  HSPMD_CHECK(out.numel() == kept_numel) << "sum: 'out' " << out.to_string() << " should have " << kept_numel
                                         << " elements ('x' " << x.to_string() << " summed over dims "
                                         << dims_text(dims) << ")";
  if (kept_numel == 0) return;
  if (x.numel() == 0) {  // a reduced dim has size 0: empty sums
    std::memset(out.raw_data(), 0, out.nbytes());  // all-zero bits are 0.0
    return;
  }
  cpu::visit_floating(x, [&](auto* px) {
    using T = std::remove_pointer_t<decltype(px)>;
    if (kept_numel == 1) {  // whole-tensor sum: blocked, so it runs on every thread
      out.data<T>()[0] = static_cast<T>(blocked_sum(px, x.numel(), [](T v) { return static_cast<double>(v); }));
      return;
    }
    sum_typed(px, x.numel(), plan_reduction(x.shape(), is_reduced), out.data<T>());
  });
}

double sum_all(const Tensor& x) {
  check_floating("sum_all", "x", x);
  double s = 0;
  cpu::visit_floating(x, [&](auto* px) {
    using T = std::remove_pointer_t<decltype(px)>;
    s = blocked_sum(px, x.numel(), [](T v) { return static_cast<double>(v); });
  });
  return s;
}

double sum_squares(const Tensor& x) {
  check_floating("sum_squares", "x", x);
  double s = 0;
  cpu::visit_floating(x, [&](auto* px) {
    using T = std::remove_pointer_t<decltype(px)>;
    s = blocked_sum(px, x.numel(), [](T v) { return static_cast<double>(v) * static_cast<double>(v); });
  });
  return s;
}

}  // namespace hspmd::kernels
