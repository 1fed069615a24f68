#include "hspmd/sharding/deduce.h"

#include <algorithm>

#include "hspmd/core/error.h"

namespace hspmd::sharding {

void check_same_placement(const std::string& op, const std::vector<Annotation>& inputs) {
  HSPMD_CHECK(!inputs.empty()) << "op " << op << " has no inputs to deduce from";
  for (size_t i = 1; i < inputs.size(); ++i) {
    HSPMD_CHECK(inputs[i].dg_union() == inputs[0].dg_union())
        << "op " << op << ": input 0 is " << inputs[0].to_string() << " but input " << i << " is "
        << inputs[i].to_string() << "; inputs must share dg_union and hsize (" << inputs[0].hsize() << " vs "
        << inputs[i].hsize() << "), insert a Reshard before input " << i;
  }
}

namespace {

std::vector<DistState> cleared(const std::vector<DistState>& states) {
  std::vector<DistState> out;
  for (const DistState& ds : states) out.push_back(ds.with_zero(false));
  return out;
}

// What a logical dim of an input means for the op, so the two inputs' labels can be combined.
enum class Role { kDup, kPartial, kContracted, kOut };
struct Label {
  Role role;
  int out_dim = -1;  // kOut: the output dim it becomes
};

Label x_label(int dim, int x_rank) {
  if (dim == kDuplicate) return {Role::kDup};
  if (dim == kPartial) return {Role::kPartial};
  if (dim == x_rank - 1) return {Role::kContracted};
  return {Role::kOut, dim};
}

Label w_label(int dim, int x_rank, bool transpose_w) {
  if (dim == kDuplicate) return {Role::kDup};
  if (dim == kPartial) return {Role::kPartial};
  const int contracted = transpose_w ? 1 : 0;
  if (dim == contracted) return {Role::kContracted};
  return {Role::kOut, x_rank - 1};
}

// The Figure 13 table for one position; returns false when the pair needs a Reshard.
bool combine(Label x, Label w, int& out) {
  if (x.role == Role::kDup && w.role == Role::kDup) {
    out = kDuplicate;
  } else if (x.role == Role::kContracted && w.role == Role::kContracted) {
    out = kPartial;
  } else if ((x.role == Role::kPartial && w.role == Role::kDup) || (x.role == Role::kDup && w.role == Role::kPartial)) {
    out = kPartial;
  } else if (x.role == Role::kOut && w.role == Role::kDup) {
    out = x.out_dim;
  } else if (x.role == Role::kDup && w.role == Role::kOut) {
    out = w.out_dim;
  } else {
    return false;
  }
  return true;
}

[[noreturn]] void matmul_fail(const std::string& op, const DistState& x, const DistState& w, const std::string& why) {
  HSPMD_THROW() << "op " << op << ": cannot deduce matmul of x " << x.to_string() << " and w " << w.to_string() << " ("
                << why << "); insert a Reshard before one input";
}

const char* dim_name(int dim) {
  return dim == kPartial ? "partial" : dim == kDuplicate ? "duplicate" : "split";
}

}  // namespace

Annotation deduce_elementwise(const std::string& op, const std::vector<Annotation>& inputs, Linearity linearity) {
  check_same_placement(op, inputs);
  const std::vector<DistState> ds = cleared(inputs[0].ds_union());
  for (size_t i = 1; i < inputs.size(); ++i) {
    HSPMD_CHECK(cleared(inputs[i].ds_union()) == ds && inputs[i].hdim() == inputs[0].hdim())
        << "op " << op << ": input 0 is " << inputs[0].to_string() << " but input " << i << " is "
        << inputs[i].to_string() << "; an elementwise op needs identical shardings, insert a Reshard before input "
        << i;
  }
  if (linearity == Linearity::kNonLinear) {
    HSPMD_CHECK(!inputs[0].has_partial()) << "op " << op << " is not linear but its input " << inputs[0].to_string()
                                          << " is partial; insert a Reshard (AllReduce) before it";
  }
  return Annotation::make(inputs[0].dg_union(), ds, inputs[0].hdim());
}

DistState deduce_matmul_ds(const std::string& op, const DistState& x, const DistState& w, int x_rank,
                           bool transpose_w) {
  HSPMD_CHECK(x_rank >= 2) << "op " << op << ": matmul input x must have rank >= 2, got " << x_rank;
  const auto& xe = x.entries();
  const auto& we = w.entries();
  auto fail = [&](const std::string& why) { matmul_fail(op, x, w, why); };
  // Positions must match one to one (same degrees, same order): then a device has the same
  // coordinate in both inputs and the per-position table below applies.
  bool aligned = xe.size() == we.size();
  for (size_t i = 0; aligned && i < xe.size(); ++i) aligned = xe[i].degree == we[i].degree;
  if (!aligned) fail("the two DistStates order their devices differently");
  std::vector<DistState::Entry> out;
  for (size_t i = 0; i < xe.size(); ++i) {
    int dim;
    if (!combine(x_label(xe[i].dim, x_rank), w_label(we[i].dim, x_rank, transpose_w), dim)) {
      fail(std::string("x is ") + dim_name(xe[i].dim) + (xe[i].dim >= 0 ? std::to_string(xe[i].dim) : "") +
           " where w is " + dim_name(we[i].dim) + (we[i].dim >= 0 ? std::to_string(we[i].dim) : ""));
    }
    out.push_back({dim, xe[i].degree});
  }
  // Two positions may now name the same output dim (e.g. x dup/w partial next to x partial):
  // DistState::make rejects that with a clear message; rephrase it for the op.
  try {
    return DistState::make(out);
  } catch (const Error&) {
    matmul_fail(op, x, w, "the result would shard one dim twice");
  }
}

Annotation deduce_matmul(const std::string& op, const Annotation& x, const Annotation& w, int x_rank,
                         bool transpose_w) {
  check_same_placement(op, {x, w});
  std::vector<DistState> ds;
  for (int g = 0; g < x.hsize(); ++g) ds.push_back(deduce_matmul_ds(op, x.ds(g), w.ds(g), x_rank, transpose_w));
  int hdim = kDuplicate;
  if (x.hsize() > 1 && !combine(x_label(x.hdim(), x_rank), w_label(w.hdim(), x_rank, transpose_w), hdim)) {
    HSPMD_THROW() << "op " << op << ": cannot deduce the top tier of matmul of x " << x.to_string() << " and w "
                  << w.to_string() << " (hdim " << x.hdim() << " vs " << w.hdim()
                  << "); insert a Reshard before one input";
  }
  return Annotation::make(x.dg_union(), std::move(ds), hdim);
}

namespace {

// New index of dim d after reducing `dims` (or kPartial when d itself is reduced).
int reduced_dim(int d, const std::vector<int>& dims, bool keepdim) {
  if (d < 0) return d;
  if (std::find(dims.begin(), dims.end(), d) != dims.end()) return kPartial;
  if (keepdim) return d;
  int removed = 0;
  for (int r : dims) removed += r < d ? 1 : 0;
  return d - removed;
}

std::vector<int> canonical_dims(const std::string& op, const std::vector<int>& dims, int rank) {
  std::vector<int> out;
  for (int d : dims) {
    int c = d < 0 ? d + rank : d;
    HSPMD_CHECK(c >= 0 && c < rank) << "op " << op << ": reduce dim " << d << " out of range for rank " << rank;
    out.push_back(c);
  }
  return out;
}

}  // namespace

DistState deduce_reduce_ds(const std::string& op, const DistState& x, const std::vector<int>& dims, int rank,
                           bool keepdim) {
  const std::vector<int> cd = canonical_dims(op, dims, rank);
  std::vector<DistState::Entry> out;
  for (const DistState::Entry& e : x.entries()) out.push_back({reduced_dim(e.dim, cd, keepdim), e.degree});
  try {
    return DistState::make(out);
  } catch (const Error&) {
    HSPMD_THROW() << "op " << op << ": reducing " << x.to_string()
                  << " would make two partial dims; insert a Reshard (AllReduce) before it";
  }
}

Annotation deduce_reduce(const std::string& op, const Annotation& x, const std::vector<int>& dims, int rank,
                         bool keepdim) {
  std::vector<DistState> ds;
  for (const DistState& s : x.ds_union()) ds.push_back(deduce_reduce_ds(op, s, dims, rank, keepdim));
  return Annotation::make(x.dg_union(), std::move(ds), reduced_dim(x.hdim(), canonical_dims(op, dims, rank), keepdim));
}

}  // namespace hspmd::sharding
