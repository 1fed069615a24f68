#include <gtest/gtest.h>

#include <unordered_set>

#include "error_of.h"
#include "hspmd/core/error.h"
#include "hspmd/sharding/annotation.h"

namespace hspmd::sharding {
namespace {

using hspmd::testing::error_of;

TEST(DeviceGroup, TextFormRangesAndErrors) {
  EXPECT_EQ(DeviceGroup::range(4, 8).to_string(), "[4-7]");
  EXPECT_EQ(DeviceGroup({0, 1, 8, 3}).to_string(), "[0-1,8,3]");
  EXPECT_EQ(DeviceGroup::parse(" [0-1, 8,3] "), DeviceGroup({0, 1, 8, 3}));
  EXPECT_EQ(DeviceGroup::parse("[]").size(), 0);
  EXPECT_EQ(DeviceGroup({5, 6}).index_of(6), 1);
  EXPECT_EQ(DeviceGroup({5, 6}).index_of(7), -1);
  EXPECT_EQ(DeviceGroup({9, 2, 3, 4, 0}).index_of(4), 3);
  EXPECT_EQ(DeviceGroup({9, 2, 3, 4, 0}).index_of(0), 4);
  EXPECT_EQ(DeviceGroup({9, 2, 3, 4, 0}).index_of(1), -1);
  EXPECT_EQ(DeviceGroup().index_of(0), -1);
  EXPECT_EQ(DeviceGroup(std::vector<int>{}), DeviceGroup());
  EXPECT_NE(error_of([] { DeviceGroup({1, 2, 1}); }).find("device 1 appears twice"), std::string::npos);
  EXPECT_NE(error_of([] { DeviceGroup::parse("[3-1]"); }).find("at offset"), std::string::npos);
  EXPECT_NE(DeviceGroup({0, 1}).hash(), DeviceGroup({1, 0}).hash());
}

// The compact text of a group parses back to the same ranks, in order, on odd cases.
TEST(DeviceGroup, CompactTextRoundTrips) {
  std::vector<int> dp4096;
  for (int r = 5; r < 4096; r += 32) dp4096.push_back(r);
  const std::vector<std::vector<int>> cases{
      {7},                                  // one rank
      {0, 1},                               // two consecutive
      {0, 2},                               // two apart
      {0, 3, 6, 10, 14, 18},                // the step changes
      {0, 1, 2, 3, 8, 16, 24, 25, 40},      // a run, a strided run, a gap
      {9, 6, 3, 0},                         // descending: no run
      {100, 0, 32, 64, 1, 2},               // order kept
      dp4096,                               // a data-parallel group of 4,096 ranks
  };
  for (const std::vector<int>& ranks : cases) {
    const std::string text = DeviceGroup(ranks).to_string();
    EXPECT_EQ(DeviceGroup::parse(text).devices(), ranks) << text;
  }
  EXPECT_EQ(DeviceGroup(dp4096).to_string(), "[5-4069/32]");
  EXPECT_EQ(DeviceGroup({0, 3, 6, 10, 14, 18}).to_string(), "[0-6/3,10-18/4]");
  EXPECT_NE(error_of([] { DeviceGroup::parse("[0-10/3]"); }).find("divides b - a"), std::string::npos);
  EXPECT_NE(error_of([] { DeviceGroup::parse("[0-10/0]"); }).find("at offset"), std::string::npos);
}

TEST(DistState, FactoriesCoordinatesAndRegions) {
  DistState ds = DistState::make({{kDuplicate, 2}, {0, 4}});
  EXPECT_EQ(ds.to_string(), "(D:2,S0:4)");
  EXPECT_EQ(ds.device_num(), 8);
  // Last entry fastest: index 5 = D 1, S0 1.
  EXPECT_EQ(ds.coord(5, kDuplicate), 1);
  EXPECT_EQ(ds.coord(5, 0), 1);
  EXPECT_EQ(ds.coord(3, 0), 3);
  EXPECT_EQ(ds.coord(3, kPartial), 0);
  Region full = Region::full(Shape{8, 6});
  EXPECT_EQ(ds.region(6, full).to_string(), "[4:6, 0:6]");
  DistState two = DistState::make({{1, 2}, {0, 2}});
  EXPECT_EQ(two.region(1, full).to_string(), "[4:8, 0:3]");  // S1 coord 0, S0 coord 1
  EXPECT_EQ(two.region(2, full).to_string(), "[0:4, 3:6]");
  EXPECT_EQ(DistState::split(1, 1), DistState());  // degree-1 entries are dropped
  EXPECT_EQ(DistState().to_string(), "()");
  EXPECT_TRUE(DistState::partial(2).has_partial());
  EXPECT_NE(error_of([] { DistState::make({{0, 2}, {0, 2}}); }).find("names dim 0 twice"), std::string::npos);
  EXPECT_NE(error_of([] { DistState::make({{-3, 2}}); }).find("dim -3"), std::string::npos);
}

TEST(DistState, TextRoundTripAndHash) {
  for (const char* text : {"()", "(P:2)", "(D:2,S0:4)", "(S1:2,P:2,D:3)", "(D:4;zero)", "(;zero)"}) {
    DistState ds = DistState::parse(text);
    EXPECT_EQ(ds.to_string(), text);
    EXPECT_EQ(DistState::parse(ds.to_string()), ds);
  }
  EXPECT_NE(DistState::parse("(D:4;zero)"), DistState::dup(4));
  EXPECT_NE(DistState::parse("(D:2,S0:2)").hash(), DistState::parse("(S0:2,D:2)").hash());
  EXPECT_NE(error_of([] { DistState::parse("(X:2)"); }).find("expected P, D or S<dim>"), std::string::npos);
  EXPECT_NE(error_of([] { DistState::parse("(S0:2"); }).find("expected ')'"), std::string::npos);
}

TEST(Annotation, ValidationErrorsAreClear) {
  // Product of degrees != group size.
  EXPECT_NE(error_of([] { Annotation::spmd(DeviceGroup::range(0, 3), DistState::split(0, 4)); })
                .find("has 4 devices (product of degrees) but its device group [0-2] has 3"),
            std::string::npos);
  // A device in two groups.
  EXPECT_NE(error_of([] {
              Annotation::make({DeviceGroup({0, 1}), DeviceGroup({1, 2})}, {DistState::dup(2), DistState::dup(2)},
                               kDuplicate);
            }).find("device 1 is in two groups"),
            std::string::npos);
  // hsize mismatch between unions.
  EXPECT_NE(error_of([] {
              Annotation::make({DeviceGroup({0}), DeviceGroup({1})}, {DistState()}, kDuplicate);
            }).find("hsize mismatch"),
            std::string::npos);
  // A split degree that does not divide a static dim.
  Annotation a = Annotation::spmd(DeviceGroup::range(0, 4), DistState::split(1, 4));
  EXPECT_NE(error_of([&] { a.validate_for(Shape{8, 6}, "W"); }).find("tensor W: split degree 4 of (S1:4) does not divide dim 1 of size 6"),
            std::string::npos);
  Annotation h = Annotation::make({DeviceGroup({0}), DeviceGroup({1}), DeviceGroup({2})},
                                  {DistState(), DistState(), DistState()}, 0);
  EXPECT_NE(error_of([&] { h.validate_for(Shape{8}, "X"); }).find("hsize 3"), std::string::npos);
  EXPECT_NO_THROW(h.validate_for(Shape{9}, "X"));
}

TEST(Annotation, LayoutFollowsBothTiers) {
  // X [6, 4] split across 2 subgroups along dim 0, then split along dim 1 inside the second.
  Annotation x = Annotation::make({DeviceGroup({0}), DeviceGroup({1, 2})}, {DistState(), DistState::split(1, 2)}, 0);
  EXPECT_EQ(x.region(0, Shape{6, 4})->to_string(), "[0:3, 0:4]");
  EXPECT_EQ(x.region(2, Shape{6, 4})->to_string(), "[3:6, 2:4]");
  EXPECT_FALSE(x.region(3, Shape{6, 4}).has_value());
  EXPECT_EQ(x.locate(2), std::make_pair(1, 1));
  EXPECT_EQ(x.devices(), (std::vector<int>{0, 1, 2}));
  // Groups out of order and not consecutive: every device found in its group, no other.
  const Annotation y = Annotation::make({DeviceGroup({7, 8, 2}), DeviceGroup({0}), DeviceGroup({3, 4, 5})},
                                        {DistState::split(0, 3), DistState(), DistState::split(0, 3)}, 0);
  for (int g = 0; g < y.hsize(); ++g) {
    for (int i = 0; i < y.group(g).size(); ++i) EXPECT_EQ(y.locate(y.group(g)[i]), std::make_pair(g, i));
  }
  for (int absent : {1, 6, 9}) EXPECT_FALSE(y.locate(absent).has_value()) << absent;
  EXPECT_EQ(y.with_hdim(kDuplicate).locate(4), std::make_pair(2, 1));
  // hsize 1 normalizes hdim.
  EXPECT_EQ(Annotation::make({DeviceGroup({0, 1})}, {DistState::dup(2)}, 0).hdim(), kDuplicate);
}

TEST(Annotation, TextRoundTripEqualityAndHash) {
  Annotation w = Annotation::make({DeviceGroup::range(0, 4), DeviceGroup::range(4, 6)},
                                  {DistState::split(0, 4), DistState::split(0, 2)}, kDuplicate);
  EXPECT_EQ(w.to_string(), "dup{[0-3](S0:4);[4-5](S0:2)}");
  for (const char* text : {"dup{[0-3](S0:4);[4-5](S0:2)}", "partial{[0](P:1);[1-2](P:2)}", "split1{[0-1](D:2;zero);[2](;zero)}",
                           "dup{[7,3](S0:2,P:1)}"}) {
    Annotation a = Annotation::parse(text);
    EXPECT_EQ(Annotation::parse(a.to_string()), a) << text;
  }
  EXPECT_EQ(Annotation::parse("partial{[0](P:1);[1-2](P:2)}").to_string(), "partial{[0]();[1-2](P:2)}");
  std::unordered_set<Annotation, AnnotationHash> set{w, w.with_hdim(0), w};
  EXPECT_EQ(set.size(), 2u);
  EXPECT_NE(error_of([] { Annotation::parse("dup{[0-3](S0:4)"); }).find("expected '}'"), std::string::npos);
  EXPECT_NE(error_of([] { Annotation::parse("both{[0](S0:1)}"); }).find("'dup', 'partial' or 'split<d>'"),
            std::string::npos);
}

TEST(Annotation, OptimizerStateUnderZero) {
  const Shape shape{8, 4};
  // Across heterogeneous pipelines: split across subgroups on the first unsplit dim (1 here).
  Annotation w = Annotation::parse("dup{[0-1](S0:2;zero);[2-5](S0:4;zero)}");
  EXPECT_EQ(w.optimizer_state(shape).to_string(), "split1{[0-1](S0:2);[2-5](S0:4)}");
  // Inside one group: the duplicate dim becomes a split.
  Annotation h = Annotation::parse("dup{[0-3](D:2,S1:2;zero)}");
  EXPECT_EQ(h.optimizer_state(shape).to_string(), "dup{[0-3](S0:2,S1:2)}");
  // Without zero flags the state is sharded like the tensor.
  Annotation plain = Annotation::parse("dup{[0-3](D:2,S1:2)}");
  EXPECT_EQ(plain.optimizer_state(shape), plain);
  // No dim left that the pipelines leave whole: the state stays replicated like the tensor.
  Annotation full = Annotation::parse("dup{[0-1](S0:2;zero);[2-3](S1:2;zero)}");
  EXPECT_EQ(full.optimizer_state(shape).to_string(), "dup{[0-1](S0:2);[2-3](S1:2)}");
  // Three pipelines and an unsplit dim of 4: 3 does not divide it, so no ZeRO split either.
  Annotation three = Annotation::parse("dup{[0](;zero);[1](;zero);[2](;zero)}");
  EXPECT_EQ(three.optimizer_state(Shape{4}).to_string(), "dup{[0]();[1]();[2]()}");
  EXPECT_EQ(three.optimizer_state(Shape{6}).to_string(), "split0{[0]();[1]();[2]()}");
}

}  // namespace
}  // namespace hspmd::sharding
