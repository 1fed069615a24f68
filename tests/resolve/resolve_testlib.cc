#include "resolve/resolve_testlib.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>

#include "hspmd/core/error.h"

namespace hspmd::resolve::testing {

using sharding::Annotation;
using sharding::DeviceGroup;
using sharding::DistState;
using sharding::kDuplicate;
using sharding::kPartial;

namespace {

struct Buffer {
  Region region;
  std::vector<int64_t> v;
  std::vector<int> writes;
};

int64_t flat_index(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t f = 0;
  for (int d = 0; d < shape.rank(); ++d) f = f * shape.dim(d) + idx[d];
  return f;
}

int64_t global_value(int64_t flat) { return flat * 7 + 3; }
int64_t noise(int64_t flat, int gp, int c) { return ((flat * 131 + gp * 17 + c * 29) % 97) - 48; }

template <typename F>
void for_each_index(const Region& r, F&& f) {
  if (r.numel() == 0) return;
  std::vector<int64_t> idx = r.begin;
  int64_t offset = 0;
  while (true) {
    f(idx, offset++);
    int d = r.rank() - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < r.end[d]) break;
      idx[d] = r.begin[d];
    }
    if (d < 0) return;
  }
}

int64_t local_offset(const Region& r, const std::vector<int64_t>& idx) {
  int64_t o = 0;
  for (int d = 0; d < r.rank(); ++d) o = o * r.extent(d) + (idx[d] - r.begin[d]);
  return o;
}

// Partial coordinates of a device: (top-tier summand index, bottom-tier summand index).
std::pair<int, int> partial_coords(const Annotation& a, int dev) {
  auto [g, i] = *a.locate(dev);
  return {a.hdim() == kPartial ? g : 0, a.ds(g).coord(i, kPartial)};
}

std::map<int, Buffer> source_buffers(const Annotation& a, const Shape& shape) {
  std::map<int, Buffer> out;
  for (int dev : a.devices()) {
    Buffer b;
    b.region = *a.region(dev, shape);
    b.v.resize(b.region.numel());
    b.writes.assign(b.v.size(), 1);
    auto [g, i] = *a.locate(dev);
    auto [gp, c] = partial_coords(a, dev);
    for_each_index(b.region, [&](const std::vector<int64_t>& idx, int64_t off) {
      const int64_t f = flat_index(idx, shape);
      if (gp != 0 || c != 0) {
        b.v[off] = noise(f, gp, c);
        return;
      }
      int64_t rest = 0;  // the (0, 0) device holds the value minus every other summand
      if (a.hdim() == kPartial) {
        for (int g2 = 0; g2 < a.hsize(); ++g2) {
          for (int c2 = 0; c2 < a.ds(g2).degree(kPartial); ++c2) rest += (g2 || c2) ? noise(f, g2, c2) : 0;
        }
      } else {
        for (int c2 = 1; c2 < a.ds(g).degree(kPartial); ++c2) rest += noise(f, 0, c2);
      }
      b.v[off] = global_value(f) - rest;
    });
    out[dev] = std::move(b);
  }
  return out;
}

struct Sim {
  std::map<int, Buffer> in, out;
  std::string error;

  bool fail(const std::string& e) {
    if (error.empty()) error = e;
    return false;
  }
  bool read(int dev, const Region& r, std::vector<int64_t>& vals) {
    auto it = in.find(dev);
    if (it == in.end() || !it->second.region.contains(r)) {
      return fail("device " + std::to_string(dev) + " reads " + r.to_string() + " outside its source shard");
    }
    vals.clear();
    for_each_index(r, [&](const std::vector<int64_t>& idx, int64_t) {
      vals.push_back(it->second.v[local_offset(it->second.region, idx)]);
    });
    return true;
  }
  bool write(int dev, const Region& r, const std::vector<int64_t>& vals) {
    auto it = out.find(dev);
    if (it == out.end() || !it->second.region.contains(r)) {
      return fail("device " + std::to_string(dev) + " writes " + r.to_string() + " outside its destination shard");
    }
    for_each_index(r, [&](const std::vector<int64_t>& idx, int64_t k) {
      const int64_t o = local_offset(it->second.region, idx);
      it->second.v[o] = vals[k];
      ++it->second.writes[o];
    });
    return true;
  }
};

bool same_collective(const CommOp& a, const CommOp& b) {
  return a.kind == b.kind && a.group == b.group && a.dim == b.dim && a.pieces == b.pieces;
}

// Whether member `dev` runs collective `want` with CommOp::zero_input.
bool zero_input_of(const DeviceOps& ops, int dev, const CommOp& want) {
  for (const CommOp& op : ops.at(dev)) {
    if (same_collective(op, want)) return op.zero_input;
  }
  return false;
}

bool has_op(const DeviceOps& ops, int dev, const CommOp& want) {
  auto it = ops.find(dev);
  if (it == ops.end()) return false;
  return std::any_of(it->second.begin(), it->second.end(), [&](const CommOp& op) {
    if (want.kind == CommKind::kRecv) return op.kind == CommKind::kSend && op.pieces == want.pieces;
    return same_collective(op, want);
  });
}

void run_op(Sim& sim, const DeviceOps& all, int dev, const CommOp& op) {
  std::vector<int64_t> vals, tmp;
  switch (op.kind) {
    case CommKind::kIdentity:
    case CommKind::kLocalCopy:
      for (const Piece& p : op.pieces) {
        if (sim.read(dev, p.region, vals)) sim.write(dev, p.region, vals);
      }
      return;
    case CommKind::kZeroFill:
      for (const Piece& p : op.pieces) sim.write(dev, p.region, std::vector<int64_t>(p.region.numel(), 0));
      return;
    case CommKind::kSend:
      return;  // data moves when the matching Recv runs
    case CommKind::kRecv: {
      CommOp send = op;
      send.peer = dev;
      if (!has_op(all, op.peer, send)) {
        sim.fail("device " + std::to_string(dev) + " receives from " + std::to_string(op.peer) + " without a matching Send");
        return;
      }
      for (const Piece& p : op.pieces) {
        if (sim.read(op.peer, p.region, vals)) sim.write(dev, p.region, vals);
      }
      return;
    }
    case CommKind::kAllReduce:
    case CommKind::kReduceScatter:
    case CommKind::kAllGather: {
      const Region& full = op.pieces.at(0).region;
      const int n = static_cast<int>(op.group.size());
      const int me = static_cast<int>(std::find(op.group.begin(), op.group.end(), dev) - op.group.begin());
      if (me == n) {
        sim.fail("device " + std::to_string(dev) + " runs a collective it is not a member of");
        return;
      }
      for (int m : op.group) {
        if (!has_op(all, m, op)) {
          sim.fail("collective " + op.to_string() + " is missing on member " + std::to_string(m));
          return;
        }
      }
      if (op.kind == CommKind::kAllGather) {
        for (int j = 0; j < n; ++j) {
          const Region part = full.piece(op.dim, n, j);
          if (sim.read(op.group[j], part, vals)) sim.write(dev, part, vals);
        }
        return;
      }
      const Region target = op.kind == CommKind::kAllReduce ? full : full.piece(op.dim, n, me);
      std::vector<int64_t> sum(target.numel(), 0);
      for (int m : op.group) {
        if (op.kind == CommKind::kAllReduce && zero_input_of(all, m, op)) continue;  // adds zeros
        if (!sim.read(m, target, tmp)) return;
        for (size_t k = 0; k < sum.size(); ++k) sum[k] += tmp[k];
      }
      if (op.kind != CommKind::kAllReduce) {
        sim.write(dev, target, sum);
        return;
      }
      // An all-reduce member keeps what its destination shard covers of the sum.
      auto it = sim.out.find(dev);
      std::optional<Region> keep = it == sim.out.end() ? std::nullopt : it->second.region.intersect(target);
      if (!keep) {
        sim.fail("device " + std::to_string(dev) + " keeps nothing of " + op.to_string());
        return;
      }
      std::vector<int64_t> kept;
      for_each_index(*keep, [&](const std::vector<int64_t>& idx, int64_t) {
        kept.push_back(sum[local_offset(target, idx)]);
      });
      sim.write(dev, *keep, kept);
      return;
    }
  }
}

std::string check_destination(const std::map<int, Buffer>& bufs, const Annotation& dst, const Shape& shape) {
  // Sets of devices whose summands must add up to the tensor: all groups when hdim is partial,
  // else each group on its own.
  std::vector<std::vector<int>> sets;
  if (dst.hdim() == kPartial) {
    sets.push_back(dst.devices());
  } else {
    for (const DeviceGroup& g : dst.dg_union()) sets.push_back(g.devices());
  }
  for (const auto& devs : sets) {
    std::map<int64_t, std::map<std::pair<int, int>, int64_t>> summands;  // flat -> (gp, c) -> value
    for (int dev : devs) {
      const Buffer& b = bufs.at(dev);
      const auto key = partial_coords(dst, dev);
      for_each_index(b.region, [&](const std::vector<int64_t>& idx, int64_t off) {
        auto [it, fresh] = summands[flat_index(idx, shape)].emplace(key, b.v[off]);
        if (!fresh && it->second != b.v[off]) it->second = INT64_MIN;  // replicas disagree
      });
    }
    for (const auto& [flat, parts] : summands) {
      int64_t sum = 0;
      for (const auto& [key, v] : parts) {
        if (v == INT64_MIN) return "replicas disagree at flat index " + std::to_string(flat);
        sum += v;
      }
      if (sum != global_value(flat)) {
        return "wrong value at flat index " + std::to_string(flat) + ": " + std::to_string(sum) + " != " +
               std::to_string(global_value(flat));
      }
    }
  }
  return "";
}

}  // namespace

std::string simulate(const Resolution& res, const Annotation& src, const Annotation& dst, const Shape& shape) {
  Sim sim;
  sim.in = source_buffers(src, shape);
  for (size_t s = 0; s < res.steps.size(); ++s) {
    const ResolveStep& step = res.steps[s];
    sim.out.clear();
    for (int dev : step.to.devices()) {
      Buffer b;
      b.region = *step.to.region(dev, shape);
      b.v.assign(b.region.numel(), 0);
      b.writes.assign(b.v.size(), 0);
      sim.out[dev] = std::move(b);
    }
    for (const auto& [dev, ops] : step.ops) {
      for (const CommOp& op : ops) run_op(sim, step.ops, dev, op);
    }
    if (!sim.error.empty()) return "step " + std::to_string(s) + ": " + sim.error;
    for (const auto& [dev, b] : sim.out) {
      for (size_t k = 0; k < b.writes.size(); ++k) {
        if (b.writes[k] != 1) {
          return "step " + std::to_string(s) + ": device " + std::to_string(dev) + " element " + std::to_string(k) +
                 " of " + b.region.to_string() + " written " + std::to_string(b.writes[k]) + " times";
        }
      }
    }
    sim.in = std::move(sim.out);
  }
  return check_destination(sim.in, dst, shape);
}

DistState random_ds(std::mt19937& rng, int devices, int rank, bool allow_partial) {
  std::vector<int> labels;
  if (allow_partial) labels.push_back(kPartial);
  labels.push_back(kDuplicate);
  for (int d = 0; d < rank; ++d) labels.push_back(d);
  std::shuffle(labels.begin(), labels.end(), rng);
  std::vector<DistState::Entry> entries;
  size_t next = 0;
  while (devices > 1 && next < labels.size()) {
    const int degree = (devices % 2 == 0 && (rng() % 2 == 0 || devices == 2)) ? 2 : devices;
    entries.push_back({labels[next++], degree});
    devices /= degree;
  }
  if (devices > 1) entries.push_back({kDuplicate, devices});  // only when labels ran out
  return DistState::make(entries);
}

Annotation random_annotation(std::mt19937& rng, int max_devices, int rank, bool allow_partial) {
  std::vector<int> pool(max_devices);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  const int hsize = 1 + static_cast<int>(rng() % 3);
  std::vector<DeviceGroup> groups;
  std::vector<DistState> states;
  size_t used = 0;
  for (int g = 0; g < hsize && used < pool.size(); ++g) {
    static const int kSizes[] = {1, 2, 4};
    int size = kSizes[rng() % 3];
    size = std::min<int>(size, static_cast<int>(pool.size() - used));
    if (size == 3) size = 2;
    groups.emplace_back(std::vector<int>(pool.begin() + used, pool.begin() + used + size));
    used += size;
    states.push_back(random_ds(rng, size, rank, allow_partial));
  }
  int hdim = static_cast<int>(rng() % (rank + (allow_partial ? 2 : 1))) - (allow_partial ? 2 : 1);
  return Annotation::make(groups, states, hdim);
}

}  // namespace hspmd::resolve::testing
