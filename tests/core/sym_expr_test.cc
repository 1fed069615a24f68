#include "hspmd/core/sym_expr.h"

#include <gtest/gtest.h>

#include "hspmd/core/error.h"

namespace hspmd {
namespace {

const SymExpr T = SymExpr::symbol("T");
const SymExpr N = SymExpr::symbol("N");

TEST(SymExpr, ConstantsFold) {
  EXPECT_EQ((SymExpr(3) + 4) * 2, SymExpr(14));
  EXPECT_EQ(SymExpr::floordiv(-7, 2), SymExpr(-4));  // floor, not truncation
  EXPECT_EQ(SymExpr::mod(-7, 2), SymExpr(1));
  EXPECT_EQ(SymExpr::exact_div(12, 4), SymExpr(3));
  EXPECT_THROW(SymExpr::exact_div(13, 4), Error);  // a constant violation is caught when built
}

TEST(SymExpr, IdentitiesAndCanonicalForm) {
  EXPECT_EQ(T + 0, T);
  EXPECT_EQ(T * 1, T);
  EXPECT_EQ(T * 0, SymExpr(0));
  EXPECT_EQ(T - T, SymExpr(0));
  EXPECT_EQ(4 * T, T * 4);                      // constants move left of *
  EXPECT_EQ((T * 4) * 8, 32 * T);               // and combine
  EXPECT_EQ((T + 1) + 2, T + 3);
  EXPECT_EQ(SymExpr::exact_div(4 * T, 2), 2 * T);  // proven divisible: no constraint left
  EXPECT_TRUE(SymExpr::exact_div(4 * T, 2).divisibility_requirements().empty());
  EXPECT_EQ(SymExpr::mod(6 * T, 3), SymExpr(0));
  EXPECT_NE(T + N, N + T);  // structural equality: no reordering of symbols
}

TEST(SymExpr, PrintsWithMinimalParentheses) {
  EXPECT_EQ((T + 1).to_string(), "T + 1");
  EXPECT_EQ((2 * (T + 1)).to_string(), "2*(T + 1)");
  EXPECT_EQ(SymExpr::exact_div(T, 2).to_string(), "T/2");
  EXPECT_EQ(SymExpr::floordiv(T - N, 3).to_string(), "(T - N)//3");
  EXPECT_EQ(SymExpr::mod(T, N).to_string(), "T%N");
  EXPECT_EQ(to_string(SymShape{T, 4, 8}), "[T, 4, 8]");
}

TEST(SymExpr, EvaluatesUnderBinding) {
  SymBinding b{{"T", 10}, {"N", 3}};
  EXPECT_EQ((2 * T + N).evaluate(b), 23);
  EXPECT_EQ(SymExpr::floordiv(T, N).evaluate(b), 3);
  EXPECT_EQ(SymExpr::mod(T, N).evaluate(b), 1);
  EXPECT_EQ(evaluate(SymShape{T, N + 1, 5}, b), (Shape{10, 4, 5}));
  EXPECT_EQ(sym_numel({T, 4, 8}), 32 * T);
  try {
    (T + SymExpr::symbol("S")).evaluate(b);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("symbol S is not bound"), std::string::npos) << e.what();
  }
}

TEST(SymExpr, SymbolsAndSolving) {
  EXPECT_EQ((T * 2 + N).symbols(), (std::set<std::string>{"N", "T"}));
  SymBinding b;
  EXPECT_TRUE((N + 1).solve_into(5, b));
  EXPECT_EQ(b.at("N"), 4);
  EXPECT_TRUE((3 * T).solve_into(12, b));
  EXPECT_EQ(b.at("T"), 4);
  EXPECT_FALSE((T + N).solve_into(9, b));  // not a single-symbol linear form
  SymBinding c;
  EXPECT_THROW((3 * T).solve_into(10, c), Error);
}

TEST(SymExpr, DivisibilityViolationNamesSymbolExpressionAndPlace) {
  SymExpr half = SymExpr::exact_div(T, 2) + 1;
  ASSERT_EQ(half.divisibility_requirements().size(), 1u);
  EXPECT_NO_THROW(check_divisibility(half, {{"T", 8}}, "op 'split' (reshape)"));
  try {
    check_divisibility(half, {{"T", 7}}, "op 'split' (reshape)");
    FAIL() << "no throw";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("op 'split' (reshape)"), std::string::npos) << what;
    EXPECT_NE(what.find("T/2 + 1"), std::string::npos) << what;
    EXPECT_NE(what.find("T = 7"), std::string::npos) << what;
    EXPECT_NE(what.find("divisible by 2"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace hspmd
