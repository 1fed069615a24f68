// What the Google Benchmark programs that run hspmd's kernels share: their command line (--threads=N,
// the kernels' thread count, is taken out; the rest goes to Google Benchmark) and a reporter that
// keeps each benchmark's counters for the summary table a program prints after the runs.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "hspmd/kernels/threading.h"

namespace hspmd::bench {

// false when Google Benchmark found an argument it does not know (it has said which).
inline bool init_benchmark_with_threads(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      kernels::set_num_threads(std::atoi(argv[i] + 10));
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  return !benchmark::ReportUnrecognizedArguments(n, args.data());
}

// Prints the usual console lines and keeps, per benchmark and counter, the largest value over the
// repetitions (rates and peaks alike). On a noisy host run with
//   --benchmark_repetitions=8 --benchmark_enable_random_interleaving=true
// so that the repetitions of all benchmarks interleave and a table's ratios are best-of-8 against
// best-of-8.
class BestCounterReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred || run.run_type == Run::RT_Aggregate) continue;
      for (const auto& [counter, value] : run.counters) {
        double& best = best_[run.benchmark_name()][counter];
        best = std::max(best, static_cast<double>(value.value));
      }
    }
  }
  // benchmark name (with its "/real_time" suffix) -> counter -> best value
  const std::map<std::string, std::map<std::string, double>>& best() const { return best_; }

 private:
  std::map<std::string, std::map<std::string, double>> best_;
};

}  // namespace hspmd::bench
