#!/usr/bin/env bash
# The GPU check: one command on a machine with a CUDA device. Runs every GPU test (label gpu) from
# a pack made by scripts/pack-gpu-check.sh (gpu_profile_test among them: `hspmd profile --device
# cuda:0`'s measurement, whose figures it prints into tests.log), then the CUDA kernel benchmark (GEMM rates, kernel
# bandwidths), then the 1.1B Llama training benchmark against PyTorch (bench/gpu_llama.py), and
# writes a report; no build, no network.
#
#   scripts/gpu-check.sh [PACK_DIR] [REPORT_DIR]   # defaults: gpu-pack, then $OUT, else gpu-check-report
#
# Report: summary.txt (one line per test program: PASSED / FAILED / SKIPPED / TIMEOUT / NOT RUN,
# seconds, gtest's counts; then the benchmarks' exit codes), tests.log (every program's output),
# bench.txt and bench.json (the kernel benchmark's table, and its JSON: the Llama benchmark's GEMM
# rate), bench-llama.txt (the Llama benchmark's table) with bench-llama/ (its logs and
# results.json), device.txt (nvidia-smi, the libraries resolved). Exits 0 when every program
# passed, 77 when all were skipped (no device), 1 otherwise.
#
# Time: the whole check ends within GPU_CHECK_BUDGET seconds of its start (default 450, under the
# 8-minute mark with room for the report to come back). Each test program gets TEST_TIMEOUT seconds
# (default 120), less when that would leave under 60 s of the budget; a program that would start
# with under 60 s left is NOT RUN. The kernel benchmark gets at most 120 s of what is left, the
# Llama benchmark at most BENCH_LLAMA_BUDGET (default 180) s of the rest, and is stopped at the
# budget's end (bench/gpu_llama.py stops starting runs then, and prints what it measured).
#
# Libraries: the packed ones first, then the CUDA toolkit's and any PyTorch wheel's (nvidia/*/lib)
# for cuBLASLt. If the image's C library is older than the one the tests were built against, the
# tests run through the packed loader and C library instead.
set -uo pipefail
cd "$(dirname "$0")/.."

pack=${1:-gpu-pack}
report=${2:-${OUT:-gpu-check-report}}
test_timeout=${TEST_TIMEOUT:-120}
budget=${GPU_CHECK_BUDGET:-450}
deadline=$((SECONDS + budget))
left() { echo $((deadline - SECONDS)); }
mkdir -p "$report"
summary=$report/summary.txt log=$report/tests.log device=$report/device.txt
: >"$summary"
: >"$log"

[[ -f $pack/gpu-check.tar.xz ]] || { echo "gpu-check: no $pack/gpu-check.tar.xz (run scripts/pack-gpu-check.sh)" | tee "$summary"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xJf "$pack/gpu-check.tar.xz"

libpath=$work/lib
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64 \
           /usr/lib/x86_64-linux-gnu; do
  [[ -d $dir ]] && libpath+=:$dir
done
torch_libs=$(python3 -c 'import glob, os, nvidia; print(":".join(sorted({p for d in nvidia.__path__ for p in glob.glob(os.path.join(d, "**", "lib"), recursive=True)})))' 2>/dev/null || true)
[[ -n $torch_libs ]] && libpath+=:$torch_libs
[[ -n ${LD_LIBRARY_PATH:-} ]] && libpath+=:$LD_LIBRARY_PATH

tests=("$work"/bin/gpu_*_test)
# Direct, or through the packed loader when the image's C library cannot start the programs (exit
# 127, or a loader error; 77 is a started program finding no device). GPU_CHECK_LOADER=packed
# forces the packed loader.
runner=(env "LD_LIBRARY_PATH=$libpath")
"${runner[@]}" "${tests[0]}" --gtest_list_tests >/dev/null 2>"$work/probe.err"
probe=$?
if [[ ${GPU_CHECK_LOADER:-} == packed ]] || { [[ $probe != 0 && $probe != 77 ]]; }; then
  runner=("$work/glibc/ld-linux-x86-64.so.2" --library-path "$work/glibc:$libpath")
  echo "gpu-check: using the packed loader (direct start: exit $probe, $(head -c 300 "$work/probe.err"))" | tee -a "$log"
fi

{
  echo "== $(date -u +%FT%TZ) $(uname -n)"
  nvidia-smi 2>&1 || echo "nvidia-smi failed"
  echo "== packed: $(head -2 "$work/MANIFEST" | tr '\n' ' ')"
  echo "== runner: ${runner[*]:0:2}"
  echo "== libraries of ${tests[0]##*/}:"
  LD_LIBRARY_PATH=$libpath ldd "${tests[0]}" 2>&1
} >"$device"

passed=0 failed=0 skipped=0 not_run=0
for t in "${tests[@]}"; do
  name=${t##*/}
  # 60 s of the budget stay for the benchmarks.
  limit=$(($(left) - 60))
  ((limit > test_timeout)) && limit=$test_timeout
  if ((limit < 10)); then
    printf '%-28s %-22s\n' "$name" "NOT RUN (budget)" | tee -a "$summary"
    not_run=$((not_run + 1))
    continue
  fi
  start=$(date +%s%N)
  echo "===== $name" >>"$log"
  timeout --kill-after=5 "$limit" "${runner[@]}" "$t" --gtest_color=no >"$work/out" 2>&1
  rc=$?
  tenths=$((($(date +%s%N) - start) / 100000000))
  cat "$work/out" >>"$log"
  counts=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) +\]" "$work/out" | tr -s ' ' | tr '\n' ' ')
  case $rc in
    0) verdict=PASSED; passed=$((passed + 1)) ;;
    77) verdict=SKIPPED; skipped=$((skipped + 1)); counts=$(grep -m1 SKIPPED "$work/out") ;;
    124|137) verdict="TIMEOUT after ${limit}s"; failed=$((failed + 1)) ;;
    *) verdict="FAILED (exit $rc)"; failed=$((failed + 1)) ;;
  esac
  printf '%-28s %-22s %4d.%d s  %s\n' "$name" "$verdict" $((tenths / 10)) $((tenths % 10)) "$counts" | tee -a "$summary"
done
echo "gpu-check: ${#tests[@]} programs: $passed passed, $failed failed, $skipped skipped, $not_run not run" \
  "($((budget - $(left))) s of the ${budget} s budget)" | tee -a "$summary"
((not_run > 0)) && failed=$((failed + not_run))

# Google Benchmark 1.7 (Debian 12's, packed): --benchmark_min_time takes plain seconds.
bench=$report/bench.txt
limit=$(left)
((limit > 120)) && limit=120
if [[ -x $work/bin/bench_cuda_kernels_bench ]] && ((limit >= 10)); then
  timeout --kill-after=5 "$limit" "${runner[@]}" "$work/bin/bench_cuda_kernels_bench" --benchmark_min_time=0.2 \
    --benchmark_counters_tabular=true --benchmark_out="$report/bench.json" --benchmark_out_format=json >"$bench" 2>&1
  echo "gpu-check: kernel benchmark exit $? (bench.txt)" | tee -a "$summary"
fi

# The Llama benchmark: hspmd through the runner (a wrapper script), PyTorch in the image's python3.
llama_budget=$(($(left) - 10))
((llama_budget > ${BENCH_LLAMA_BUDGET:-180})) && llama_budget=${BENCH_LLAMA_BUDGET:-180}
if [[ -x $work/bin/hspmd && -f $work/bench/gpu_llama.py ]] && ((llama_budget >= 30)); then
  hspmd_run=$work/hspmd-run
  { echo '#!/usr/bin/env bash'; printf 'exec'; printf ' %q' "${runner[@]}" "$work/bin/hspmd"; echo ' "$@"'; } >"$hspmd_run"
  chmod +x "$hspmd_run"
  # The script keeps to its budget; the timeout is the backstop.
  BENCH_LLAMA_BUDGET=$llama_budget timeout --kill-after=5 $((llama_budget + 5)) python3 "$work/bench/gpu_llama.py" \
    --hspmd "$hspmd_run" --config "$work/bench/llama-1b.json" --gemm-json "$report/bench.json" \
    --out "$report/bench-llama" >"$report/bench-llama.txt" 2>&1
  echo "gpu-check: Llama benchmark exit $? in a budget of ${llama_budget} s (bench-llama.txt)" | tee -a "$summary"
else
  echo "gpu-check: Llama benchmark not run ($(left) s of the budget left, or not packed)" | tee -a "$summary"
fi
echo "gpu-check: done in $((budget - $(left))) s" | tee -a "$summary"
((failed > 0)) && exit 1
((passed == 0 && skipped > 0)) && exit 77
exit 0
