#!/usr/bin/env bash
# Runs every benchmark program of the release build (`make bench`, after `make build`), one after
# the other. Extra arguments go to each program (e.g. --threads=1 --benchmark_filter=attention).
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
benches=(build/release/bench_*)
if [ ${#benches[@]} -eq 0 ]; then
  echo "bench: no build/release/bench_* programs; run 'make build' first" >&2
  exit 1
fi
status=0
for b in "${benches[@]}"; do
  [ -x "$b" ] || continue
  # Not a Google Benchmark program: it needs a config and an output folder, and its own script
  # (which also runs PyTorch) drives it.
  if [ "$(basename "$b")" = bench_pytorch_compare_bench ]; then
    echo "=== $b: skipped (run bench/pytorch_compare.sh)"
    continue
  fi
  echo "=== $b"
  # From the build folder, where the programs find the repository's files (data, configs).
  (cd "$(dirname "$b")" && "./$(basename "$b")" "$@") || { echo "bench: $b failed" >&2; status=1; }
done
exit $status
