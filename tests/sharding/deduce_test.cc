#include <gtest/gtest.h>

#include "error_of.h"
#include "hspmd/core/error.h"
#include "hspmd/sharding/deduce.h"

namespace hspmd::sharding {
namespace {

using hspmd::testing::error_of;

DistState ds(const char* text) { return DistState::parse(text); }

TEST(DeduceMatmul, Figure13BottomTierTable) {
  // x [B, S, H] x W [H, F] (no transpose): batch split passes through.
  EXPECT_EQ(deduce_matmul_ds("dot", ds("(S0:2)"), ds("(D:2)"), 3, false), ds("(S0:2)"));
  // W split along its output dim N -> y split along its last dim.
  EXPECT_EQ(deduce_matmul_ds("dot", ds("(D:4)"), ds("(S1:4)"), 3, false), ds("(S2:4)"));
  // Split of the contracted dim on both sides -> partial.
  EXPECT_EQ(deduce_matmul_ds("dot", ds("(S2:4)"), ds("(S0:4)"), 3, false), ds("(P:4)"));
  // Hugging Face Linear (transpose_w): W [F, H]; column parallel then row parallel.
  EXPECT_EQ(deduce_matmul_ds("up", ds("(D:4)"), ds("(S0:4)"), 3, true), ds("(S2:4)"));
  EXPECT_EQ(deduce_matmul_ds("down", ds("(S2:4)"), ds("(S1:4)"), 3, true), ds("(P:4)"));
  // DP x TP, position by position.
  EXPECT_EQ(deduce_matmul_ds("dot", ds("(S0:2,D:2)"), ds("(D:2,S0:2)"), 3, true), ds("(S0:2,S2:2)"));
  // Partial times duplicate stays partial (linear).
  EXPECT_EQ(deduce_matmul_ds("dot", ds("(P:2)"), ds("(D:2)"), 2, false), ds("(P:2)"));
}

TEST(DeduceMatmul, MismatchesNameTheOpAndAskForAReshard) {
  std::string e = error_of([] { deduce_matmul_ds("attn.q_proj", ds("(S2:4)"), ds("(D:4)"), 3, true); });
  EXPECT_NE(e.find("op attn.q_proj"), std::string::npos) << e;
  EXPECT_NE(e.find("(S2:4)"), std::string::npos) << e;
  EXPECT_NE(e.find("insert a Reshard"), std::string::npos) << e;
  e = error_of([] { deduce_matmul_ds("mm", ds("(D:2,S0:2)"), ds("(S0:4)"), 2, false); });
  EXPECT_NE(e.find("order their devices differently"), std::string::npos) << e;
}

TEST(DeduceMatmul, TopTierFollowsTheOneDimensionalRule) {
  // Figure 13 right: x hdim 0 (split batch across pipelines), W hdim -1 -> y hdim 0.
  Annotation x = Annotation::parse("split0{[0-3](D:4);[4-5](D:2)}");
  Annotation w = Annotation::parse("dup{[0-3](S0:4);[4-5](S0:2)}");
  Annotation y = deduce_matmul("mlp.up", x, w, 3, true);
  EXPECT_EQ(y.to_string(), "split0{[0-3](S2:4);[4-5](S2:2)}");
  // Different dg_union: error names the op, both annotations, and asks for a Reshard.
  Annotation other = Annotation::parse("dup{[0-3](S0:4);[6-7](S0:2)}");
  std::string e = error_of([&] { deduce_matmul("mlp.up", x, other, 3, true); });
  EXPECT_NE(e.find("op mlp.up"), std::string::npos);
  EXPECT_NE(e.find(x.to_string()), std::string::npos);
  EXPECT_NE(e.find(other.to_string()), std::string::npos);
  EXPECT_NE(e.find("insert a Reshard"), std::string::npos);
  Annotation hs = Annotation::parse("dup{[0-5](D:6)}");
  EXPECT_NE(error_of([&] { deduce_matmul("mm", x, hs, 3, true); }).find("hsize (2 vs 1)"), std::string::npos);
}

TEST(DeduceElementwise, PassThroughAndPartialRules) {
  Annotation a = Annotation::parse("split0{[0-1](S1:2;zero);[2]()}");
  Annotation b = Annotation::parse("split0{[0-1](S1:2);[2]()}");
  EXPECT_EQ(deduce_elementwise("add", {a, b}, Linearity::kNonLinear).to_string(), "split0{[0-1](S1:2);[2]()}");
  Annotation p = Annotation::parse("dup{[0-1](P:2);[2]()}");
  EXPECT_EQ(deduce_elementwise("add", {p, p}, Linearity::kLinear), p);
  EXPECT_NE(error_of([&] { deduce_elementwise("silu", {p}, Linearity::kNonLinear); }).find("op silu is not linear"),
            std::string::npos);
  Annotation c = Annotation::parse("split0{[0-1](S0:2);[2]()}");
  std::string e = error_of([&] { deduce_elementwise("mul", {a, c}, Linearity::kNonLinear); });
  EXPECT_NE(e.find("identical shardings"), std::string::npos) << e;
  EXPECT_NE(e.find("insert a Reshard before input 1"), std::string::npos) << e;
}

TEST(DeduceReduce, SplitOfAReducedDimBecomesPartial) {
  EXPECT_EQ(deduce_reduce_ds("sum", ds("(S0:2,S2:2)"), {2}, 3, false), ds("(S0:2,P:2)"));
  EXPECT_EQ(deduce_reduce_ds("sum", ds("(S2:2)"), {0}, 3, false), ds("(S1:2)"));
  EXPECT_EQ(deduce_reduce_ds("sum", ds("(S2:2)"), {0}, 3, true), ds("(S2:2)"));
  EXPECT_NE(error_of([] { deduce_reduce_ds("sum", ds("(P:2,S1:2)"), {1}, 2, false); }).find("two partial dims"),
            std::string::npos);
  Annotation x = Annotation::parse("split1{[0](S0:1);[1-2](S0:2)}");
  EXPECT_EQ(deduce_reduce("sum", x, {-1}, 2, false).to_string(), "partial{[0]();[1-2](S0:2)}");
}

}  // namespace
}  // namespace hspmd::sharding
