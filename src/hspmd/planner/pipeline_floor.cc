#include "hspmd/planner/pipeline_floor.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace hspmd::planner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// floor(v) with a small tolerance, so that a breakpoint reached by arithmetic stays on its own side.
int64_t floor_tolerant(double v) { return static_cast<int64_t>(std::floor(v * (1 + 1e-12) + 1e-12)); }

// The most layers a stage of this class holds within a stage time Z.
int64_t most_within_time(const StageClass& s, double Z) {
  return s.t > 0 ? std::min<int64_t>(s.cap, floor_tolerant((Z - s.h) / s.t)) : s.cap;
}

}  // namespace

PipelineFloor::PipelineFloor(const std::vector<StageClass>& stages, int layers) {
  int64_t count = 0;
  double one_each = 0;
  std::vector<const StageClass*> by_speed;
  for (const StageClass& s : stages) {
    if (s.stages == 0) continue;
    if (s.cap < 1) return;
    count += s.stages;
    one_each += s.stages * (s.t + s.h);
    by_speed.push_back(&s);
  }
  if (count == 0 || count > layers) return;
  std::sort(by_speed.begin(), by_speed.end(), [](const StageClass* a, const StageClass* b) { return a->t < b->t; });
  const double Z_least = least_bottleneck(stages, layers);
  if (Z_least == kInf) return;
  // The bottlenecks worth trying: every stage time t x + h from the least bottleneck up, in
  // ascending order (a merge of the classes' ascending times: x[i] is class i's next count).
  std::vector<int64_t> x(by_speed.size());
  for (size_t i = 0; i < by_speed.size(); ++i) {
    const StageClass& s = *by_speed[i];
    x[i] = s.t > 0 ? std::max<int64_t>(1, floor_tolerant((Z_least - s.h) / s.t)) : s.cap + 1;
  }
  bool tails = false;
  for (const StageClass* s : by_speed) tails = tails || s->tail_t > 0 || s->tail_h > 0;
  std::vector<std::pair<double, double>> sums;  // (Z, least sum within Z) where the layers fit
  double Z = Z_least;
  while (true) {
    // One layer a stage, the rest on the fastest stages up to their most layers within Z.
    int64_t left = layers - count;
    double sum = one_each;
    bool saturated = true;
    for (const StageClass* s : by_speed) {
      const int64_t most = most_within_time(*s, Z);
      saturated = saturated && most >= s->cap;
      const int64_t take = std::min<int64_t>(left, s->stages * (most - 1));
      sum += static_cast<double>(take) * s->t;
      left -= take;
    }
    if (left <= 0) sums.push_back({Z, sum});
    if (saturated) break;  // a larger Z changes no stage's most layers
    // The next stage time above Z.
    double next = kInf;
    for (size_t i = 0; i < by_speed.size(); ++i) {
      const StageClass& s = *by_speed[i];
      while (x[i] <= s.cap && s.t * static_cast<double>(x[i]) + s.h <= Z * (1 + 1e-12)) ++x[i];
      if (x[i] <= s.cap) next = std::min(next, s.t * static_cast<double>(x[i]) + s.h);
    }
    if (next == kInf) break;
    Z = next;
  }
  // Every split within Z also ends with its slowest stage's tail: at least W(Z), the least
  // bottleneck of the tails within the same most layers. W falls as Z grows (more room), so W at a
  // larger Z is at most W(Z): it is found exactly at every 8th Z and the last, and the Z between
  // take the next one found above them (a lower bound at an eighth of the cost).
  std::vector<StageClass> tail_lines;
  double W = 0;
  for (size_t i = sums.size(); i-- > 0;) {
    if (tails && (i % 8 == 0 || i + 1 == sums.size())) {
      tail_lines.clear();
      for (const StageClass* s : by_speed) {
        tail_lines.push_back({s->stages, s->tail_t, s->tail_h, static_cast<int>(most_within_time(*s, sums[i].first))});
      }
      W = least_bottleneck(tail_lines, layers);
    }
    sums[i].second += W;
  }
  double last_sum = kInf;
  for (const auto& [at, sum] : sums) {
    if (sum < last_sum * (1 - 1e-15)) {
      points_.push_back({at, sum});
      last_sum = sum;
    }
  }
  // Only the lines sum + u Z (u = n - 1 >= 0) on the lower envelope matter: where a line is below
  // T so is the envelope, so at() and most_within() are unchanged, and they take a few lines, not
  // one per breakpoint. From u = 0 (the least sum, the largest Z) towards smaller slopes.
  std::vector<std::pair<double, double>> hull;
  auto crossing = [](const std::pair<double, double>& a, const std::pair<double, double>& b) {
    return (b.second - a.second) / (a.first - b.first);  // a's slope above b's, a's sum below
  };
  for (auto it = points_.rbegin(); it != points_.rend(); ++it) {
    while (hull.size() >= 2 && crossing(hull[hull.size() - 2], *it) <= crossing(hull[hull.size() - 2], hull.back())) {
      hull.pop_back();
    }
    hull.push_back(*it);
  }
  points_.assign(hull.rbegin(), hull.rend());
}

double least_bottleneck(const std::vector<StageClass>& stages, int layers) {
  double inverse = 0, Z = 0;
  int64_t count = 0;
  for (const StageClass& s : stages) {
    if (s.stages == 0) continue;
    if (s.cap < 1) return kInf;
    count += s.stages;
    Z = std::max(Z, s.t + s.h);  // every stage holds a layer
    if (s.t > 0) inverse += s.stages / s.t;
  }
  if (count == 0 || count > layers) return kInf;
  if (inverse > 0) {
    // The real-valued balance: sum_j (Z - h_j) / t_j = L at the least, with every h_j at its most.
    double weighted = 0;
    for (const StageClass& s : stages) {
      if (s.stages > 0 && s.t > 0) weighted += s.stages * s.h / s.t;
    }
    Z = std::max(Z, (layers + weighted) / inverse);
  }
  for (int step = 0; step <= 4 * layers + 4; ++step) {
    int64_t held = 0;
    double next = kInf;
    for (const StageClass& s : stages) {
      if (s.stages == 0) continue;
      const int64_t most = s.t > 0 ? std::min<int64_t>(s.cap, floor_tolerant((Z - s.h) / s.t)) : s.cap;
      held += s.stages * most;
      if (most < s.cap) next = std::min(next, s.t * static_cast<double>(most + 1) + s.h);
    }
    if (held >= layers) return Z;
    if (next == kInf) return kInf;  // the stages hold fewer than the layers
    Z = next;
  }
  return Z;  // not reached: a safe (lower) value if it were
}

double PipelineFloor::at(int64_t n) const {
  double out = kInf;
  for (const auto& [Z, sum] : points_) out = std::min(out, sum + static_cast<double>(n - 1) * Z);
  return out;
}

int64_t PipelineFloor::most_within(double T) const {
  int64_t out = 0;
  for (const auto& [Z, sum] : points_) {
    if (T >= sum * (1 - 1e-12)) out = std::max(out, floor_tolerant((T - sum) / Z) + 1);
  }
  return out;
}

double least_time(const std::function<int64_t(double)>& taken, const std::vector<const PipelineFloor*>& floors,
                  double lo, double hi, int64_t batch) {
  if (taken(lo) >= batch) return lo;
  // Bisection keeps enough at hi and not at lo; the least T is a breakpoint sum + k Z above lo.
  for (int i = 0; i < 60 && hi - lo > 1e-9 * hi; ++i) {
    const double mid = lo + (hi - lo) / 2;
    (taken(mid) >= batch ? hi : lo) = mid;
  }
  for (int step = 0; step < 64; ++step) {
    double next = hi;
    for (const PipelineFloor* f : floors) {
      for (const auto& [Z, sum] : f->points()) {
        const double at_next = lo < sum ? sum : sum + static_cast<double>(floor_tolerant((lo - sum) / Z) + 1) * Z;
        next = std::min(next, at_next);
      }
    }
    if (taken(next) >= batch) return next;
    lo = next;  // not enough there either: the least T lies above
  }
  return lo;  // not enough at lo: a lower bound
}

double least_step(const std::vector<std::pair<const PipelineFloor*, int64_t>>& floors, int64_t batch) {
  double lo = 0, hi = 0;
  int64_t weight = 0;
  std::vector<const PipelineFloor*> all;
  for (const auto& [f, w] : floors) {
    if (!f->fits()) return kInf;
    lo = std::max(lo, f->at(1));  // every pipeline runs a micro-batch
    weight += w;
    all.push_back(f);
  }
  if (weight <= 0) return kInf;
  // Every pipeline running ceil(batch / weight) micro-batches takes the batch.
  for (const auto& [f, w] : floors) hi = std::max(hi, f->at((batch + weight - 1) / weight));
  auto taken = [&](double T) {
    int64_t out = 0;
    for (const auto& [f, w] : floors) out += w * f->most_within(T);
    return out;
  };
  return least_time(taken, all, lo, std::max(lo, hi), batch);
}

}  // namespace hspmd::planner
