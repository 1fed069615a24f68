#!/usr/bin/env bash
# Installs every Debian package hspmd needs to build, test and benchmark. Idempotent: when all are
# present it only checks and returns. Run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake ninja-build
  libopenblas-dev libomp-dev libdnnl-dev
  libgloo-dev libhiredis-dev redis-server
  nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  coinor-libcbc-dev pkg-config
  clang
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
