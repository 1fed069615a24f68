// Figure 7 case by case with hand-computed ops, Figures 8-10, the Figure 4 (right) example deduced
// and resolved end to end, and property tests on random annotations checked by simulation.
#include <gtest/gtest.h>

#include "hspmd/core/error.h"
#include "hspmd/resolve/resolver.h"
#include "hspmd/sharding/deduce.h"
#include "resolve/resolve_testlib.h"

namespace hspmd::resolve {
namespace {

using sharding::Annotation;
using sharding::DistState;

Annotation A(const char* text) { return Annotation::parse(text); }

std::vector<std::string> ops_text(const Resolution& r, int device) {
  std::vector<std::string> out;
  for (const CommOp& op : r.ops_of(device)) out.push_back(op.to_string());
  return out;
}

using V = std::vector<std::string>;

// Resolves and checks by simulation that the ops really perform the reshard.
Resolution checked(const Annotation& src, const Annotation& dst, const Shape& shape) {
  Resolution r = resolve(src, dst, shape, "T");
  EXPECT_EQ(testing::simulate(r, src, dst, shape), "") << src.to_string() << " -> " << dst.to_string();
  return r;
}

const Shape kShape{8, 4};  // float32: a [4, 4] half is 64 bytes, the whole 128

TEST(BottomTier, IdentityAndSendReceive) {
  Resolution id = checked(A("dup{[0-1](S0:2)}"), A("dup{[0-1](S0:2)}"), kShape);
  EXPECT_EQ(id.classification(), "bottom[Identity]");
  EXPECT_EQ(ops_text(id, 1), V{"Identity [4:8, 0:4] bytes=0"});
  Resolution sr = checked(A("dup{[0-1](S0:2)}"), A("dup{[2,1](S0:2)}"), kShape);
  EXPECT_EQ(sr.classification(), "bottom[SR]");
  EXPECT_EQ(ops_text(sr, 0), V{"Send peer=2 [0:4, 0:4] bytes=64"});
  EXPECT_EQ(ops_text(sr, 2), V{"Recv peer=0 [0:4, 0:4] bytes=0"});
  EXPECT_EQ(ops_text(sr, 1), V{"Identity [4:8, 0:4] bytes=0"});
}

TEST(BottomTier, Figure8Collectives) {
  Resolution ar = checked(A("dup{[0-1](P:2)}"), A("dup{[0-1](D:2)}"), kShape);
  EXPECT_EQ(ar.classification(), "bottom[AR]");
  EXPECT_EQ(ops_text(ar, 0), V{"AllReduce group=[0-1] [0:8, 0:4] bytes=128"});
  Resolution rs = checked(A("dup{[0-1](P:2)}"), A("dup{[0-1](S0:2)}"), kShape);
  EXPECT_EQ(rs.classification(), "bottom[RS]");
  EXPECT_EQ(ops_text(rs, 1), V{"ReduceScatter group=[0-1] dim=0 [0:8, 0:4] bytes=64"});
  Resolution ag = checked(A("dup{[0-1](S1:2)}"), A("dup{[0-1](D:2)}"), kShape);
  EXPECT_EQ(ag.classification(), "bottom[AG]");
  EXPECT_EQ(ops_text(ag, 0), V{"AllGather group=[0-1] dim=1 [0:8, 0:4] bytes=64"});
  Resolution slice = checked(A("dup{[0-1](D:2)}"), A("dup{[0-1](S0:2)}"), kShape);
  EXPECT_EQ(slice.classification(), "bottom[Slice]");
  EXPECT_EQ(ops_text(slice, 1), V{"LocalCopy [4:8, 0:4] bytes=0"});
  // DP x TP: reduce-scatter over the TP devices of each replica only.
  Resolution dp = checked(A("dup{[0-3](D:2,P:2)}"), A("dup{[0-3](D:2,S1:2)}"), kShape);
  EXPECT_EQ(dp.classification(), "bottom[RS]");
  EXPECT_EQ(ops_text(dp, 2), V{"ReduceScatter group=[2-3] dim=1 [0:8, 0:4] bytes=64"});
  // ... and all-reduce over the DP replicas (outer position).
  Resolution outer = checked(A("dup{[0-3](P:2,S1:2)}"), A("dup{[0-3](D:2,S1:2)}"), kShape);
  EXPECT_EQ(ops_text(outer, 1), V{"AllReduce group=[1,3] [0:8, 2:4] bytes=64"});
}

// Context parallelism's gradients: partial over the CP coordinate (outer), duplicated over TP.
TEST(BottomTier, PartialGradientsOfContextParallelStages) {
  // To a duplicated norm weight: the canonical (D:4) reads as (D:2,D:2), one all-reduce over CP.
  Resolution norm = checked(A("dup{[0-3](P:2,D:2)}"), A("dup{[0-3](D:4)}"), kShape);
  EXPECT_EQ(norm.classification(), "bottom[AR]");
  EXPECT_EQ(ops_text(norm, 1), V{"AllReduce group=[1,3] [0:8, 0:4] bytes=128"});
  // To a TP-split weight: no single collective; slice locally, then all-reduce each slice over CP.
  Resolution table = checked(A("dup{[0-3](P:2,D:2)}"), A("dup{[0-3](D:2,S0:2)}"), kShape);
  EXPECT_EQ(table.classification(), "bottom[Slice]+bottom[AR]");
  EXPECT_EQ(ops_text(table, 3), (V{"LocalCopy [4:8, 0:4] bytes=0", "AllReduce group=[1,3] [4:8, 0:4] bytes=64"}));
  // To a norm weight's ZeRO-1 state split over all four ranks: all-reduce over CP, then slice.
  // (Found by the strategy generator: ZeRO-1 with a CP 2 x TP 2 stage.)
  Resolution zero = checked(A("dup{[0-3](P:2,D:2)}"), A("dup{[0-3](S0:4)}"), kShape);
  EXPECT_EQ(zero.classification(), "bottom[AR]+bottom[Slice]");
  EXPECT_EQ(ops_text(zero, 2), (V{"AllReduce group=[0,2] [0:8, 0:4] bytes=128", "LocalCopy [4:6, 0:4] bytes=0"}));
}

// A partial value changes devices summand by summand when both sides hold as many summands: the
// tied head's gradient, partial over the CP ranks of the last stage (vocab-split over TP there),
// going to the first stage's CP ranks (whole table on each TP rank).
TEST(BottomTier, PartialMovesSummandBySummand) {
  // The same sharding on other devices was already a send/receive per device.
  EXPECT_EQ(checked(A("dup{[2-3](P:2)}"), A("dup{[0-1](P:2)}"), kShape).classification(), "bottom[SR]");
  Resolution tied = checked(A("dup{[4-7](P:2,S0:2)}"), A("dup{[0-3](P:2,D:2)}"), kShape);
  EXPECT_EQ(tied.classification(), "bottom[BSR]");
  // Summand 1 (CP rank 1 of the last stage: devices 6, 7, vocab halves) goes to devices 2 and 3,
  // each of which holds the whole table.
  EXPECT_EQ(ops_text(tied, 6), (V{"Send peer=2 [0:4, 0:4] bytes=64", "Send peer=3 [0:4, 0:4] bytes=64"}));
  // Across two pipelines too (the top tier partial as well), and beside a subgroup without CP.
  checked(A("partial{[4-7](P:2,S0:2);[8]()}"), A("partial{[0-3](P:2,D:2);[9]()}"), kShape);
}

// Other summand counts: reduced inside the source subgroup first, then moved (into summand 0, zeros
// in the others where the destination is partial). A tied head's gradient, partial over the CP 2
// ranks of the last stage (TP 2 there), going to a first stage of one rank; across two pipelines
// too (the top tier stays partial); to a first stage of CP 4.
TEST(BottomTier, PartialReducedThenMovedToOtherSummandCounts) {
  Resolution tied = checked(A("dup{[4-7](P:2,S0:2)}"), A("dup{[0]()}"), kShape);
  EXPECT_EQ(tied.classification(), "bottom[AR]+bottom[BSR]");
  EXPECT_EQ(ops_text(tied, 5), (V{"AllReduce group=[5,7] [4:8, 0:4] bytes=64", "Send peer=0 [4:8, 0:4] bytes=64"}));
  EXPECT_EQ(ops_text(tied, 7), V{"AllReduce group=[5,7] [4:8, 0:4] bytes=64"});
  EXPECT_EQ(checked(A("partial{[4-7](P:2,S0:2);[8]()}"), A("partial{[0]();[9]()}"), kShape).classification(),
            "bottom[AR,Identity]+bottom[BSR,SR]");
  Resolution more = checked(A("dup{[2-3](P:2)}"), A("dup{[4-7](P:4)}"), kShape);
  EXPECT_EQ(more.classification(), "bottom[AR]+bottom[BSR]");
  EXPECT_EQ(ops_text(more, 2), (V{"AllReduce group=[2-3] [0:8, 0:4] bytes=128", "Send peer=4 [0:8, 0:4] bytes=128"}));
  EXPECT_EQ(ops_text(more, 5), V{"ZeroFill [0:8, 0:4] bytes=0"});
  // One summand to two on the same devices: a local copy and zeros.
  Resolution split = checked(A("dup{[0-1](D:2)}"), A("dup{[0-1](P:2)}"), kShape);
  EXPECT_EQ(split.classification(), "bottom[BSR]");
  EXPECT_EQ(ops_text(split, 0), V{"LocalCopy [0:8, 0:4] bytes=0"});
  EXPECT_EQ(ops_text(split, 1), V{"ZeroFill [0:8, 0:4] bytes=0"});
}

TEST(BottomTier, BsrPerSubgroupWhenNoCollectiveApplies) {
  Resolution b = checked(A("dup{[0-1](S0:2)}"), A("dup{[0-1](S1:2)}"), kShape);
  EXPECT_EQ(b.classification(), "bottom[BSR]");
  EXPECT_EQ(ops_text(b, 0), (V{"LocalCopy [0:4, 0:2] bytes=0", "Send peer=1 [0:4, 2:4] bytes=32",
                               "Recv peer=1 [4:8, 0:2] bytes=0"}));
  // Figure 12's Reshard (id=2): RS in one subgroup, BSR in the other.
  Resolution mix = checked(A("dup{[0-1](P:2);[2-3](S0:2)}"), A("dup{[0-1](S0:2);[4-5](S1:2)}"), kShape);
  EXPECT_EQ(mix.classification(), "bottom[RS,BSR]");
  EXPECT_EQ(ops_text(mix, 2), (V{"Send peer=4 [0:4, 0:2] bytes=32", "Send peer=5 [0:4, 2:4] bytes=32"}));
  EXPECT_EQ(ops_text(mix, 5), (V{"Recv peer=2 [0:4, 2:4] bytes=0", "Recv peer=3 [4:8, 2:4] bytes=0"}));
}

TEST(TopTier, Figure9SplitCollectivesPerFinestSlice) {
  // ZeRO gather across heterogeneous TP groups: hdim 0 -> -1, TP 2 vs TP 4 along dim 1.
  Resolution ag = checked(A("split0{[0-1](S1:2);[2-5](S1:4)}"), A("dup{[0-1](S1:2);[2-5](S1:4)}"), kShape);
  EXPECT_EQ(ag.classification(), "top[SplitAG]");
  EXPECT_EQ(ops_text(ag, 0), (V{"AllGather group=[0,2] dim=0 [0:8, 0:1] bytes=16",
                                "AllGather group=[0,3] dim=0 [0:8, 1:2] bytes=16"}));
  EXPECT_EQ(ops_text(ag, 4), V{"AllGather group=[1,4] dim=0 [0:8, 2:3] bytes=16"});
  // Gradient sync: partial across pipelines -> ZeRO-sharded.
  Resolution rs = checked(A("partial{[0-1](S1:2);[2-5](S1:4)}"), A("split0{[0-1](S1:2);[2-5](S1:4)}"), kShape);
  EXPECT_EQ(rs.classification(), "top[SplitRS]");
  EXPECT_EQ(ops_text(rs, 5), V{"ReduceScatter group=[1,5] dim=0 [0:8, 3:4] bytes=16"});
  Resolution ar = checked(A("partial{[0-1](S1:2);[2-5](S1:4)}"), A("dup{[0-1](S1:2);[2-5](S1:4)}"), kShape);
  EXPECT_EQ(ar.classification(), "top[SplitAR]");
  EXPECT_EQ(ops_text(ar, 3), V{"AllReduce group=[0,3] [0:8, 1:2] bytes=32"});
  Resolution sl = checked(A("dup{[0-1](S1:2);[2-5](S1:4)}"), A("split0{[0-1](S1:2);[2-5](S1:4)}"), kShape);
  EXPECT_EQ(sl.classification(), "top[SplitSlice]");
  EXPECT_EQ(ops_text(sl, 2), V{"LocalCopy [4:8, 0:1] bytes=0"});
  // Duplicates inside a subgroup: one collective per replica index.
  Resolution dup = checked(A("split0{[0-1](D:2);[2-3](D:2)}"), A("dup{[0-1](D:2);[2-3](D:2)}"), kShape);
  EXPECT_EQ(ops_text(dup, 1), V{"AllGather group=[1,3] dim=0 [0:8, 0:4] bytes=64"});
}

TEST(TopTier, ZeroOneAcrossHeterogeneousPipelines) {
  // Appendix C.2: with ZeRO-1 and different TP degrees per pipeline, gradient sync is SplitRS and
  // parameter collection SplitAG. q_proj [8, 8] column-parallel, TP 4 and TP 2.
  const Annotation param = A("dup{[0-3](S0:4;zero);[4-5](S0:2;zero)}");
  const Annotation opt = param.optimizer_state(Shape{8, 8});
  EXPECT_EQ(opt.to_string(), "split1{[0-3](S0:4);[4-5](S0:2)}");
  const Annotation grad = A("partial{[0-3](S0:4);[4-5](S0:2)}");
  Resolution sync = checked(grad, opt, Shape{8, 8});
  EXPECT_EQ(sync.classification(), "top[SplitRS]");
  EXPECT_EQ(ops_text(sync, 5), (V{"ReduceScatter group=[2,5] dim=1 [4:6, 0:8] bytes=32",
                                  "ReduceScatter group=[3,5] dim=1 [6:8, 0:8] bytes=32"}));
  EXPECT_EQ(checked(opt, param, Shape{8, 8}).classification(), "top[SplitAG]");
}

TEST(TopTier, PartialAcrossPipelinesWithDifferentDuplication) {
  // A TP-2 pipeline's duplicated norm-weight gradient next to a TP-1 pipeline's: one all-reduce
  // over the three holders in which device 1 (a duplicate of device 0's summand) adds zeros.
  const Annotation grad = A("partial{[0-1](D:2);[2]()}");
  Resolution ar = checked(grad, A("dup{[0-1](D:2);[2]()}"), Shape{8});
  EXPECT_EQ(ar.classification(), "top[SplitAR]");
  EXPECT_EQ(ops_text(ar, 0), (V{"AllReduce group=[0-2] [0:8] bytes=42"}));
  EXPECT_EQ(ops_text(ar, 1), (V{"AllReduce group=[0-2] zero-input [0:8] bytes=42"}));
  // ZeRO-1 state split across the pipelines: the same all-reduce, each member keeping its part.
  Resolution rs = checked(grad, A("split0{[0-1](D:2);[2]()}"), Shape{8});
  EXPECT_EQ(rs.classification(), "top[SplitRS]");
  EXPECT_EQ(ops_text(rs, 2), (V{"AllReduce group=[0-2] [0:8] bytes=42"}));
}

TEST(TopTier, Figure10BottomThenTop) {
  Resolution r = checked(A("partial{[0-1](P:2);[2-3](D:2)}"), A("split0{[0-1](S1:2);[2-3](S1:2)}"), kShape);
  EXPECT_EQ(r.tier, Tier::kBottomThenTop);
  EXPECT_EQ(r.classification(), "bottom[RS,Slice]+top[SplitRS]");
  EXPECT_EQ(ops_text(r, 0), (V{"ReduceScatter group=[0-1] dim=1 [0:8, 0:4] bytes=64",
                               "ReduceScatter group=[0,2] dim=0 [0:8, 0:2] bytes=32"}));
  Resolution g = checked(A("split0{[0-1](D:2);[2-3](S1:2)}"), A("dup{[0-1](S1:2);[2-3](S1:2)}"), kShape);
  EXPECT_EQ(g.classification(), "bottom[Slice,Identity]+top[SplitAG]");
}

// A CP 2 x TP 2 stage next to a one-rank pipeline: the embedding gradient is partial over CP and
// duplicated over TP inside the first subgroup, and partial across the two. Bottom tier first (in
// the CP x TP subgroup a local slice, then an all-reduce over CP), then the top tier across the
// union, where the TP replicas of each slice hold it twice and the one-rank pipeline once.
TEST(TopTier, CpTimesTpSubgroupBesideAOneRankPipeline) {
  Resolution r = checked(A("partial{[0-3](P:2,D:2);[4]()}"), A("dup{[0-3](D:2,S0:2);[4]()}"), kShape);
  EXPECT_EQ(r.tier, Tier::kBottomThenTop);
  EXPECT_EQ(r.classification(), "bottom[Slice,Identity]+bottom[AR,Identity]+top[SplitAR]");
  // To a ZeRO-1 state split across the two pipelines: the same bottom tier, then SplitRS.
  Resolution z = checked(A("partial{[0-3](P:2,D:2);[4]()}"), A("split1{[0-3](D:2,S0:2);[4]()}"), kShape);
  EXPECT_EQ(z.tier, Tier::kBottomThenTop);
  // And the same with a CP 2 x TP 2 subgroup beside a TP 2 one (CP only on one side).
  checked(A("partial{[0-3](P:2,D:2);[4-5](D:2)}"), A("dup{[0-3](D:2,S0:2);[4-5](S0:2)}"), kShape);
}

TEST(Bsr, EverythingElseAndPartialNeverGoesToBsr) {
  // hsize changes: BSR of the whole tensor.
  Resolution b = checked(A("dup{[0-3](S0:4)}"), A("dup{[0-1](S0:2);[2-5](S0:4)}"), kShape);
  EXPECT_EQ(b.classification(), "BSR");
  EXPECT_EQ(ops_text(b, 0), (V{"LocalCopy [0:2, 0:4] bytes=0", "Send peer=2 [0:2, 0:4] bytes=32",
                               "Recv peer=1 [2:4, 0:4] bytes=0"}));
  // Top-tier change whose precondition fails (a DS splits the hdim) without Partial: BSR.
  EXPECT_EQ(checked(A("split0{[0-1](S0:2);[2-3](S0:2)}"), A("dup{[0-1](S0:2);[2-3](S0:2)}"), kShape).classification(),
            "BSR");
  auto error_of = [](const Annotation& s, const Annotation& d) {
    try {
      resolve(s, d, kShape, "grad.w");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // (Inside the tiers a partial source is reduced first: PartialReducedThenMovedToOtherSummandCounts.)
  std::string e = error_of(A("split0{[0-1](P:2);[2]()}"), A("dup{[4]();[5]()}"));
  EXPECT_NE(e.find("tensor grad.w"), std::string::npos) << e;
  EXPECT_NE(e.find("hdim and dg_union change"), std::string::npos) << e;
  EXPECT_NE(e.find("Partial never goes to BSR"), std::string::npos) << e;
  EXPECT_NE(error_of(A("partial{[0](P:1);[1]()}"), A("dup{[0-1](D:2)}")).find("hsize changes"), std::string::npos);
  EXPECT_NE(error_of(A("dup{[0-2](S0:3)}"), A("dup{[0]()}")).find("does not divide dim 0 of size 8"), std::string::npos);
}

TEST(Resolve, Figure4RightDeducedAndResolvedEndToEnd) {
  // Two heterogeneous pipelines: X [B=6, S=2, H=4] split by batch across subgroups (hdim 0), W
  // [F=4, H=4] replicated across subgroups, column-parallel TP 2 and TP 1 inside them.
  Annotation x = A("split0{[0-1](D:2);[2]()}");
  Annotation w = A("dup{[0-1](S0:2);[2]()}");
  Annotation y = sharding::deduce_matmul("dot", x, w, 3, true);
  EXPECT_EQ(y.to_string(), "split0{[0-1](S2:2);[2]()}");
  // The next stage runs on other devices with TP 1 and TP 2: a BSR moves every slice.
  Annotation next = A("split0{[3]();[4-5](S2:2)}");
  Resolution r = checked(y, next, Shape{6, 2, 4});
  EXPECT_EQ(r.classification(), "bottom[BSR,BSR]");
  EXPECT_EQ(ops_text(r, 3), (V{"Recv peer=0 [0:3, 0:2, 0:2] bytes=0", "Recv peer=1 [0:3, 0:2, 2:4] bytes=0"}));
  EXPECT_EQ(ops_text(r, 2), (V{"Send peer=4 [3:6, 0:2, 0:2] bytes=48", "Send peer=5 [3:6, 0:2, 2:4] bytes=48"}));
  // Row-parallel back to H: partial inside each subgroup, then the bottom tier all-reduces it.
  Annotation w2 = A("dup{[0-1](S1:2);[2]()}");
  Annotation z = sharding::deduce_matmul("dot2", y, w2, 3, true);
  EXPECT_EQ(z.to_string(), "split0{[0-1](P:2);[2]()}");
  EXPECT_EQ(checked(z, A("split0{[0-1](D:2);[2]()}"), Shape{6, 2, 4}).classification(), "bottom[AR,Identity]");
}

TEST(ResolveProperty, RandomReshardsWithoutPartialAlwaysWork) {
  std::mt19937 rng(1234);
  int by_tier[4] = {0, 0, 0, 0};
  for (int it = 0; it < 300; ++it) {
    const int rank = 1 + static_cast<int>(rng() % (it % 10 == 0 ? 3 : 2));  // rank 3 is slow to simulate
    const Shape shape(std::vector<int64_t>(rank, 24));
    Annotation src = testing::random_annotation(rng, 8, rank, false);
    // Half the time keep the dg_union so bottom and top tier rules get exercised.
    Annotation dst = testing::random_annotation(rng, 8, rank, false);
    if (rng() % 2 && dst.hsize() != src.hsize()) dst = src.with_hdim(static_cast<int>(rng() % (rank + 1)) - 1);
    Resolution r = resolve(src, dst, shape, "T");
    ++by_tier[static_cast<int>(r.tier)];
    ASSERT_EQ(testing::simulate(r, src, dst, shape), "")
        << src.to_string() << " -> " << dst.to_string() << " as " << r.classification();
  }
  EXPECT_GT(by_tier[static_cast<int>(Tier::kBottom)], 20);
  EXPECT_GT(by_tier[static_cast<int>(Tier::kTop)], 5);
  EXPECT_GT(by_tier[static_cast<int>(Tier::kBsr)], 20);
}

TEST(ResolveProperty, RandomReshardsWithPartialWorkOrRefuseBsr) {
  std::mt19937 rng(99);
  int resolved = 0;
  for (int it = 0; it < 400; ++it) {
    const int rank = 1 + static_cast<int>(rng() % 2);
    const Shape shape(std::vector<int64_t>(rank, 24));
    Annotation src = testing::random_annotation(rng, 6, rank, true);
    Annotation dst = rng() % 2 ? src.with_ds_union([&] {
      std::vector<DistState> ds;
      for (const auto& g : src.dg_union()) ds.push_back(testing::random_ds(rng, g.size(), rank, true));
      return ds;
    }())
                               : testing::random_annotation(rng, 6, rank, true);
    if (rng() % 3 == 0) dst = dst.with_hdim(static_cast<int>(rng() % (rank + 2)) - 2);
    Resolution r;
    try {
      r = resolve(src, dst, shape, "T");
    } catch (const Error& e) {
      ASSERT_TRUE(src.has_partial() || dst.has_partial()) << e.what();
      ASSERT_NE(std::string(e.what()).find("Partial never goes to BSR"), std::string::npos) << e.what();
      continue;
    }
    ++resolved;
    ASSERT_EQ(testing::simulate(r, src, dst, shape), "")
        << src.to_string() << " -> " << dst.to_string() << " as " << r.classification();
  }
  EXPECT_GT(resolved, 150);
}

TEST(ResolveProperty, CollectivesAreChosenWheneverTheyApply) {
  std::mt19937 rng(7);
  struct Change {
    int from, to;  // -2 partial, -1 dup, 0 a split dim not used elsewhere
    ReshardKind kind;
  };
  const Change changes[] = {{-2, -1, ReshardKind::kAR}, {-2, 0, ReshardKind::kRS}, {0, -1, ReshardKind::kAG},
                            {-1, 0, ReshardKind::kSlice}};
  for (int it = 0; it < 200; ++it) {
    const Change c = changes[it % 4];
    // A DistState on 4 devices: `from` (a split is S2) at a random position beside S0 or S1.
    std::vector<DistState::Entry> e = {{c.from == 0 ? 2 : c.from, 2}};
    e.insert(rng() % 2 ? e.begin() : e.end(), {static_cast<int>(rng() % 2), 2});
    DistState from = DistState::make(e);
    for (auto& entry : e) {
      if (entry.dim == (c.from == 0 ? 2 : c.from)) entry.dim = c.to == 0 ? 2 : c.to;
    }
    DistState to = DistState::make(e);
    const Shape shape{8, 8, 8};
    Annotation src = Annotation::make({sharding::DeviceGroup({3, 1, 0, 2})}, {from}, -1);
    Annotation dst = Annotation::make({sharding::DeviceGroup({3, 1, 0, 2})}, {to}, -1);
    Resolution r = checked(src, dst, shape);
    ASSERT_EQ(r.steps.at(0).kinds, std::vector<ReshardKind>{c.kind}) << src.to_string() << " -> " << dst.to_string();
  }
  // Top tier: every hdim change whose precondition holds picks its Split collective.
  for (int it = 0; it < 100; ++it) {
    std::vector<sharding::DeviceGroup> groups = {sharding::DeviceGroup({0, 1}), sharding::DeviceGroup({2, 3, 4, 5})};
    // Pairs with equal holder counts per finest slice, dim 0 free for the top tier.
    const char* pairs[][2] = {{"(S1:2)", "(S1:4)"}, {"(D:2)", "(S1:2,D:2)"}, {"(D:2)", "(D:2,S1:2)"},
                              {"(P:2)", "(P:2,S1:2)"}, {"(P:2)", "(S1:2,P:2)"}};
    const auto& pick = pairs[rng() % 5];
    std::vector<DistState> ds = {DistState::parse(pick[0]), DistState::parse(pick[1])};
    if (ds[1].device_num() != 4) ds[1] = DistState::parse("(S1:4)");
    const int hdims[][2] = {{-2, -1}, {-2, 0}, {0, -1}, {-1, 0}};
    const ReshardKind kinds[] = {ReshardKind::kSplitAR, ReshardKind::kSplitRS, ReshardKind::kSplitAG, ReshardKind::kSplitSlice};
    const int k = it % 4;
    Annotation src = Annotation::make(groups, ds, hdims[k][0]);
    Annotation dst = Annotation::make(groups, ds, hdims[k][1]);
    Resolution r = checked(src, dst, Shape{8, 8});
    ASSERT_EQ(r.tier, Tier::kTop) << src.to_string() << " -> " << dst.to_string();
    ASSERT_EQ(r.steps[0].kinds, std::vector<ReshardKind>{kinds[k]});
  }
}

TEST(ResolveCache, ReusesResolutions) {
  ResolveCache cache;
  const Resolution& a = cache.resolve(A("dup{[0-1](P:2)}"), A("dup{[0-1](D:2)}"), kShape, "a");
  const Resolution& b = cache.resolve(A("dup{[0-1](P:2)}"), A("dup{[0-1](D:2)}"), kShape, "b");
  EXPECT_EQ(&a, &b);
  cache.resolve(A("dup{[0-1](P:2)}"), A("dup{[0-1](D:2)}"), Shape{4, 4}, "c");
  EXPECT_EQ(cache.size(), 2u);
}

}  // namespace
}  // namespace hspmd::resolve
