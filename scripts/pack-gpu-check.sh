#!/usr/bin/env bash
# Builds the GPU tests (label gpu: every gpu_*_test program, one per tests/gpu/*_test.cc but the
# *_host_test.cc ones, which need no GPU), the CUDA kernel benchmark and hspmd itself (for the Llama
# benchmark, bench/gpu_llama.py, packed with its model config) and packs them for a machine with a
# CUDA device but without this machine's Debian packages (no network there): the stripped
# programs, the shared libraries they load that such an image lacks (oneDNN, OpenMP,
# libstdc++, the CUDA runtime ...), and, for an image whose C library is older than this
# machine's, this machine's C library and loader. The
# CUDA driver and cuBLASLt (540 MB) are not packed: the device image has the driver and the CUDA 13
# toolkit. Everything goes into one xz archive; scripts/gpu-check.sh unpacks and runs it there.
#
#   scripts/pack-gpu-check.sh [PACK_DIR]    # default gpu-pack/ (ignored by git); prints its size
#
# Environment: PRESET (default release), JOBS (parallel build jobs, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

pack=${1:-gpu-pack}
preset=${PRESET:-release}
build=build/$preset
max_bytes=$((60 * 1024 * 1024))

[[ -f $build/build.ninja ]] || cmake --preset "$preset" >/dev/null
grep -q "HSPMD_CUDA:BOOL=ON" "$build/CMakeCache.txt" || {
  echo "pack-gpu-check: $build was configured without HSPMD_CUDA (the CUDA toolkit was not found)" >&2
  exit 1
}
cmake --build --preset "$preset" -j "${JOBS:-2}" --target tests_gpu bench_cuda_kernels_bench hspmd

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/glibc" "$stage/bench"
tests=("$build"/gpu_*_test)
[[ -e ${tests[0]} ]] || { echo "pack-gpu-check: no gpu_*_test in $build" >&2; exit 1; }
for t in "${tests[@]}" "$build/bench_cuda_kernels_bench" "$build/hspmd"; do
  strip -o "$stage/bin/$(basename "$t")" "$t"
done
cp bench/gpu_llama.py bench/model_flops.py bench/llama-1b.json "$stage/bench/"

# Every library the tests load, by the path it resolves to here.
missing=$(ldd "$stage"/bin/* | grep "not found" || true)
[[ -z $missing ]] || { echo "pack-gpu-check: unresolved libraries: $missing" >&2; exit 1; }
while read -r lib; do
  name=$(basename "$lib")
  case $name in
    libcuda.so*|libcublas.so*|libcublasLt.so*) ;;  # the device's driver and toolkit provide them
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux-x86-64.so.*)
      cp -L "$lib" "$stage/glibc/$name" ;;          # used only through the packed loader
    *) cp -L "$lib" "$stage/lib/$name" ;;
  esac
done < <(ldd "$stage"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | sort -u)

{
  echo "built from $(git rev-parse HEAD 2>/dev/null || echo unknown) on $(uname -n), $(date -u +%FT%TZ)"
  echo "glibc $(ldd --version | head -1 | awk '{print $NF}'), $(g++ --version | head -1), $("$(grep -m1 "^CUDAToolkit_NVCC_EXECUTABLE:" "$build/CMakeCache.txt" | cut -d= -f2)" --version | tail -1)"
  (cd "$stage" && find . -type f -printf '%s\t%p\n' | sort -k2)
} > "$stage/MANIFEST"

rm -rf "$pack"
mkdir -p "$pack"
tar -C "$stage" -cf - . | xz -T1 -6 > "$pack/gpu-check.tar.xz"
cp "$stage/MANIFEST" "$pack/MANIFEST"
bytes=$(du -cb "$pack" | tail -1 | cut -f1)
unpacked=$(du -sb "$stage" | cut -f1)
echo "pack-gpu-check: $pack holds ${#tests[@]} test programs, the kernel benchmark and hspmd, $((bytes / 1024 / 1024)) MiB ($bytes bytes; $((unpacked / 1024 / 1024)) MiB unpacked)"
if ((bytes > max_bytes)); then
  echo "pack-gpu-check: $pack is over 60 MiB" >&2
  exit 1
fi
