#!/usr/bin/env bash
# Fuzzes the parsers of user-supplied files with libFuzzer for a bounded time.
#
#   scripts/fuzz.sh 30          # each target 30 s (default 20)
#   FUZZ_TARGETS="strategy safetensors" scripts/fuzz.sh 60
#   FUZZ_SEED=1 scripts/fuzz.sh 20   # the same mutations every run (CI), instead of a random seed
#
# Builds fuzz/ with clang -fsanitize=fuzzer,address,undefined in build/fuzz (its own build dir),
# seeds each target from the repository's own examples (fuzz/corpus/TARGET plus the example JSON
# files of its kind), runs each for SECONDS, and fails when any target finds a crash, a leak, a
# sanitizer report or an input slower than 10 s. Inputs that fail are kept in build/fuzz/findings/;
# the corpus grown by earlier runs is kept in build/fuzz/corpus/ and reused.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-20}"
build=build/fuzz
targets=(${FUZZ_TARGETS:-strategy topology emulation llama_config safetensors bpe_tokenizer token_dataset store_records})

command -v clang++ > /dev/null || { echo "fuzz: clang++ not found (apt-get install clang)" >&2; exit 1; }

start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS="-O1 -g" -DHSPMD_FUZZ=ON -DHSPMD_BUILD_TESTS=OFF -DHSPMD_BUILD_BENCH=OFF \
  -DHSPMD_CUDA=OFF > "$build.configure.log" 2>&1 || { cat "$build.configure.log" >&2; exit 1; }
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target $(printf 'fuzz_%s ' "${targets[@]}")
echo "fuzz: built ${#targets[@]} targets in $(( $(date +%s) - start )) s"

# The example files each parser reads in normal use.
seeds_of() {
  case "$1" in
    strategy) echo examples/strategies ;;
    topology) echo examples/clusters ;;
    emulation) echo examples/devices ;;
    llama_config) echo configs ;;
  esac
}

mkdir -p "$build/findings"
failed=()
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  mkdir -p "$corpus"
  seeds=()
  [ -d "fuzz/corpus/$t" ] && seeds+=("fuzz/corpus/$t")
  extra="$(seeds_of "$t")"
  [ -n "$extra" ] && seeds+=("$extra")
  log="$build/$t.log"
  seed_flag=()
  [ -n "${FUZZ_SEED:-}" ] && seed_flag=(-seed="$FUZZ_SEED")
  if "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
       -print_final_stats=1 "${seed_flag[@]}" -artifact_prefix="$build/findings/$t-" "$corpus" "${seeds[@]}" > "$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
    echo "fuzz: $t: ok, $runs inputs in ${seconds} s, coverage $cov edges, corpus $(ls "$corpus" | wc -l) files"
  else
    echo "fuzz: $t: FAILED (log $log, inputs in $build/findings/):" >&2
    grep -m 5 -E 'ERROR|SUMMARY|deadly signal|Test unit written' "$log" >&2 || tail -20 "$log" >&2
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: no findings in ${#targets[@]} targets x ${seconds} s (total $(( $(date +%s) - start )) s)"
