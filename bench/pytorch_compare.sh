#!/usr/bin/env bash
# hspmd vs PyTorch CPU training step, side by side in one run (bench/pytorch_compare.py).
#   bench/pytorch_compare.sh [--threads N] [--steps N] [--sizes tiny,16m]
# Uses Debian's /usr/bin/python3 with Debian's python3-torch, installed here with apt-get when
# missing (~47 MB; deliberately not in scripts/install-deps.sh: tests and CI never need it).
# BUILD_DIR selects the build (default build/release); bench_pytorch_compare_bench is built there.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${BUILD_DIR:-build/release}"

if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "pytorch_compare: installing Debian's python3-torch for /usr/bin/python3"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends python3-torch
fi

if [ ! -d "$build" ]; then
  cmake --preset release > /dev/null
fi
cmake --build "$build" --target bench_pytorch_compare_bench -j "$(nproc)" > /dev/null
exec /usr/bin/python3 bench/pytorch_compare.py --binary "$build/bench_pytorch_compare_bench" "$@"
