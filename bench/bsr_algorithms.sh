#!/usr/bin/env bash
# The paper's three BSR algorithms (its Figure 20) side by side on shaped links with two speed
# tiers: two test hosts as network namespaces (tests/multihost/test_hosts.sh; root), loopback
# within a host, a shaped link between them. The switch is Table 11's C1 -> C2 scaled to
# llama-tiny on 2 hosts x 2 ranks: a heterogeneous strategy whose pipelines cross the hosts, to
# one pipeline per host (every parameter and both Adam moments move).
#
#   bench/bsr_algorithms.sh [--rounds 3] [--rate 100mbit]
#
# Each round runs `hspmd train --switch 2:dp2-pp2.json --switch-bsr ALGO` once per algorithm
# (interleaved, so drift hits all alike) and reads the switch report of rank 0: the BSR's time
# (the slowest rank's), its messages and bytes per link tier. Prints the best of the rounds.
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=3
link_rate=100mbit
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --rate) link_rate=$2; shift 2 ;;
    *) echo "usage: bench/bsr_algorithms.sh [--rounds N] [--rate RATE]" >&2; exit 2 ;;
  esac
done
label=bsr-bench
source tests/multihost/test_hosts.sh

algorithms=(fused per-tensor per-tensor-lowest-owner)
declare -A best line
for round in $(seq "$rounds"); do
  for algo in "${algorithms[@]}"; do
    run="r$round-$algo"
    args=(-- $train --steps 2 --strategy "$work/cross.json" --switch 2:"$work/dp2-pp2.json" --switch-bsr "$algo")
    start_host a "$run" "${args[@]}"
    start_host b "$run" "${args[@]}"
    wait "$launcher_a"; code_a=$?
    wait "$launcher_b"; code_b=$?
    [ $code_a = 0 ] && [ $code_b = 0 ] || fail "$algo: exit codes $code_a/$code_b: $(tail -5 "$work/$run-a.log")"
    report=$(grep -m 1 "switch after step 1" "$work/$run-a.log") || fail "$algo: no switch report"
    seconds=$(echo "$report" | grep -o 'BSR [0-9.]*s' | grep -o '[0-9.]*')
    if [ -z "${best[$algo]:-}" ] || [ "$(echo "$seconds < ${best[$algo]}" | bc)" = 1 ]; then
      best[$algo]=$seconds
      line[$algo]=$(echo "$report" | sed -e 's/.*: \([0-9]* messages\)/\1/' -e 's/; BSR.*//')
    fi
  done
done
echo "$label: best of $rounds rounds, inter-host link $shaping, intra-host loopback"
for algo in "${algorithms[@]}"; do
  printf '%s: %-24s BSR %6.3f s   %s\n' "$label" "$algo" "${best[$algo]}" "${line[$algo]}"
done
