// Milp: a small mixed-integer linear program handed to COIN-OR CBC (branch and cut over the CLP
// simplex), the solver the paper's PuLP calls. The planner's second level builds one per candidate
// pipeline configuration.
//
//   Milp m;
//   int x = m.add_var(1, 10, /*cost=*/0, /*integer=*/true);
//   int z = m.add_var(0, kInfinity, /*cost=*/1, false);
//   m.add_row({{z, 1}, {x, -2.5}}, 0, kInfinity);   // z >= 2.5 x
//   std::optional<std::vector<double>> v = m.minimize();  // nullopt: infeasible
#pragma once

#include <optional>
#include <utility>
#include <vector>

namespace hspmd::planner {

inline constexpr double kInfinity = 1e30;

class Milp {
 public:
  // Returns the variable's index.
  int add_var(double lower, double upper, double cost, bool integer);
  // lower <= sum coefficient * var <= upper.
  void add_row(const std::vector<std::pair<int, double>>& terms, double lower, double upper);
  // The optimal values, or nullopt when the program is infeasible. Error when CBC stops without
  // proving either (it has no time limit here: the programs are small).
  std::optional<std::vector<double>> minimize() const;
  int num_vars() const { return static_cast<int>(cost_.size()); }

 private:
  std::vector<double> lower_, upper_, cost_;
  std::vector<bool> integer_;
  struct Row {
    std::vector<std::pair<int, double>> terms;
    double lower, upper;
  };
  std::vector<Row> rows_;
};

}  // namespace hspmd::planner
