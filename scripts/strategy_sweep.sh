#!/usr/bin/env bash
# A longer sweep of generated strategies (tests/runtime/generated_strategies_dist_test.cc): COUNT
# cases from SEED, each two random strategies on 2 to 6 ranks and a switch between them, each
# either refused before launch with a reason or trained and compared with one process. Prints
# every case and the counts; exits non-zero when a trained case differs from one process.
#   scripts/strategy_sweep.sh [COUNT=100] [SEED=1] [FIRST=0]
# FIRST skips running the cases before it (they are still generated): rerun case 108 of seed 3
# alone with `scripts/strategy_sweep.sh 109 3 108`.
# Environment: BUILD_DIR (default build/release).
set -euo pipefail
cd "$(dirname "$0")/.."
count="${1:-100}"
seed="${2:-1}"
first="${3:-0}"
test_bin="${BUILD_DIR:-build/release}/runtime_generated_strategies_dist_test"
if [ ! -x "$test_bin" ]; then
  echo "strategy_sweep: $test_bin not found; build it with" \
       "'cmake --build --preset release --target runtime_generated_strategies_dist_test'" >&2
  exit 1
fi
HSPMD_GENERATED_CASES="$count" HSPMD_GENERATED_SEED="$seed" HSPMD_GENERATED_FIRST="$first" "$test_bin" --gtest_brief=0
