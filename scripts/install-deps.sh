#!/usr/bin/env bash
# Installs every Debian package hspmd needs to build, test and benchmark, then the Python packages
# of its Python module (python/: nanobind and scikit-build-core build it, pytest and NumPy test it)
# from PyPI into the python3 CMake finds. Idempotent: when all are present it only checks and
# returns. Run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake ninja-build
  libopenblas-dev libomp-dev libdnnl-dev
  libgloo-dev libhiredis-dev redis-server
  nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  coinor-libcbc-dev pkg-config
  clang
  python3-dev python3-pip
)
python_packages=(nanobind scikit-build-core pytest numpy)

install_python_packages() {
  python3 -c "import nanobind, scikit_build_core, pytest, numpy" 2>/dev/null && return 0
  echo "install-deps: installing ${python_packages[*]} (pip)"
  local flags=(--quiet)
  # Debian's own python3 refuses pip outside a virtual environment (PEP 668) unless told to.
  if python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
    flags+=(--break-system-packages)
  fi
  python3 -m pip install "${flags[@]}" "${python_packages[@]}"
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  install_python_packages
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
install_python_packages
