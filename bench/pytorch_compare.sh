#!/usr/bin/env bash
# hspmd vs PyTorch CPU training step, side by side in one run (bench/pytorch_compare.py).
#   bench/pytorch_compare.sh [--threads N] [--steps N] [--rounds N] [--sizes tiny,16m] [--no-torch-bf16]
# PyTorch sides:
#   - Debian's python3-torch (1.13) for /usr/bin/python3, installed with apt-get when missing (~47 MB);
#   - PyTorch 2.x from PyPI in a virtual environment this script creates outside the source tree,
#     at $HSPMD_TORCH2_VENV (default ~/.cache/hspmd/torch2-venv). PyPI's Linux wheels bring their
#     CUDA libraries along (several GB, once); HSPMD_TORCH2_VENV=none skips this side.
# Neither is in scripts/install-deps.sh on purpose: tests and CI never need PyTorch.
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

venv="${HSPMD_TORCH2_VENV:-$HOME/.cache/hspmd/torch2-venv}"
torch2_python=""
if [ "$venv" != none ]; then
  if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
    echo "pytorch_compare: creating $venv with PyTorch 2.x from PyPI"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "torch>=2"
  fi
  torch2_python="$venv/bin/python"
fi

if [ ! -d "$build" ]; then
  cmake --preset release > /dev/null
fi
cmake --build "$build" --target bench_pytorch_compare_bench -j "$(nproc)" > /dev/null
exec /usr/bin/python3 bench/pytorch_compare.py --binary "$build/bench_pytorch_compare_bench" \
  --torch2-python "$torch2_python" "$@"
