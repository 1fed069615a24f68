// Symbolic dimensions (paper A.2): a dimension is an integer expression over named symbols, so one
// defined graph serves every batch shape and every shard size; concrete sizes come from a binding
// given at run time.
//
//   SymExpr T = SymExpr::symbol("T");              // packed tokens of this step
//   SymShape q{T, 4, 8};                            // q [T, Nq, D]
//   SymExpr half = SymExpr::exact_div(T, 2);        // T/2, only legal when T % 2 == 0
//   half.to_string() == "T/2";
//   SymBinding b{{"T", 12}};
//   half.evaluate(b) == 6;
//   check_divisibility(half, b, "op 'split'");      // T = 7 would throw, naming T, "T/2" and the op
//
// Operations: +, -, *, floor division (floordiv), mod, and exact_div: a floor division that is only
// valid when the dividend is divisible. exact_div records that need inside the expression; every
// place that binds symbols (Graph::bind) walks the expressions and checks it, so a violated
// constraint is reported with the symbol values, the expression and the op that introduced it.
// Constants fold eagerly ((4*T)/2 becomes 2*T with no constraint left), so fixed dims stay plain
// integers and structural equality (==) compares simplified forms.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "hspmd/core/shape.h"

namespace hspmd {

// Values of symbols for one run, e.g. {{"T", 512}, {"N", 3}}.
using SymBinding = std::map<std::string, int64_t>;

class SymExpr {
 public:
  enum class Kind { kConst, kSymbol, kAdd, kSub, kMul, kFloorDiv, kExactDiv, kMod };

  SymExpr() : SymExpr(int64_t{0}) {}
  SymExpr(int64_t value);  // NOLINT: implicit, so constants mix freely with symbols
  SymExpr(int value) : SymExpr(static_cast<int64_t>(value)) {}  // NOLINT
  static SymExpr symbol(const std::string& name);

  static SymExpr floordiv(const SymExpr& a, const SymExpr& b);
  // a / b where a must be divisible by b; constants are checked now, symbolic ones at bind time.
  static SymExpr exact_div(const SymExpr& a, const SymExpr& b);
  static SymExpr mod(const SymExpr& a, const SymExpr& b);
  friend SymExpr operator+(const SymExpr& a, const SymExpr& b);
  friend SymExpr operator-(const SymExpr& a, const SymExpr& b);
  friend SymExpr operator*(const SymExpr& a, const SymExpr& b);

  Kind kind() const { return node_->kind; }
  bool is_constant() const { return kind() == Kind::kConst; }
  bool is_symbol() const { return kind() == Kind::kSymbol; }
  int64_t constant_value() const;     // throws Error unless is_constant()
  const std::string& symbol_name() const;  // throws Error unless is_symbol()

  // Throws Error naming the symbol when one is unbound; division by zero is an Error too.
  int64_t evaluate(const SymBinding& binding) const;
  // Names of every symbol in the expression.
  std::set<std::string> symbols() const;
  // Every exact_div sub-expression (dividend, divisor) pair that still needs checking.
  std::vector<std::pair<SymExpr, SymExpr>> divisibility_requirements() const;
  // When this expression is `c1 * s + c0` in a single unbound symbol s, binds s so that the
  // expression equals value and returns true; throws Error when no integer solution exists.
  // Returns false for any other form (the caller then evaluates and compares).
  bool solve_into(int64_t value, SymBinding& binding) const;

  std::string to_string() const;
  friend bool operator==(const SymExpr& a, const SymExpr& b);
  friend bool operator!=(const SymExpr& a, const SymExpr& b) { return !(a == b); }

 private:
  struct Node {
    Kind kind;
    int64_t value = 0;   // kConst
    std::string name;    // kSymbol
    std::shared_ptr<const Node> lhs, rhs;
  };
  explicit SymExpr(std::shared_ptr<const Node> node) : node_(std::move(node)) {}
  static SymExpr make(Kind kind, const SymExpr& a, const SymExpr& b);
  SymExpr lhs() const { return SymExpr(node_->lhs); }
  SymExpr rhs() const { return SymExpr(node_->rhs); }

  std::shared_ptr<const Node> node_;
};

// Throws Error when an exact_div inside expr is violated under binding; the message names the
// symbols and their values, the sub-expression and `where` (e.g. "op 'x.view' (reshape)").
void check_divisibility(const SymExpr& expr, const SymBinding& binding, const std::string& where);

// A shape whose dims are expressions: q [T, Nq, D] is {SymExpr::symbol("T"), 4, 8}.
using SymShape = std::vector<SymExpr>;

SymShape to_sym_shape(const Shape& shape);
Shape evaluate(const SymShape& shape, const SymBinding& binding);
SymExpr sym_numel(const SymShape& shape);
std::string to_string(const SymShape& shape);  // "[T, 4, 8]"
// True when every dim is a constant (parameters have static shapes).
bool is_static(const SymShape& shape);

}  // namespace hspmd
