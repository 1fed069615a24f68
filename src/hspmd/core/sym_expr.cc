#include "hspmd/core/sym_expr.h"

#include <sstream>

#include "hspmd/core/error.h"

namespace hspmd {

namespace {

int64_t floor_div(int64_t a, int64_t b) {
  HSPMD_CHECK(b != 0) << "symbolic shape: division by zero";
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

int precedence(SymExpr::Kind kind) {
  switch (kind) {
    case SymExpr::Kind::kAdd:
    case SymExpr::Kind::kSub:
      return 1;
    case SymExpr::Kind::kMul:
    case SymExpr::Kind::kFloorDiv:
    case SymExpr::Kind::kExactDiv:
    case SymExpr::Kind::kMod:
      return 2;
    case SymExpr::Kind::kConst:
    case SymExpr::Kind::kSymbol:
      return 3;
  }
  return 3;
}

const char* operator_text(SymExpr::Kind kind) {
  switch (kind) {
    case SymExpr::Kind::kAdd: return " + ";
    case SymExpr::Kind::kSub: return " - ";
    case SymExpr::Kind::kMul: return "*";
    case SymExpr::Kind::kFloorDiv: return "//";
    case SymExpr::Kind::kExactDiv: return "/";
    case SymExpr::Kind::kMod: return "%";
    case SymExpr::Kind::kConst:
    case SymExpr::Kind::kSymbol:
      break;
  }
  return "?";
}

}  // namespace

SymExpr::SymExpr(int64_t value) {
  auto node = std::make_shared<Node>();
  node->kind = Kind::kConst;
  node->value = value;
  node_ = std::move(node);
}

SymExpr SymExpr::symbol(const std::string& name) {
  HSPMD_CHECK(!name.empty()) << "a symbol needs a name";
  auto node = std::make_shared<Node>();
  node->kind = Kind::kSymbol;
  node->name = name;
  return SymExpr(std::shared_ptr<const Node>(std::move(node)));
}

SymExpr SymExpr::make(Kind kind, const SymExpr& a, const SymExpr& b) {
  auto node = std::make_shared<Node>();
  node->kind = kind;
  node->lhs = a.node_;
  node->rhs = b.node_;
  return SymExpr(std::shared_ptr<const Node>(std::move(node)));
}

int64_t SymExpr::constant_value() const {
  HSPMD_CHECK(is_constant()) << "symbolic dim " << to_string() << " is not a constant";
  return node_->value;
}

const std::string& SymExpr::symbol_name() const {
  HSPMD_CHECK(is_symbol()) << "symbolic dim " << to_string() << " is not a plain symbol";
  return node_->name;
}

// Simplification keeps a canonical form: constants on the right of +, on the left of *.
SymExpr operator+(const SymExpr& a, const SymExpr& b) {
  if (a.is_constant() && b.is_constant()) return SymExpr(a.constant_value() + b.constant_value());
  if (a.is_constant()) return b + a;
  if (b.is_constant() && b.constant_value() == 0) return a;
  if (b.is_constant() && a.kind() == SymExpr::Kind::kAdd && a.rhs().is_constant()) {
    return a.lhs() + SymExpr(a.rhs().constant_value() + b.constant_value());
  }
  return SymExpr::make(SymExpr::Kind::kAdd, a, b);
}

SymExpr operator-(const SymExpr& a, const SymExpr& b) {
  if (a.is_constant() && b.is_constant()) return SymExpr(a.constant_value() - b.constant_value());
  if (a == b) return SymExpr(0);
  if (b.is_constant()) return a + SymExpr(-b.constant_value());
  return SymExpr::make(SymExpr::Kind::kSub, a, b);
}

SymExpr operator*(const SymExpr& a, const SymExpr& b) {
  if (a.is_constant() && b.is_constant()) return SymExpr(a.constant_value() * b.constant_value());
  if (b.is_constant()) return b * a;
  if (a.is_constant()) {
    int64_t c = a.constant_value();
    if (c == 0) return SymExpr(0);
    if (c == 1) return b;
    if (b.kind() == SymExpr::Kind::kMul && b.lhs().is_constant()) {
      return SymExpr(c * b.lhs().constant_value()) * b.rhs();
    }
  }
  return SymExpr::make(SymExpr::Kind::kMul, a, b);
}

SymExpr SymExpr::floordiv(const SymExpr& a, const SymExpr& b) {
  if (a.is_constant() && b.is_constant()) return SymExpr(floor_div(a.constant_value(), b.constant_value()));
  if (b.is_constant()) {
    int64_t d = b.constant_value();
    HSPMD_CHECK(d != 0) << "symbolic shape: " << a.to_string() << " divided by zero";
    if (d == 1) return a;
    // (c*x) // d == (c/d)*x whenever d divides c.
    if (a.kind() == Kind::kMul && a.lhs().is_constant() && a.lhs().constant_value() % d == 0) {
      return SymExpr(a.lhs().constant_value() / d) * a.rhs();
    }
  }
  if (a == b) return SymExpr(1);
  return make(Kind::kFloorDiv, a, b);
}

SymExpr SymExpr::exact_div(const SymExpr& a, const SymExpr& b) {
  if (a.is_constant() && b.is_constant()) {
    int64_t x = a.constant_value(), d = b.constant_value();
    HSPMD_CHECK(d != 0 && x % d == 0) << "symbolic shape: " << x << " is not divisible by " << d;
    return SymExpr(x / d);
  }
  SymExpr folded = floordiv(a, b);
  // Folding only happens when divisibility is proven, so a folded result needs no constraint.
  if (folded.kind() != Kind::kFloorDiv) return folded;
  return make(Kind::kExactDiv, a, b);
}

SymExpr SymExpr::mod(const SymExpr& a, const SymExpr& b) {
  if (a.is_constant() && b.is_constant()) return SymExpr(floor_mod(a.constant_value(), b.constant_value()));
  if (b.is_constant()) {
    int64_t d = b.constant_value();
    HSPMD_CHECK(d != 0) << "symbolic shape: " << a.to_string() << " modulo zero";
    if (d == 1 || d == -1) return SymExpr(0);
    if (a.kind() == Kind::kMul && a.lhs().is_constant() && a.lhs().constant_value() % d == 0) return SymExpr(0);
  }
  if (a == b) return SymExpr(0);
  return make(Kind::kMod, a, b);
}

int64_t SymExpr::evaluate(const SymBinding& binding) const {
  switch (kind()) {
    case Kind::kConst:
      return node_->value;
    case Kind::kSymbol: {
      auto it = binding.find(node_->name);
      HSPMD_CHECK(it != binding.end()) << "symbol " << node_->name << " is not bound (needed by " << to_string()
                                       << ")";
      return it->second;
    }
    case Kind::kAdd: return lhs().evaluate(binding) + rhs().evaluate(binding);
    case Kind::kSub: return lhs().evaluate(binding) - rhs().evaluate(binding);
    case Kind::kMul: return lhs().evaluate(binding) * rhs().evaluate(binding);
    case Kind::kFloorDiv: return floor_div(lhs().evaluate(binding), rhs().evaluate(binding));
    case Kind::kExactDiv: {
      int64_t x = lhs().evaluate(binding), d = rhs().evaluate(binding);
      HSPMD_CHECK(d != 0 && x % d == 0) << "symbolic shape " << to_string() << ": " << x << " is not divisible by "
                                        << d;
      return x / d;
    }
    case Kind::kMod: return floor_mod(lhs().evaluate(binding), rhs().evaluate(binding));
  }
  HSPMD_ASSERT(false) << "unknown SymExpr kind";
  return 0;
}

std::set<std::string> SymExpr::symbols() const {
  std::set<std::string> out;
  if (is_symbol()) {
    out.insert(node_->name);
  } else if (!is_constant()) {
    out = lhs().symbols();
    for (const std::string& s : rhs().symbols()) out.insert(s);
  }
  return out;
}

std::vector<std::pair<SymExpr, SymExpr>> SymExpr::divisibility_requirements() const {
  std::vector<std::pair<SymExpr, SymExpr>> out;
  if (is_constant() || is_symbol()) return out;
  out = lhs().divisibility_requirements();
  for (auto& r : rhs().divisibility_requirements()) out.push_back(std::move(r));
  if (kind() == Kind::kExactDiv) out.emplace_back(lhs(), rhs());
  return out;
}

bool SymExpr::solve_into(int64_t value, SymBinding& binding) const {
  // Match c1 * s + c0 with s unbound.
  SymExpr e = *this;
  int64_t c0 = 0, c1 = 1;
  if (e.kind() == Kind::kAdd && e.rhs().is_constant()) {
    c0 = e.rhs().constant_value();
    e = e.lhs();
  }
  if (e.kind() == Kind::kMul && e.lhs().is_constant()) {
    c1 = e.lhs().constant_value();
    e = e.rhs();
  }
  if (!e.is_symbol() || binding.count(e.symbol_name())) return false;
  HSPMD_CHECK((value - c0) % c1 == 0) << "size " << value << " cannot match symbolic dim " << to_string()
                                      << ": no integer value of " << e.symbol_name();
  binding[e.symbol_name()] = (value - c0) / c1;
  return true;
}

std::string SymExpr::to_string() const {
  switch (kind()) {
    case Kind::kConst: return std::to_string(node_->value);
    case Kind::kSymbol: return node_->name;
    case Kind::kAdd:
    case Kind::kSub:
    case Kind::kMul:
    case Kind::kFloorDiv:
    case Kind::kExactDiv:
    case Kind::kMod:
      break;
  }
  int p = precedence(kind());
  bool associative = kind() == Kind::kAdd || kind() == Kind::kMul;
  std::string l = lhs().to_string(), r = rhs().to_string();
  if (precedence(lhs().kind()) < p) l = "(" + l + ")";
  if (precedence(rhs().kind()) < p || (!associative && precedence(rhs().kind()) == p)) r = "(" + r + ")";
  return l + operator_text(kind()) + r;
}

bool operator==(const SymExpr& a, const SymExpr& b) {
  if (a.node_ == b.node_) return true;
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case SymExpr::Kind::kConst: return a.node_->value == b.node_->value;
    case SymExpr::Kind::kSymbol: return a.node_->name == b.node_->name;
    case SymExpr::Kind::kAdd:
    case SymExpr::Kind::kSub:
    case SymExpr::Kind::kMul:
    case SymExpr::Kind::kFloorDiv:
    case SymExpr::Kind::kExactDiv:
    case SymExpr::Kind::kMod:
      break;
  }
  return a.lhs() == b.lhs() && a.rhs() == b.rhs();
}

void check_divisibility(const SymExpr& expr, const SymBinding& binding, const std::string& where) {
  for (const auto& [dividend, divisor] : expr.divisibility_requirements()) {
    int64_t x = dividend.evaluate(binding), d = divisor.evaluate(binding);
    if (d != 0 && x % d == 0) continue;
    std::ostringstream symbols;
    for (const std::string& s : expr.symbols()) {
      auto it = binding.find(s);
      symbols << (symbols.tellp() > 0 ? ", " : "") << s << " = " << (it == binding.end() ? 0 : it->second);
    }
    HSPMD_THROW() << where << ": symbolic dim " << expr.to_string() << " needs " << dividend.to_string()
                  << " divisible by " << divisor.to_string() << ", but with " << symbols.str() << " it is " << x
                  << " (not a multiple of " << d << ")";
  }
}

SymShape to_sym_shape(const Shape& shape) {
  SymShape out;
  for (int64_t d : shape.dims()) out.emplace_back(d);
  return out;
}

Shape evaluate(const SymShape& shape, const SymBinding& binding) {
  std::vector<int64_t> dims;
  dims.reserve(shape.size());
  for (const SymExpr& e : shape) dims.push_back(e.evaluate(binding));
  return Shape(std::move(dims));
}

SymExpr sym_numel(const SymShape& shape) {
  SymExpr n(1);
  for (const SymExpr& e : shape) n = n * e;
  return n;
}

std::string to_string(const SymShape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + shape[i].to_string();
  return out + "]";
}

bool is_static(const SymShape& shape) {
  for (const SymExpr& e : shape) {
    if (!e.is_constant()) return false;
  }
  return true;
}

}  // namespace hspmd
