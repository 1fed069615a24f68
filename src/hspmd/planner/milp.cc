#include "hspmd/planner/milp.h"

#include <CbcModel.hpp>
#include <CoinPackedMatrix.hpp>
#include <CoinPackedVector.hpp>
#include <OsiClpSolverInterface.hpp>

#include "hspmd/core/error.h"

namespace hspmd::planner {

int Milp::add_var(double lower, double upper, double cost, bool integer) {
  lower_.push_back(lower);
  upper_.push_back(upper);
  cost_.push_back(cost);
  integer_.push_back(integer);
  return static_cast<int>(cost_.size()) - 1;
}

void Milp::add_row(const std::vector<std::pair<int, double>>& terms, double lower, double upper) {
  for (const auto& [var, coefficient] : terms) {
    HSPMD_ASSERT(var >= 0 && var < num_vars()) << "row names variable " << var << " of " << num_vars();
    (void)coefficient;
  }
  rows_.push_back({terms, lower, upper});
}

std::optional<std::vector<double>> Milp::minimize() const {
  const int n = num_vars();
  CoinPackedMatrix matrix(false, 0, 0);
  matrix.setDimensions(0, n);
  std::vector<double> row_lower, row_upper;
  for (const Row& r : rows_) {
    CoinPackedVector v;
    for (const auto& [var, coefficient] : r.terms) v.insert(var, coefficient);
    matrix.appendRow(v);
    row_lower.push_back(r.lower);
    row_upper.push_back(r.upper);
  }
  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  solver.loadProblem(matrix, lower_.data(), upper_.data(), cost_.data(), row_lower.data(), row_upper.data());
  for (int i = 0; i < n; ++i) {
    if (integer_[i]) solver.setInteger(i);
  }
  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  model.branchAndBound();
  if (model.isProvenInfeasible()) return std::nullopt;
  HSPMD_CHECK(model.isProvenOptimal() && model.bestSolution() != nullptr)
      << "CBC stopped without an optimal solution or a proof of infeasibility (status " << model.status()
      << ", secondary " << model.secondaryStatus() << ")";
  const double* x = model.bestSolution();
  std::vector<double> values(x, x + n);
  for (int i = 0; i < n; ++i) {
    if (integer_[i]) values[i] = static_cast<double>(static_cast<long long>(values[i] + (values[i] >= 0 ? 0.5 : -0.5)));
  }
  return values;
}

}  // namespace hspmd::planner
