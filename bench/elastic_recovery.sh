#!/usr/bin/env bash
# Recovery time of elastic training vs today's alternative, side by side (docs/elastic.md).
#   bench/elastic_recovery.sh [--rounds N] [--models tiny,16m]
# For each model, 4 worker processes train under a 2-pipeline x 2-stage data-parallel strategy and
# rank 2 is killed with SIGKILL in the backward pass of step 4 (HSPMD_FAULT). Measured, from the
# kill to the first completed step after it (the redone step 4), in wall time from timestamped log
# lines:
#   elastic   --elastic: detection, agreement, re-plan, state move (one fused BSR), first step;
#   restart   the launcher stops every worker, then `hspmd train --resume` restarts all from a
#             checkpoint written after step 3 (the best case: nothing but step 4 is redone).
# Rounds alternate the two sides; the table keeps the best of each. This host's cores are shared by
# the 4 workers, so both sides run dilated alike.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${HSPMD_BIN:-build/release/hspmd}"
rounds=3
models="tiny,16m"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "elastic_recovery: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "elastic_recovery: $bin not found; run 'make build' first" >&2; exit 1; }
work=runs/bench-elastic
mkdir -p "$work"
data=runs/kjv
[ -f "$data/index.bin" ] || "$bin" data prepare --input data/corpus/kjv-genesis-2kings.txt --output "$data" --append-eos

# Prints every line of stdin prefixed with the wall time it arrived.
stamp() { while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done; }
# The time of the first line of $1 matching $2 (after the line at time $3, if given).
time_of() { awk -v pat="$2" -v after="${3:-0}" '$1 > after && $0 ~ pat { print $1; exit }' "$1"; }

strategy_for() {  # $1 layers, $2 file
  local half=$(($1 / 2))
  cat > "$2" <<EOF
{"name": "dp2-pp2", "zero1": false, "pipelines": [
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-$((half - 1))"}, {"ranks": "1", "layers": "$half-$(($1 - 1))"}]},
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2", "layers": "0-$((half - 1))"}, {"ranks": "3", "layers": "$half-$(($1 - 1))"}]}]}
EOF
}

printf '| model | side | detect s | agree s | re-plan s | state s | first step s | kill -> step done s |\n'
printf '|---|---|---|---|---|---|---|---|\n'
IFS=, read -r -a model_list <<< "$models"
for m in "${model_list[@]}"; do
  case "$m" in
    tiny) config=configs/llama-tiny.json ;;
    16m) config=bench/llama-16m.json ;;
    *) echo "elastic_recovery: unknown model $m (tiny, 16m)" >&2; exit 2 ;;
  esac
  layers=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['num_hidden_layers'])" "$config")
  strategy="$work/dp2-pp2-$m.json"
  strategy_for "$layers" "$strategy"
  profile="$work/profile-$m.json"
  [ -f "$profile" ] || "$bin" profile --model "$config" --devices examples/devices/local-hetero-4.json --out "$profile" > /dev/null
  common=(train --model "$config" --data "$data" --steps 5 --seq-len 128 --global-batch-tokens 512 --threads 1
          --strategy "$strategy" --nproc 4)
  best_e=""; best_r=""; row_e=""; row_r=""
  for ((round = 1; round <= rounds; round++)); do
    # Elastic side.
    log="$work/elastic-$m.log"; metrics="$work/elastic-$m.jsonl"; rm -f "$metrics"
    HSPMD_FAULT=2:4:backward "$bin" "${common[@]}" --elastic --cluster examples/clusters/local-hetero-4.json \
      --profile "$profile" --metrics "$metrics" 2>&1 | stamp > "$log"
    kill_t=$(time_of "$log" "killing myself")
    rec_t=$(time_of "$log" "recovery: re-planned")
    step_t=$(time_of "$log" "step +4/5" "$rec_t")
    read -r agreed planned moved < <(python3 -c "
import json,sys
r=[json.loads(l) for l in open(sys.argv[1]) if '\"recovery\"' in l][0]
print(r['agreed_seconds'], r['planned_seconds'], r['moved_seconds'])" "$metrics")
    e_total=$(python3 -c "print(f'{$step_t - $kill_t:.3f}')")
    if [ -z "$best_e" ] || python3 -c "import sys; sys.exit(0 if $e_total < $best_e else 1)"; then
      best_e=$e_total
      row_e=$(python3 -c "
k,r,s,a,p,mv=$kill_t,$rec_t,$step_t,$agreed,$planned,$moved
print(f'| {\"$m\"} | elastic | {r-mv-k:.3f} | {a:.3f} | {p-a:.3f} | {mv-p:.3f} | {s-r:.3f} | {s-k:.3f} |')")
    fi
    # Restart side: a checkpoint after every step, the run dies with rank 2, then all restart.
    log="$work/restart-$m.log"; ckpt="$work/ckpt-$m"; rm -rf "$ckpt"
    HSPMD_FAULT=2:4:backward "$bin" "${common[@]}" --save "$ckpt" --save-every 1 2>&1 | stamp > "$log" || true
    kill_t=$(time_of "$log" "killing myself")
    stop_t=$(tail -n 1 "$log" | cut -d' ' -f1)
    "$bin" "${common[@]}" --resume "$ckpt" 2>&1 | stamp > "$log.resume"
    step_t=$(time_of "$log.resume" "step +4/5")
    r_total=$(python3 -c "print(f'{$step_t - $kill_t:.3f}')")
    if [ -z "$best_r" ] || python3 -c "import sys; sys.exit(0 if $r_total < $best_r else 1)"; then
      best_r=$r_total
      row_r=$(python3 -c "
k,st,s=$kill_t,$stop_t,$step_t
print(f'| {\"$m\"} | restart from checkpoint | {st-k:.3f} (stop all) | | | | {s-st:.3f} (restart, restore, step 4) | {s-k:.3f} |')")
    fi
  done
  echo "$row_e"
  echo "$row_r"
  python3 -c "print(f'| $m | restart / elastic | | | | | | {$best_r / $best_e:.1f}x |')"
done
