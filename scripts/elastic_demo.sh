#!/usr/bin/env bash
# Elastic training, shown with a real `kill -9` (docs/elastic.md): 4 workers train the tiny Llama
# under examples/strategies/local-dp2-pp2.json with --elastic --max-restarts 1. Once step 3 is
# logged, this script kills rank 2's process with SIGKILL. The survivors detect it, agree, re-plan
# with the planner and move the state from surviving replicas with one fused BSR; the launcher
# restarts rank 2, which rejoins at a step boundary. At the end the run retrains the same steps in
# one process and compares every loss (--check-single): they must match.
# Environment: HSPMD_BIN (default build/release/hspmd), DEMO_DIST_STEPS (default 10), DEMO_RUNS (the
# folder scripts/demo.sh writes, default runs: its dataset kjv-heldout, and this demo's log).
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${HSPMD_BIN:-build/release/hspmd}"
steps="${DEMO_DIST_STEPS:-10}"
runs="${DEMO_RUNS:-runs}"
data=$runs/kjv-heldout
log=$runs/elastic-demo.log
victim=2

if [ ! -f "$data/index.bin" ]; then
  echo "elastic demo: $data is missing; run scripts/demo.sh (make demo) first" >&2
  exit 1
fi
mkdir -p "$runs"

"$bin" train --model configs/llama-tiny.json --data "$data" --steps "$steps" \
  --seq-len 256 --global-batch-tokens 2048 --lr 1e-3 --warmup 5 --threads 1 \
  --strategy examples/strategies/local-dp2-pp2.json --nproc 4 \
  --elastic --max-restarts 1 --cluster examples/clusters/local-hetero-4.json \
  --profile examples/profiles/local-hetero-4-llama-tiny.json \
  --metrics "$runs/elastic-demo-metrics.jsonl" --check-single > "$log" 2>&1 &
launcher=$!
trap 'kill "$launcher" 2>/dev/null || true' EXIT

# The worker process of rank $victim: a child of the launcher with RANK=$victim in its environment.
worker_of() {
  for child in $(pgrep -P "$launcher"); do
    if tr '\0' '\n' < "/proc/$child/environ" 2>/dev/null | grep -qx "RANK=$1"; then
      echo "$child"
      return
    fi
  done
}

until grep -q "step     3/" "$log"; do
  if ! kill -0 "$launcher" 2>/dev/null; then cat "$log"; echo "elastic demo: training ended early" >&2; exit 1; fi
  sleep 0.1
done
pid=$(worker_of "$victim")
echo "== kill -9 of rank $victim (pid $pid) after step 3"
kill -9 "$pid"

status=0
wait "$launcher" || status=$?
trap - EXIT
grep -E "failed with signal|restarting rank|recovery:|switch after|joined the run|step +[0-9]+/|losses match" "$log" |
  grep -v "kernels:" | cut -c1-220
if [ "$status" -ne 0 ] || ! grep -q "losses match the single-process run.*PASS" "$log"; then
  echo "elastic demo: FAILED (exit $status); full log in $log" >&2
  exit 1
fi
echo "elastic demo: the run survived kill -9 of rank $victim and matches one process (log: $log)"
