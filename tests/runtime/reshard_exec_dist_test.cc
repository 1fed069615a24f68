// execute_reshard on 4 ranks as 4 threads (Gloo over loopback): every case of the paper's Figure 7,
// a seeded random sample of annotation pairs, other dtypes, and forward/backward traffic on two
// channels at once. The global tensor holds distinct integers (exact in every dtype used); a
// Partial source splits each value into integer summands; each device's result must be exactly
// its destination shard (for a Partial destination: replicas agree and the summands add up).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "error_of.h"
#include "hspmd/core/error.h"
#include "hspmd/resolve/resolver.h"
#include "hspmd/runtime/reshard_exec.h"
#include "hspmd/sharding/annotation.h"
#include "hspmd/comm/thread_ranks.h"

namespace hspmd::runtime {
namespace {

using resolve::Resolution;
using sharding::Annotation;
using sharding::DeviceGroup;
using sharding::DistState;
using sharding::kDuplicate;
using sharding::kPartial;
using sharding::Region;

constexpr int kWorld = 4;

double global_value(int64_t flat) { return static_cast<double>(flat * 7 + 3); }
double noise(int64_t flat, int gp, int c) { return static_cast<double>((flat * 131 + gp * 17 + c * 29) % 97 - 48); }

int64_t flat_index(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t f = 0;
  for (int d = 0; d < shape.rank(); ++d) f = f * shape.dim(d) + idx[d];
  return f;
}

// Calls f(global index, offset in the region) for every element of r, row-major.
template <typename F>
void for_each_index(const Region& r, F&& f) {
  if (r.numel() == 0) return;
  std::vector<int64_t> idx = r.begin;
  for (int64_t offset = 0;; ++offset) {
    f(idx, offset);
    int d = r.rank() - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < r.end[d]) break;
      idx[d] = r.begin[d];
    }
    if (d < 0) return;
  }
}

// Which summand of a Partial annotation a device holds: (top-tier index, bottom-tier index).
std::pair<int, int> summand_key(const Annotation& a, int device) {
  auto [g, i] = *a.locate(device);
  return {a.hdim() == kPartial ? g : 0, a.ds(g).coord(i, kPartial)};
}

// The value `device` holds at `flat` under annotation a: summand (0, 0) is the value minus every
// other summand, so the summands of each device set add up to the value exactly.
double summand(const Annotation& a, int device, int64_t flat) {
  auto [gp, c] = summand_key(a, device);
  if (gp != 0 || c != 0) return noise(flat, gp, c);
  double rest = 0;
  if (a.hdim() == kPartial) {
    for (int g = 0; g < a.hsize(); ++g) {
      for (int k = 0; k < a.ds(g).degree(kPartial); ++k) rest += (g || k) ? noise(flat, g, k) : 0;
    }
  } else {
    const int g = a.locate(device)->first;
    for (int k = 1; k < a.ds(g).degree(kPartial); ++k) rest += noise(flat, 0, k);
  }
  return global_value(flat) - rest;
}

void set_element(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kFloat32: t.data<float>()[i] = static_cast<float>(v); return;
    case DType::kFloat64: t.data<double>()[i] = v; return;
    case DType::kInt64: t.data<int64_t>()[i] = static_cast<int64_t>(v); return;
    default: HSPMD_THROW() << "test data in " << dtype_name(t.dtype());
  }
}

// Device's source shard under a (undefined when it holds nothing).
Tensor shard_of(const Annotation& a, int device, const Shape& shape, DType dtype) {
  std::optional<Region> r = a.region(device, shape);
  if (!r) return Tensor();
  Tensor t = Tensor::empty(r->shape(), dtype);
  for_each_index(*r, [&](const std::vector<int64_t>& idx, int64_t off) {
    set_element(t, off, summand(a, device, flat_index(idx, shape)));
  });
  return t;
}

// "" when results[device] are the destination shards of dst: the right shapes and dtype, replicas
// agree, summands add up to the tensor (just the value when dst has no Partial).
std::string check_destination(const Annotation& dst, const Shape& shape, DType dtype,
                              const std::vector<Tensor>& results) {
  for (int dev = 0; dev < kWorld; ++dev) {
    std::optional<Region> r = dst.region(dev, shape);
    const Tensor& t = results[dev];
    if (!r && t.defined()) return "device " + std::to_string(dev) + " holds nothing but got " + t.to_string();
    if (!r) continue;
    if (!t.defined() || t.shape() != r->shape() || t.dtype() != dtype) {
      return "device " + std::to_string(dev) + " got " + (t.defined() ? t.to_string() : "nothing") + " for " +
             r->to_string() + " in " + std::string(dtype_name(dtype));
    }
  }
  std::vector<std::vector<int>> sets;  // device sets whose summands add up to the tensor
  if (dst.hdim() == kPartial) {
    sets.push_back(dst.devices());
  } else {
    for (const DeviceGroup& g : dst.dg_union()) sets.push_back(g.devices());
  }
  for (const auto& devices : sets) {
    std::map<int64_t, std::map<std::pair<int, int>, double>> parts;  // flat -> summand key -> value
    for (int dev : devices) {
      const Region r = *dst.region(dev, shape);
      const std::pair<int, int> key = summand_key(dst, dev);
      for_each_index(r, [&](const std::vector<int64_t>& idx, int64_t off) {
        const int64_t flat = flat_index(idx, shape);
        const double v = results[dev].element_as_double(off);
        auto [it, fresh] = parts[flat].emplace(key, v);
        if (!fresh && it->second != v) it->second = std::nan("");  // replicas disagree
      });
    }
    for (const auto& [flat, by_key] : parts) {
      double sum = 0;
      for (const auto& [key, v] : by_key) sum += v;
      if (sum != global_value(flat)) {
        return "element " + std::to_string(flat) + " is " + std::to_string(sum) + ", want " +
               std::to_string(global_value(flat));
      }
    }
  }
  return "";
}

struct Case {
  std::string src, dst;  // annotation texts
  Shape shape;
  std::string classification;  // expected; "" = any
  DType dtype = DType::kFloat64;
};

struct CaseRun {
  Resolution resolution;
  std::vector<Tensor> sources, results;  // per device
};

// Runs every case on kWorld ranks in one run_thread_ranks (each rank's communicators are created once
// and reused across cases), every rank executing the cases in the same order on `channel`.
std::vector<CaseRun> run_cases(const std::vector<Case>& cases, const std::string& channel = "") {
  std::vector<CaseRun> runs(cases.size());
  for (size_t c = 0; c < cases.size(); ++c) {
    const Annotation src = Annotation::parse(cases[c].src), dst = Annotation::parse(cases[c].dst);
    runs[c].resolution = resolve::resolve(src, dst, cases[c].shape, "T" + std::to_string(c));
    runs[c].sources.resize(kWorld);
    runs[c].results.resize(kWorld);
    for (int dev = 0; dev < kWorld; ++dev) runs[c].sources[dev] = shard_of(src, dev, cases[c].shape, cases[c].dtype);
  }
  comm::run_thread_ranks(kWorld, [&](int rank, comm::GroupCache& groups) {
    CommSession session(groups, rank);
    for (size_t c = 0; c < cases.size(); ++c) {
      runs[c].results[rank] = execute_reshard(runs[c].resolution, cases[c].shape, rank, runs[c].sources[rank], session,
                                              channel, cases[c].dtype);
    }
    session.wait_deferred();
  });
  return runs;
}

void expect_exact(const std::vector<Case>& cases, const std::vector<CaseRun>& runs) {
  for (size_t c = 0; c < cases.size(); ++c) {
    const std::string label = cases[c].src + " -> " + cases[c].dst + " " + cases[c].shape.to_string() + " (" +
                              runs[c].resolution.classification() + ", " + std::string(dtype_name(cases[c].dtype)) +
                              ")";
    if (!cases[c].classification.empty()) {
      EXPECT_EQ(runs[c].resolution.classification(), cases[c].classification) << label;
    }
    EXPECT_EQ(check_destination(Annotation::parse(cases[c].dst), cases[c].shape, cases[c].dtype, runs[c].results), "")
        << label;
  }
}

TEST(ReshardExec, EveryFigure7CaseGivesExactDestinationShards) {
  const Shape s{8, 4};
  const std::vector<Case> cases = {
      {"dup{[0-3](S0:4)}", "dup{[0-3](S0:4)}", s, "bottom[Identity]"},
      {"dup{[0-3](P:4)}", "dup{[0-3](D:4)}", s, "bottom[AR]"},
      {"dup{[0-3](S1:2,P:2)}", "dup{[0-3](S1:2,D:2)}", s, "bottom[AR]"},  // two ARs: [0,1] and [2,3]
      {"dup{[0-3](P:4)}", "dup{[0-3](S0:4)}", s, "bottom[RS]"},
      {"dup{[0-3](P:2,S1:2)}", "dup{[0-3](S0:2,S1:2)}", s, "bottom[RS]"},
      {"dup{[0-3](S0:4)}", "dup{[0-3](D:4)}", s, "bottom[AG]"},
      {"dup{[0-3](S1:2,S0:2)}", "dup{[0-3](D:2,S0:2)}", s, "bottom[AG]"},
      {"dup{[0-3](D:4)}", "dup{[0-3](S1:4)}", s, "bottom[Slice]"},
      {"dup{[0-1](S0:2)}", "dup{[2-3](S0:2)}", s, "bottom[SR]"},
      {"dup{[0-1](P:2)}", "dup{[3,2](P:2)}", s, "bottom[SR]"},
      {"dup{[0-3](S0:4)}", "dup{[0-3](S1:4)}", s, "bottom[BSR]"},
      {"dup{[0-1](S0:2)}", "dup{[1,2,3,0](S1:2,S0:2)}", s, ""},
      {"split0{[0-1](S1:2);[2-3](S1:2)}", "split1{[0,3](D:2);[1-2](S0:2)}", s, "BSR"},
      {"partial{[0-1](S0:2);[2-3](S0:2)}", "dup{[0-1](S0:2);[2-3](S0:2)}", s, "top[SplitAR]"},
      {"partial{[0-1](S0:2);[2-3](S1:2)}", "dup{[0-1](S0:2);[2-3](S1:2)}", s, "top[SplitAR]"},  // 4 groups
      {"partial{[0]();[1-2](D:2)}", "dup{[0]();[1-2](D:2)}", s, "top[SplitAR]"},  // uneven: zero_input
      {"partial{[0-1](S1:2);[2-3](S1:2)}", "split0{[0-1](S1:2);[2-3](S1:2)}", s, "top[SplitRS]"},
      {"partial{[0]();[1-2](D:2)}", "split0{[0]();[1-2](D:2)}", s, "top[SplitRS]"},  // uneven: AR, keep a part
      {"split0{[0-1](S1:2);[2-3](S1:2)}", "dup{[0-1](S1:2);[2-3](S1:2)}", s, "top[SplitAG]"},
      {"split1{[0]();[1-2](S0:2)}", "dup{[0]();[1-2](S0:2)}", s, "top[SplitAG]"},  // heterogeneous
      // Collective groups [2,0] and [3,1]: member order is not rank order.
      {"split0{[2-3](S1:2);[0-1](S1:2)}", "dup{[2-3](S1:2);[0-1](S1:2)}", s, "top[SplitAG]"},
      {"partial{[2-3](S1:2);[0-1](S1:2)}", "split0{[2-3](S1:2);[0-1](S1:2)}", s, "top[SplitRS]"},
      {"dup{[0-1](S1:2);[2-3](S1:2)}", "split0{[0-1](S1:2);[2-3](S1:2)}", s, "top[SplitSlice]"},
      {"split0{[0-1](S1:2);[2-3](S1:2)}", "dup{[0-1](D:2);[2-3](D:2)}", s, "bottom[AG,AG]+top[SplitAG]"},
      {"partial{[0-1](P:2);[2-3](P:2)}", "dup{[0-1](S0:2);[2-3](S0:2)}", s, "bottom[RS,RS]+top[SplitAR]"},
      {"dup{[0-3](P:2,S2:2)}", "dup{[0-3](S0:2,S2:2)}", Shape{4, 6, 2}, "bottom[RS]"},
  };
  const std::vector<CaseRun> runs = run_cases(cases);
  expect_exact(cases, runs);
  for (int dev = 0; dev < kWorld; ++dev) {  // Identity hands back the source shard itself
    EXPECT_TRUE(runs[0].results[dev].shares_storage_with(runs[0].sources[dev])) << "device " << dev;
  }
}

DistState random_ds(std::mt19937& rng, int devices, int rank) {
  std::vector<int> labels = {kPartial, kDuplicate};
  for (int d = 0; d < rank; ++d) labels.push_back(d);
  std::shuffle(labels.begin(), labels.end(), rng);
  std::vector<int> degrees;
  if (devices == 4 && rng() % 2) {
    degrees = {2, 2};
  } else if (devices > 1) {
    degrees = {devices};
  }
  std::vector<DistState::Entry> entries;
  for (size_t k = 0; k < degrees.size(); ++k) entries.push_back({labels[k], degrees[k]});
  return DistState::make(entries);
}

// A random annotation over ranks 0..3: one or two subgroups (sizes 1 to 4; those of `same_groups`
// when given, so collectives apply), any bottom tier, any hdim; nullopt when it does not fit.
std::optional<Annotation> random_annotation(std::mt19937& rng, const Shape& shape,
                                            const Annotation* same_groups = nullptr) {
  std::vector<int> pool = {0, 1, 2, 3};
  std::shuffle(pool.begin(), pool.end(), rng);
  static const std::vector<std::vector<int>> kSizes = {{1}, {2}, {3}, {4}, {1, 1}, {1, 2}, {2, 1}, {2, 2}, {1, 3}};
  std::vector<DeviceGroup> groups;
  if (same_groups) {
    groups = same_groups->dg_union();
  } else {
    size_t used = 0;
    for (int size : kSizes[rng() % kSizes.size()]) {
      groups.emplace_back(std::vector<int>(pool.begin() + used, pool.begin() + used + size));
      used += size;
    }
  }
  std::vector<DistState> states;
  for (const DeviceGroup& g : groups) states.push_back(random_ds(rng, g.size(), shape.rank()));
  const int hdim = static_cast<int>(rng() % (shape.rank() + 2)) - 2;
  try {
    Annotation a = Annotation::make(groups, states, hdim);
    a.validate_for(shape, "T");
    return a;
  } catch (const Error&) {
    return std::nullopt;
  }
}

TEST(ReshardExec, SeededRandomAnnotationPairsGiveExactDestinationShards) {
  std::mt19937 rng(20261129);
  std::vector<Case> cases;
  std::set<std::string> classes;
  const Shape shapes[] = {Shape{8, 4}, Shape{4, 6, 2}};
  for (int attempt = 0; attempt < 5000 && cases.size() < 48; ++attempt) {
    const Shape& shape = shapes[attempt % 2];
    std::optional<Annotation> src = random_annotation(rng, shape);
    if (!src) continue;
    std::optional<Annotation> dst = random_annotation(rng, shape, rng() % 2 ? &*src : nullptr);
    if (!dst) continue;
    try {
      const Resolution r = resolve::resolve(*src, *dst, shape, "T");
      classes.insert(r.classification());
    } catch (const Error&) {
      continue;  // Partial that would need BSR: not a valid Reshard
    }
    cases.push_back({src->to_string(), dst->to_string(), shape, ""});
  }
  ASSERT_EQ(cases.size(), 48u);
  std::string seen;
  for (const std::string& c : classes) seen += c + " ";
  EXPECT_GE(classes.size(), 8u) << "classifications covered: " << seen;
  expect_exact(cases, run_cases(cases));
  std::cout << "random pairs: " << cases.size() << ", classifications: " << seen << "\n";
}

TEST(ReshardExec, Float32AndInt64IncludingPureReceivers) {
  const Shape s{8, 4};
  std::vector<Case> cases;
  for (DType dtype : {DType::kFloat32, DType::kInt64}) {
    cases.push_back({"dup{[0-3](P:4)}", "dup{[0-3](D:4)}", s, "bottom[AR]", dtype});
    cases.push_back({"dup{[0-3](P:2,S1:2)}", "dup{[0-3](S0:2,S1:2)}", s, "bottom[RS]", dtype});
    cases.push_back({"dup{[0-3](S0:4)}", "dup{[0-3](D:4)}", s, "bottom[AG]", dtype});
    cases.push_back({"dup{[0-1](S0:2)}", "dup{[2-3](S0:2)}", s, "bottom[SR]", dtype});  // 2, 3 only receive
    cases.push_back({"dup{[0-3](S0:4)}", "dup{[0-3](S1:4)}", s, "bottom[BSR]", dtype});
  }
  expect_exact(cases, run_cases(cases, "post"));
}

// A 4-stage pipeline: micro-batch activations flow 0 -> 3 on channel "F" while gradients flow
// 3 -> 0 on channel "B", from two threads per rank sharing one CommSession. Stage k adds 1 before
// passing a tensor on, so each receiver checks both the data and the path it took.
TEST(ReshardExec, ForwardAndBackwardChannelsRunConcurrently) {
  const Shape shape{4, 6};
  constexpr int kMicroBatches = 6;
  auto stage = [](int k) { return Annotation::spmd(DeviceGroup({k}), DistState()); };
  auto base = [&](int mb, double scale) {
    Tensor t = Tensor::empty(shape, DType::kFloat64);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = scale * (mb * 100 + i);
    return t;
  };
  auto plus = [](const Tensor& t, double v) {
    Tensor out = t.clone();
    for (int64_t i = 0; i < out.numel(); ++i) out.data<double>()[i] += v;
    return out;
  };
  // One direction: hops from stage `first` towards `last`, step +1 or -1.
  auto flow = [&](int rank, CommSession& session, const std::string& channel, int first, int step, double scale) {
    const int hop_in = rank - step, hop_out = rank + step;
    for (int mb = 0; mb < kMicroBatches; ++mb) {
      Tensor x;
      if (rank == first) {
        x = base(mb, scale);
      } else {
        const Resolution r = resolve::resolve(stage(hop_in), stage(rank), shape, "x");
        x = execute_reshard(r, shape, rank, Tensor(), session, channel, DType::kFloat64);
        const Tensor want = plus(base(mb, scale), std::abs(rank - first));
        ASSERT_EQ(x.to_vector<double>(), want.to_vector<double>()) << channel << " micro-batch " << mb << " rank " << rank;
      }
      if (hop_out >= 0 && hop_out < kWorld) {
        const Resolution r = resolve::resolve(stage(rank), stage(hop_out), shape, "x");
        EXPECT_FALSE(execute_reshard(r, shape, rank, plus(x, 1), session, channel).defined());
      }
    }
  };
  comm::run_thread_ranks(kWorld, [&](int rank, comm::GroupCache& groups) {
    CommSession session(groups, rank);
    std::string backward_error;
    std::thread backward([&] {
      try {
        flow(rank, session, "B", kWorld - 1, -1, -1.0);
      } catch (const std::exception& e) {
        backward_error = e.what();
      }
    });
    flow(rank, session, "F", 0, +1, 1.0);
    backward.join();
    HSPMD_CHECK(backward_error.empty()) << "backward: " << backward_error;
    session.wait_deferred();
  });
}

TEST(ReshardExec, WrongSourceShardNamesTheStepAndShapes) {
  comm::run_thread_ranks(1, [&](int rank, comm::GroupCache& groups) {
    CommSession session(groups, rank);
    const Annotation a = Annotation::parse("dup{[0]()}");
    const Resolution r = resolve::resolve(a, a, Shape{8, 4}, "W");
    const std::string e = hspmd::testing::error_of(
        [&] { execute_reshard(r, Shape{8, 4}, 0, Tensor::zeros(Shape{4, 4}, DType::kFloat64), session, "F"); });
    EXPECT_NE(e.find("step 1/1 on device 0"), std::string::npos) << e;
    EXPECT_NE(e.find("[8, 4]"), std::string::npos) << e;
    EXPECT_NE(e.find("[4, 4]"), std::string::npos) << e;
    EXPECT_NE(hspmd::testing::error_of([&] { execute_reshard(r, Shape{8, 4}, 1, Tensor(), session, "F"); })
                  .find("comm session of rank 0"),
              std::string::npos);
  });
}

}  // namespace
}  // namespace hspmd::runtime
