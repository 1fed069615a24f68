#!/usr/bin/env bash
# Runs hspmd on two test hosts made of network namespaces: each host is a namespace with its own
# address, joined to a third namespace holding a bridge (the "switch") by a veth pair whose switch
# end is shaped with tc netem (bandwidth and latency). Redis, with a password, runs on host A.
# Every host runs one `hspmd launch` with 2 workers; nothing but these namespaces' addresses is used.
#
#   cross     a heterogeneous strategy whose pipelines cross the hosts, and a switch whose BSR
#             moves state across them: every step's loss equals one process's (--check-single)
#   killed    every process of host B is killed (kill -9): A goes on from its replica
#   partition host B's link goes down: A (with the store) goes on; B's launcher finds the store
#             unreachable, fences its workers and exits 76 by itself; B never writes to the run again
#
#   tests/multihost/multihost_test.sh [case...]      (root; HSPMD_BINARY_DIR=build/release)
#
# Exits 77 (ctest: skipped) with the reason when namespaces cannot be made here (not root, no
# `ip`, no netem, no redis-server). Everything it made is removed on exit, failure included.
# Prints the recovery time of the killed and the partitioned host (wall time from the failure to
# the first step the survivors finish after their recovery) as "measured: ..." lines.
set -uo pipefail
cd "$(dirname "$0")/../.."
source_dir=$(pwd)
bin="${HSPMD_BINARY_DIR:-build/release}/hspmd"
cases=("${@:-cross killed partition}")
cases=(${cases[*]})

skip() { echo "multihost: SKIPPED: $*"; exit 77; }
fail() { echo "multihost: FAILED: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces"
command -v ip > /dev/null || skip "no 'ip' command (Debian package iproute2)"
command -v tc > /dev/null || skip "no 'tc' command (Debian package iproute2)"
redis=$(command -v redis-server) || skip "redis-server is not installed (Debian package redis-server)"
[ -x "$bin" ] || fail "$bin is not built"

tag="hm$$"                    # names of this run's namespaces and links (15 characters at most)
ns_sw="${tag}sw" ns_a="${tag}a" ns_b="${tag}b"
addr_a=10.77.0.1 addr_b=10.77.0.2 port=6390
work=$(mktemp -d /tmp/hspmd-multihost.XXXXXX)
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null; wait "$p" 2> /dev/null; done
  for ns in "$ns_a" "$ns_b" "$ns_sw"; do
    for p in $(ip netns pids "$ns" 2> /dev/null); do kill -9 "$p" 2> /dev/null; done
    ip netns del "$ns" 2> /dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# --- the hosts ---------------------------------------------------------------------------------
ip netns add "$ns_sw" 2> "$work/ns.err" || skip "cannot create network namespaces: $(cat "$work/ns.err")"
ip netns add "$ns_a" && ip netns add "$ns_b" || fail "ip netns add"
in_ns "$ns_sw" ip link add br0 type bridge && in_ns "$ns_sw" ip link set br0 up || fail "bridge"
for host in a b; do
  ns="${tag}${host}"; addr=$([ $host = a ] && echo $addr_a || echo $addr_b)
  ip link add "${tag}${host}0" netns "$ns" type veth peer name "${tag}${host}1" netns "$ns_sw" || fail "veth for $host"
  in_ns "$ns" ip link set lo up
  in_ns "$ns" ip addr add "$addr/24" dev "${tag}${host}0"
  in_ns "$ns" ip link set "${tag}${host}0" up
  in_ns "$ns_sw" ip link set "${tag}${host}1" master br0
  in_ns "$ns_sw" ip link set "${tag}${host}1" up
  # The inter-host link: 1 Gbit/s and 1 ms each way with netem; kernels without sch_netem get the
  # bandwidth alone from a token bucket (tbf). The switch end shapes what reaches the host.
  if ! in_ns "$ns_sw" tc qdisc add dev "${tag}${host}1" root netem delay 1ms rate 1gbit 2> /dev/null; then
    in_ns "$ns_sw" tc qdisc add dev "${tag}${host}1" root tbf rate 1gbit burst 256kb latency 100ms 2> "$work/tc.err" ||
      skip "tc can shape no link here (neither netem nor tbf): $(cat "$work/tc.err")"
    shaping="1 Gbit/s (tbf; this kernel has no netem, so no added latency)"
  else
    shaping="1 Gbit/s and 1 ms each way (netem)"
  fi
done
echo "multihost: hosts $addr_a and $addr_b, links shaped to $shaping"

# --- the store: Redis on host A, with a password ------------------------------------------------
password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
umask 077
echo "$password" > "$work/password"
printf 'bind %s\nport %s\nrequirepass %s\nsave ""\nappendonly no\n' "$addr_a" "$port" "$password" > "$work/redis.conf"
in_ns "$ns_a" "$redis" "$work/redis.conf" > "$work/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "Ready to accept connections" "$work/redis.log" && break; sleep 0.1; done
grep -q "Ready to accept connections" "$work/redis.log" || fail "redis did not start: $(tail -3 "$work/redis.log")"
store="redis://$addr_a:$port"

# The store refuses a client without the password (from host B, across the link).
if in_ns "$ns_b" "$bin" launch -n 1 --store "$store" --run-id probe --insecure-store -- /bin/true > "$work/probe.log" 2>&1; then
  fail "the store accepted a client without its password"
fi
grep -q "refused access: NOAUTH" "$work/probe.log" || fail "unexpected refusal: $(cat "$work/probe.log")"
if in_ns "$ns_b" "$bin" launch -n 1 --store "$store" --run-id probe -- /bin/true > "$work/probe.log" 2>&1; then
  fail "a non-loopback store without a password was not refused"
fi
grep -q "is on another host and has no password" "$work/probe.log" || fail "unexpected error: $(cat "$work/probe.log")"

# --- the training runs ----------------------------------------------------------------------------
"$bin" data prepare --input data/corpus/kjv-genesis-2kings.txt --output "$work/kjv" > "$work/prepare.log" 2>&1 ||
  fail "data prepare: $(tail -3 "$work/prepare.log")"
cat > "$work/cross.json" << 'JSON'
{"name": "hetero-cross", "zero1": false,
 "pipelines": [
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-0"}, {"ranks": "2", "layers": "1-3"}]},
  {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "1", "layers": "0-2"}, {"ranks": "3", "layers": "3-3"}]}]}
JSON
cat > "$work/dp2-pp2.json" << 'JSON'
{"name": "dp2-pp2", "zero1": false,
 "pipelines": [
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]},
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]}
JSON
# The cluster as it is here: ranks 0-1 on host A (node 0), 2-3 on host B (node 1).
sed -e 's/"id": 2, "node": 0/"id": 2, "node": 1/' -e 's/"id": 3, "node": 0/"id": 3, "node": 1/' \
  examples/clusters/local-hetero-4.json > "$work/cluster.json"
grep -q '"id": 3, "node": 1' "$work/cluster.json" || fail "cannot make the two-host cluster file"
train="$bin train --model configs/llama-tiny.json --data $work/kjv --seq-len 64 --global-batch-tokens 256 --threads 1
  --warmup 2 --lr 2.5e-4 --min-lr 2.5e-5 --cluster $work/cluster.json
  --profile examples/profiles/local-hetero-4-llama-tiny.json --heartbeat-timeout 2"

# start_host HOST RUN ARGS...: one launcher on HOST (a or b), its output in $work/RUN-HOST.log.
start_host() {
  local host=$1 run=$2; shift 2
  local ns="${tag}${host}" addr node
  addr=$([ "$host" = a ] && echo $addr_a || echo $addr_b)
  node=$([ "$host" = a ] && echo 0 || echo 1)
  in_ns "$ns" "$bin" launch -n 2 --nnodes 2 --node-rank "$node" --store "$store" --store-password-file "$work/password" \
    --run-id "$run" --host "$addr" "$@" > "$work/$run-$host.log" 2>&1 &
  pids+=($!)
  eval "launcher_$host=$!"
}

now() { date +%s.%N; }
# wait_for_line FILE REGEX SECONDS: 0 when the line appeared in time.
wait_for_line() {
  local deadline=$(( $(date +%s) + $3 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do grep -qE "$2" "$1" && return 0; sleep 0.05; done
  return 1
}
# The first step line after the recovery report, on host A (rank 0 logs the steps).
wait_for_step_after_recovery() {
  local deadline=$(( $(date +%s) + $2 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    awk '/recovery: re-planned/ {r = 1} r && /\[rank 0\] step / {found = 1} END {exit !found}' "$1" && return 0
    sleep 0.05
  done
  return 1
}

run_cross() {
  local switch="--switch 4:$work/dp2-pp2.json"
  start_host a cross -- $train --steps 6 --strategy "$work/cross.json" $switch --check-single
  start_host b cross -- $train --steps 6 --strategy "$work/cross.json" $switch
  wait "$launcher_a"; local code_a=$?
  wait "$launcher_b"; local code_b=$?
  [ $code_a = 0 ] && [ $code_b = 0 ] || fail "cross: exit codes $code_a/$code_b: $(tail -20 "$work/cross-a.log")"
  grep -q "PASS" "$work/cross-a.log" || fail "cross: losses differ from one process: $(grep -iE 'check|loss' "$work/cross-a.log" | tail -5)"
  grep -E "switch (before step 4|after step 3)" "$work/cross-a.log" | grep -q "inter-node" ||
    fail "cross: no switch across the hosts: $(grep -E 'switch' "$work/cross-a.log" | tail -3)"
  echo "multihost: cross: pipelines across hosts and a switch across hosts equal one process"
}

run_killed() {
  start_host a killed --elastic --heartbeat-timeout 2 -- $train --steps 12 --strategy "$work/dp2-pp2.json" --elastic
  start_host b killed --elastic --heartbeat-timeout 2 -- $train --steps 12 --strategy "$work/dp2-pp2.json" --elastic
  wait_for_line "$work/killed-a.log" '\[rank 0\] step +3/' 120 || fail "killed: no step 3: $(tail -20 "$work/killed-a.log")"
  local t0; t0=$(now)
  for p in $(ip netns pids "$ns_b"); do kill -9 "$p"; done   # every process of host B, launcher included
  wait_for_step_after_recovery "$work/killed-a.log" 120 || fail "killed: A did not go on: $(tail -20 "$work/killed-a.log")"
  local t1; t1=$(now)
  wait "$launcher_a"; local code_a=$?
  [ $code_a = 0 ] || fail "killed: host A exit code $code_a: $(tail -20 "$work/killed-a.log")"
  grep -q "recovery: ranks \[2,3\] lost" "$work/killed-a.log" || fail "killed: no recovery: $(tail -20 "$work/killed-a.log")"
  echo "multihost: killed: host B killed, host A finished"
  echo "multihost: measured: killed host: $(echo "$t1 - $t0" | bc) s from kill -9 to the first step after the recovery; $(grep -o '[0-9.]*s agreement.*in all)' "$work/killed-a.log" | head -1)"
}

run_partition() {
  start_host a partition --elastic --heartbeat-timeout 2 -- $train --steps 14 --strategy "$work/dp2-pp2.json" --elastic
  start_host b partition --elastic --heartbeat-timeout 2 -- $train --steps 14 --strategy "$work/dp2-pp2.json" --elastic
  wait_for_line "$work/partition-a.log" '\[rank 0\] step +3/' 120 || fail "partition: no step 3: $(tail -20 "$work/partition-a.log")"
  local t0; t0=$(now)
  in_ns "$ns_sw" ip link set "${tag}b1" down    # host B is cut off; its processes keep running
  wait "$launcher_b"; local code_b=$?
  local t_b; t_b=$(now)
  [ $code_b = 76 ] || fail "partition: host B's launcher exited $code_b, not 76 (cut off): $(tail -20 "$work/partition-b.log")"
  grep -q "this host is cut off from the run" "$work/partition-b.log" || fail "partition: $(tail -10 "$work/partition-b.log")"
  [ -z "$(ip netns pids "$ns_b")" ] || fail "partition: processes of host B still run after its launcher exited"
  wait_for_step_after_recovery "$work/partition-a.log" 120 || fail "partition: A did not go on: $(tail -20 "$work/partition-a.log")"
  local t1; t1=$(now)
  # Host B never writes to the run again: with the link back up, its heartbeat keys stay as they were.
  in_ns "$ns_sw" ip link set "${tag}b1" up
  local before after
  before=$(REDISCLI_AUTH="$password" in_ns "$ns_a" redis-cli -h "$addr_a" -p "$port" mget run/partition/hb/2 run/partition/hb/3 2> /dev/null | tr '\n' ' ')
  wait "$launcher_a"; local code_a=$?
  after=$(REDISCLI_AUTH="$password" in_ns "$ns_a" redis-cli -h "$addr_a" -p "$port" mget run/partition/hb/2 run/partition/hb/3 2> /dev/null | tr '\n' ' ')
  [ $code_a = 0 ] || fail "partition: host A exit code $code_a: $(tail -20 "$work/partition-a.log")"
  [ "$before" = "$after" ] || fail "partition: host B's heartbeats changed after it was cut off ($before -> $after)"
  grep -q "recovery: ranks \[2,3\] lost" "$work/partition-a.log" || fail "partition: no recovery on A"
  echo "multihost: partition: host A finished; host B stopped itself (exit 76) and wrote nothing more"
  echo "multihost: measured: partitioned host: B stopped $(echo "$t_b - $t0" | bc) s after its link went down (heartbeat timeout 2 s); A's first step after the recovery $(echo "$t1 - $t0" | bc) s after; $(grep -o '[0-9.]*s agreement.*in all)' "$work/partition-a.log" | head -1)"
}

for c in "${cases[@]}"; do
  case "$c" in
    cross) run_cross ;;
    killed) run_killed ;;
    partition) run_partition ;;
    *) fail "unknown case '$c' (cross, killed, partition)" ;;
  esac
done
echo "multihost: all cases passed"
