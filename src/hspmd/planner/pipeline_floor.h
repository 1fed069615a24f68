// A lower bound on a pipeline's time for n micro-batches, used by both levels of the planner to
// drop configurations without solving them (planner/pipeline_search.h, planner/layer_programs.h).
//
// A pipeline's stages are priced as lines in their layer counts: stage j of x_j layers takes
// f_j = t_j x_j + h_j a micro-batch, and the pipeline sum_j f_j + (n - 1) max_j f_j for n of them
// (planner/cost_model.h). The least of that over integer splits (x_j >= 1, x_j <= cap_j, sum x_j =
// L) couples the sum and the bottleneck: the split that balances the stages is not the one that
// puts the most layers on the fastest. Taken apart (least sum + (n - 1) least bottleneck, what the
// bounds were before) the bound misses the bubble's imbalance, several percent of a two-kind
// pipeline's time, which kept tens of thousands of 1,024-GPU configurations above the best plan
// in the search. Taken together it is exact for the lines:
//   for a bottleneck Z, every stage holds at most c_j(Z) = min(cap_j, floor((Z - h_j) / t_j))
//   layers, and the least sum with f_j <= Z is one layer a stage and the rest on the fastest stages
//   up to c_j(Z) (a linear objective over a box and one equality: greedy by t_j is optimal);
//   any split whose bottleneck is Z costs at least sum(Z) + (n - 1) Z, and Z is some t_j x + h_j;
//   so min over those breakpoints of sum(Z) + (n - 1) Z is the least over splits, for every n.
// The step adds the slowest stage's tail: with the tails' lines given, each Z's sum adds the least
// bottleneck of the tails over the splits within Z (coupled the same way: the balanced split that
// the bubble wants puts many layers, and so much gradient, on the fast stages).
// Only the points where sum(Z) falls are kept (Z ascending, sum descending): the time at n is the
// least of a few lines in n.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace hspmd::planner {

// Stages of one kind of line: `stages` of them, each t x + h for x layers a micro-batch, at most
// `cap` layers, and after the pipeline's passes a tail (gradient sync and optimizer) of
// tail_t x + tail_h, the step paying its slowest stage's.
struct StageClass {
  int stages = 0;
  double t = 0, h = 0;
  int cap = 0;
  double tail_t = 0, tail_h = 0;
};

// The least bottleneck max_j (t_j x_j + h_j) over integer splits (1 <= x_j <= cap_j, sum x_j =
// layers); infinity when none holds the layers.
double least_bottleneck(const std::vector<StageClass>& stages, int layers);

class PipelineFloor {
 public:
  PipelineFloor() = default;
  // The pipeline of these stages holding `layers` layers. No split fits: fits() is false.
  PipelineFloor(const std::vector<StageClass>& stages, int layers);

  bool fits() const { return !points_.empty(); }
  // At most the pipeline's time for n >= 1 micro-batches over every split (infinity: none fits).
  double at(int64_t n) const;
  // The most micro-batches whose time can be within T: max over the points of floor((T - sum) /
  // Z) + 1 (0 when even one cannot).
  int64_t most_within(double T) const;
  // (Z, least sum with every stage within Z), Z ascending.
  const std::vector<std::pair<double, double>>& points() const { return points_; }

 private:
  std::vector<std::pair<double, double>> points_;
};

// The least T at which pipelines of these floors take `batch` sequences in whole micro-batches:
// each pair is a floor and the sequences a micro-batch gives over the pipelines that share it
// (their count x their micro-batch size); a pipeline runs at most most_within(T) micro-batches
// within T and at least one. At most the least step over every count assignment (the slowest
// pipeline's time, each at least its floor); infinity when some floor fits nothing.
// The least T in [lo, hi] at which taken(T) >= batch, `taken` non-decreasing and changing only at
// the floors' breakpoints (a sum + k Z of their points), given taken(hi) >= batch: at most the
// least such T (a lower bound, found by bisection and then the breakpoints above).
double least_time(const std::function<int64_t(double)>& taken, const std::vector<const PipelineFloor*>& floors,
                  double lo, double hi, int64_t batch);

double least_step(const std::vector<std::pair<const PipelineFloor*, int64_t>>& floors, int64_t batch);

}  // namespace hspmd::planner
