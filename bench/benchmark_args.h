// The command line of the Google Benchmark programs that run hspmd's kernels: --threads=N (the
// kernels' thread count, kernels::set_num_threads) is taken out, the rest goes to Google Benchmark.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
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

}  // namespace hspmd::bench
